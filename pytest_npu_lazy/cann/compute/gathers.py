"""An interpreted kernel's large loads as NumPy gathers over its launch's argument memory: the same bytes, faster.

Triton's interpreter loads a block element by element in its C++ helper (``interpreter.load``: about 30 ns an
element here, half the time of torch_npu's sum kernels at their real shapes). The emulated NPU's memory is host
memory and a kernel's pointers are addresses in its tensor arguments' storages, so a load whose every unmasked
pointer lies, aligned to the element, within one argument's storage is that storage viewed as the element type
and indexed: ``view[(pointer - start) // itemsize]``, with the masked-out elements taken from ``other`` as the
helper takes them. The bytes read are the helper's, element for element; anything else (a pointer outside every
argument, one not aligned, a boolean load, a small block) goes to the helper as before. ``test_compute_gathers.py``
compares the two bit for bit over masks, offsets, dtypes and strided views.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .host_kernels import nonempty_storage_ranges

if TYPE_CHECKING:  # NumPy is imported where a load runs: the plugin loads this package, and its zygotes stay bare
    import numpy as np

#: a block smaller than this loads through the interpreter's helper (the gather's setup would cost more)
SMALLEST = 4096
#: the storages (start, end) of the launch being run, innermost launch last
_LAUNCHES: list[list[tuple[int, int]]] = []


@contextlib.contextmanager
def launch(tensors: list) -> Iterator[None]:
    """The argument storages of one launch, for the loads it makes."""
    _LAUNCHES.append(nonempty_storage_ranges(tensors))
    try:
        yield
    finally:
        _LAUNCHES.pop()


def gather(pointers: np.ndarray, mask: np.ndarray, other: np.ndarray | None, dtype: np.dtype) -> np.ndarray | None:
    """The loaded block, or None where this path does not apply (the interpreter's helper loads it then)."""
    import numpy as np

    if not _LAUNCHES or pointers.size < SMALLEST or dtype == np.bool_ or pointers.dtype.itemsize != 8:
        return None
    itemsize = dtype.itemsize
    mask = np.broadcast_to(mask, pointers.shape)
    first = int(np.argmax(mask))
    if not mask.flat[first]:
        return None  # nothing to load: the helper returns ``other`` as it is
    anchor = int(pointers.flat[first])
    span = next(((start, end) for start, end in _LAUNCHES[-1] if start <= anchor < end), None)
    if span is None:
        return None
    start, end = span
    offsets = np.where(mask, pointers.astype(np.uint64, copy=False) - np.uint64(start), np.uint64(0))
    if int(offsets.max()) + itemsize > end - start or (offsets % np.uint64(itemsize)).any():
        return None  # a pointer outside this storage (below it wraps around), or not aligned to the element
    memory = (ctypes.c_char * (end - start)).from_address(start)
    view = np.frombuffer(memoryview(memory), dtype=np.uint8, count=(end - start) // itemsize * itemsize).view(dtype)
    values = view[offsets // np.uint64(itemsize)]
    if other is None:
        return np.where(mask, values, np.zeros((), dtype=dtype))
    if other.dtype != dtype:
        return None  # the helper would take other's bytes as they are: not a conversion to copy here
    return np.where(mask, values, np.broadcast_to(other, pointers.shape))


def install(interpreter) -> str:
    """Load through :func:`gather` first; returns what changed, for the header."""
    builder = type(interpreter.interpreter_builder)
    if getattr(builder, "_npu_lazy_gathers", False):
        return ""
    import numpy as np

    helper = builder.create_masked_load
    np_dtype = interpreter._get_np_dtype

    def create_masked_load(self, ptrs, mask, other, cache_modifier, eviction_policy, is_volatile):
        dtype_tt = ptrs.get_element_ty()
        loaded = gather(ptrs.data, mask.data, None if other is None else other.data, np.dtype(np_dtype(dtype_tt)))
        if loaded is None:
            return helper(self, ptrs, mask, other, cache_modifier, eviction_policy, is_volatile)
        return interpreter.TensorHandle(loaded, dtype_tt)

    builder.create_masked_load = create_masked_load
    builder._npu_lazy_gathers = True
    return (f"a load of {SMALLEST} elements or more within one argument's storage is a NumPy gather of the same "
            "bytes (pytest_npu_lazy.cann.compute.gathers)")
