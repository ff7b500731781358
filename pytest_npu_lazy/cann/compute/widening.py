"""A kernel's loops over sub-blocks of a pointwise axis, run wide where that provably changes no value.

torch_npu's index codegen writes a kernel's block as nested loops, one per axis, over sub-blocks of
``<A>BLOCK_SUB`` elements (a compile-time constant of the launch):

    base_x2 = tl.arange(0, X2BLOCK_SUB)
    loops_x2 = (x2_numel + X2BLOCK_SUB - 1) // X2BLOCK_SUB
    for loop_x2 in range(loops_x2):
        x2 = (loop_x2 * X2BLOCK_SUB) + base_x2[None, None, None, :]
        x2_mask = x2 < x2_numel
        ...

Triton's interpreter runs each iteration as Python over one sub-block; its cost is per iteration, not per
element. torch_npu's ``test_sum_add.py`` sums (32, 64, 128, 2048) float32 over its first axis in 32
programs of 2,048 iterations each, about a million interpreted operations. Launched with a wider
``X2BLOCK_SUB`` (a power-of-two multiple of it), the same loop covers the same elements in fewer iterations:
``loop * SUB + arange(SUB)`` over ``ceil(extent / SUB)`` iterations, masked to the extent, is every index of
the extent once whatever ``SUB`` is. Each element is computed by the same operations on the same values
exactly when nothing in the kernel relates two elements along a widened axis, which is read from the source
before it is allowed, axis by axis:

- the axis's ``BLOCK_SUB`` is a parameter used only for its ``tl.arange``, its loop count
  ``(EXTENT + SUB - 1) // SUB`` (``EXTENT`` a parameter), its offset ``loop * SUB`` and the sizes of shapes;
  its loop variable only in that offset, its ``arange`` only in that index;
- the layout of every block-shaped value (which axis each position holds) is followed through the kernel:
  no reduction or scan runs along the axis, a reshape only adds or drops positions of size 1 (the others keep
  their order), nothing permutes, transposes, sorts, gathers, joins or multiplies blocks, and no two axes meet
  in one position;
- every store's address is a pointer argument plus axis indices times integer constants (and fixed scalars)
  and holds the axis; the launch checks, with its sizes, that it gives every element of a program's block an
  address of its own; a pointer the kernel stores to is loaded and stored at that one address; no value
  computed in the loop is carried into the next iteration or used after it;
- only the functions of Triton's language and math that compute element by element, the torch and torch_npu
  helpers :mod:`.layouts` lists, and Python's ``min``/``max`` on scalars are called; no atomics, no truth test
  of a block, no ``return`` before the end; at run time no two tensor arguments share memory (the same tensor
  passed twice included).

:mod:`.layouts` reads the source; this module sizes the launch and checks it.
A reduction along another axis gives the same bits for a wide block as for a narrow one because a float sum
is taken in an order that depends on the reduced row only (:func:`.reductions.accumulate`). ``BLOCK_SUB``
grows in powers of two up to the extent, innermost axis first, while the block (every ``BLOCK_SUB`` of the
kernel multiplied) stays within :data:`WIDE_BLOCK_ELEMENTS`, and the loop touches the same indices as
launched (``ceil(extent / SUB) * SUB`` of them: nothing beyond what the launch as given computed, loaded or
stored) unless every load and store of the kernel is masked by the axis's own mask (``a < a_numel``, or
``a < min(ABLOCK + a_offset, a_numel)`` for an index offset by ``a_offset``): past its extent such an axis's
elements touch no memory, and nothing mixes them into another element. Each launch's ledger entry says what
was widened (``sub-blocks widened: x2 256 -> 2048, y1 1 -> 4: 2048 iterations as 64``) or why not.
``PYTEST_NPU_LAZY_SUBBLOCKS_AS_LAUNCHED=1`` runs every kernel with the sub-blocks it was launched with;
``PYTEST_NPU_LAZY_SUBBLOCKS_CHECK=1`` runs every widened launch both ways and fails, naming the kernel, if
any bit of any tensor argument differs (test/npu_kernels/test_widening.py).
"""

from __future__ import annotations

import functools
import inspect
import math
import os

from .host_kernels import nonempty_storage_ranges
from .layouts import SUFFIX, Plan, plan_source

#: run every kernel with the sub-blocks it was launched with (``1``)
AS_LAUNCHED_ENV = "PYTEST_NPU_LAZY_SUBBLOCKS_AS_LAUNCHED"
#: the most elements a widened block may hold (every BLOCK_SUB multiplied): Triton's own limit on a block
#: (``TRITON_MAX_TENSOR_NUMEL``), 4 MiB of float32, where an iteration's Python (about 1 ms for torch_npu's sum
#: kernels) stops mattering beside its NumPy
WIDE_BLOCK_ELEMENTS = 1 << 20
#: run every widened launch both ways and compare every bit of every tensor argument (``1``)
CHECK_ENV = "PYTEST_NPU_LAZY_SUBBLOCKS_CHECK"


@functools.lru_cache(maxsize=512)
def _plan_for(code: object, parameters: tuple[str, ...]) -> Plan:
    try:
        source = inspect.getsource(code)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return Plan(reason="its source cannot be read")
    try:
        return plan_source(source, list(parameters))
    except SyntaxError:
        return Plan(reason="its source does not parse on its own")
    except Exception as error:  # a reading not foreseen: the kernel runs as launched, and the ledger says why
        return Plan(reason=f"its source could not be read ({type(error).__name__}: {error})")


def plan(fn, parameters: list[str]) -> Plan:
    return _plan_for(getattr(fn, "__code__", fn), tuple(parameters))


def widths(executor, args: tuple, kwargs: dict) -> tuple[dict, str]:
    """The ``BLOCK_SUB`` keywords to launch with instead (empty: as launched), and the ledger's words for it."""
    names = list(executor.arg_names)
    if not any(name.endswith(SUFFIX) for name in names):
        return {}, ""
    if os.environ.get(AS_LAUNCHED_ENV) == "1":
        return {}, f"sub-blocks as launched ({AS_LAUNCHED_ENV}=1)"
    decided = plan(executor.fn, names)
    if not decided.axes:
        return {}, f"sub-blocks as launched: {decided.reason}"
    bound = {**dict(zip(names, args)), **kwargs, **decided.constants}
    if _sharing_memory([value for value in bound.values() if hasattr(value, "untyped_storage")]):
        return {}, "sub-blocks as launched: two tensor arguments share memory"
    given = {name: bound.get(name) for name in names if name.endswith(SUFFIX)}
    given.update(decided.constants)
    sizes = {name: value for name, value in given.items() if isinstance(value, int) and value >= 1}
    if len(sizes) != len(given):
        return {}, "sub-blocks as launched: a BLOCK_SUB not passed as an integer"
    spans = _spans(decided, bound)
    if spans is None or any(not _distinct(store, spans, bound, decided.extents) for store in decided.stores):
        return {}, "sub-blocks as launched: a store's address could repeat within a program's block"
    block = math.prod(sizes.values())
    wider: dict[str, int] = {}
    said = []
    before = after = 1
    for axis in reversed(decided.order):  # innermost first: the widest contiguous loads
        name, extent = decided.axes[axis], bound.get(decided.extents.get(axis, ""))
        launched = sizes[name]
        if not isinstance(extent, int) or extent < 1 or launched & (launched - 1):
            continue
        width, covered = launched, _covered(extent, launched)
        free = axis in decided.masked  # past its extent, its elements touch no memory
        while width < extent and block * 2 <= WIDE_BLOCK_ELEMENTS and (free or _covered(extent, width * 2) == covered):
            width, block = width * 2, block * 2
        before *= -(-extent // launched)
        after *= -(-extent // width)
        if width != launched:
            wider[name] = width
            said.append(f"{axis} {launched} -> {width}")
    if not wider:
        spanned = before == 1
        return {}, ("sub-blocks as launched: each spans its axis already" if spanned else
                    "sub-blocks as launched: no wider sub-block touches the same indices within the size limit")
    return wider, f"sub-blocks widened: {', '.join(said)}: {before} iterations as {after}"


def _sharing_memory(tensors: list) -> bool:
    """Two tensor arguments over the same bytes, the same tensor passed twice included: one pointer's loads and
    stores are checked against each other, two pointers' never."""
    spans = sorted(nonempty_storage_ranges(tensors))
    return any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:]))


def _spans(decided: Plan, bound: dict) -> dict | None:
    """How many indices each axis's index takes within a program: a loop over sub-blocks touches
    ``ceil(extent / SUB) * SUB`` (the same launched and widened), an arange alone its ``SUB``; None where a size
    cannot be read."""
    spans = {}
    for axis, sub in decided.subs.items():
        size = bound.get(sub)
        extent = bound.get(decided.extents[axis]) if axis in decided.extents else None
        if not isinstance(size, int) or (axis in decided.extents and not isinstance(extent, int)):
            return None
        spans[axis] = _covered(extent, size) if extent is not None else size
    return spans


def _distinct(store: tuple, spans: dict, bound: dict, extents: dict) -> bool:
    """No two elements of a block store to one address: ``sum(coefficient * index)`` is one-to-one where, taken by
    growing coefficient, each coefficient exceeds the largest offset of the terms before it (a mixed radix). A
    coefficient is the product of its factors: integer constants and parameters, read at this launch. An axis the
    store's mask bounds to its extent spans at most the extent."""
    address, bounded = store
    terms = []
    for axis, factors in address:
        read = [int(f) if f.lstrip("-").isdigit() else bound.get(f) for f in factors]
        values = [v for v in read if isinstance(v, int)]
        if axis not in spans or len(values) != len(read):
            return False
        span = spans[axis]
        extent = bound.get(extents.get(axis, ""))
        if axis in bounded and isinstance(extent, int):
            span = min(span, max(extent, 1))
        terms.append((math.prod(values), span))
    reach = 0
    for coefficient, span in sorted(terms):
        if coefficient <= reach:
            return False
        reach += coefficient * (span - 1)
    return reach < 1 << 31  # an index past int32 could wrap onto another (Triton computes offsets in int32)


def _covered(extent: int, width: int) -> int:
    """How many indices the loop touches, masked or not: ``ceil(extent / width) * width``. A wider sub-block is
    taken only where it touches the same ones, so no index outside the extent is computed, loaded or stored that
    the launch as given did not (an index of the next program's block included), whatever the kernel masks."""
    return -(-extent // width) * width


class WideningChanged(AssertionError):
    """Under ``PYTEST_NPU_LAZY_SUBBLOCKS_CHECK=1``: a widened launch wrote other bits than the launch as given."""


def run_both_ways(run, kernel: str, args: tuple, kwargs: dict, wider: dict, alias) -> object:
    """Run the launch as given and widened, from the same memory, and fail naming the kernel and the argument where
    any bit of a tensor argument differs; ``alias`` gives a CPU view of a tensor's bytes (no computation recorded)."""
    import torch

    tensors = {name: alias(value) for name, value in (*enumerate(args), *kwargs.items())
               if hasattr(value, "untyped_storage")}
    before = {name: view.clone() for name, view in tensors.items()}
    run(kwargs)
    narrow = {name: view.clone() for name, view in tensors.items()}
    for name, view in tensors.items():
        view.copy_(before[name])
    result = run({**kwargs, **wider})
    for name, view in tensors.items():
        if not torch.equal(_bits(view), _bits(narrow[name])):
            differ = int((_bits(view) != _bits(narrow[name])).sum())
            raise WideningChanged(f"Triton kernel {kernel}: widened sub-blocks ({wider}) wrote other bits than the "
                                  f"launch as given in argument {name} ({differ} elements differ)")
    return result


def _bits(tensor):
    import torch

    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()]
    return tensor.contiguous().view(view)
