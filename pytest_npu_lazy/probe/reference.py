"""The eager reference a compiled first call is compared with, and what computed each side.

Where the function runs on a device that computes for itself (a real NPU, the CPU), the
reference is the same function, eager, on copies of the inputs where they are. On the
emulated NPU that computes (``--npu-lazy-cann=compute``) an eager reference on ``npu``
tensors would be computed by the same host kernels the compiled call's fallbacks used, so
it runs on CPU copies of the inputs instead (a module's parameters too): ATen's CPU kernels,
independent of the emulation.

Host numerics are part of that choice, stated rather than hidden behind a tolerance: ATen's
CPU kernels round bfloat16 and float16 after every operator, while Inductor's kernels upcast
to float32 and round once. So with bfloat16 / float16 inputs on the emulated NPU the
reference runs on float32 copies and each output is rounded once to the compiled output's
dtype. A mismatch says which reference it was and what computed the compiled side (the
Triton kernels the interpreter ran, the operators the host computed).
"""

from __future__ import annotations

import copy
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable

from ..cann.compute.ledger import TRITON_INTERPRETER, Computation


def _low_precision():
    import torch

    return (torch.bfloat16, torch.float16)


def emulated_npu_computes() -> bool:
    """``--npu-lazy-cann=compute`` is in force in this process and torch_npu is loaded."""
    from ..cann.common import ENV_MODE

    return os.environ.get(ENV_MODE) == "compute" and "torch_npu" in sys.modules


def _leaves(tree) -> list:
    from torch.utils._pytree import tree_leaves

    return tree_leaves(tree)


def _on_npu(value) -> bool:
    import torch

    return isinstance(value, torch.Tensor) and value.device.type == "npu"


@dataclass
class EagerReference:
    """The function and its input copies, made before the compiled call can touch the inputs."""

    fn: Callable
    args: Any
    kwargs: Any
    on_host: bool = False  # on CPU copies of npu inputs (the emulated NPU that computes)
    upcast: bool = False  # bfloat16 / float16 copies in float32, outputs rounded once

    @classmethod
    def for_call(cls, fn: Callable, args: tuple, kwargs: dict) -> "EagerReference":
        import torch

        leaves = _leaves((args, kwargs))
        on_host = emulated_npu_computes() and (any(_on_npu(x) for x in leaves) or _module_on_npu(fn))
        upcast = on_host and any(isinstance(x, torch.Tensor) and x.dtype in _low_precision() for x in leaves)
        copies = _copies((args, kwargs), on_host, upcast)
        fn = _host_module(fn) if on_host else fn
        return cls(fn, copies[0], copies[1], on_host, upcast)

    def run(self):
        return self.fn(*self.args, **self.kwargs)

    def assert_matches(self, actual, expected, tolerances: dict, phase: str, computed: list[Computation]) -> None:
        __tracebackhide__ = True
        import torch

        by = None
        if self.on_host:
            actual, expected = _to_cpu(actual), _to_cpu(expected)
            expected = _round_like(expected, actual) if self.upcast else expected
            by = _what_computed(computed, self.upcast)
        try:
            torch.testing.assert_close(actual, expected, **tolerances)
        except AssertionError as exc:
            said = f"\n{by}" if by else ""
            raise AssertionError(f"npu_lazy: the compiled output of {phase!r} differs from eager:\n{exc}{said}") \
                from None


def _module_on_npu(fn) -> bool:
    import torch

    return isinstance(fn, torch.nn.Module) and any(_on_npu(t) for t in (*fn.parameters(), *fn.buffers()))


def _host_module(fn):
    """A module's reference runs on a CPU copy of it (its parameters and buffers)."""
    import torch

    return copy.deepcopy(fn).to("cpu") if isinstance(fn, torch.nn.Module) else fn


def _copies(tree, to_cpu: bool, upcast: bool):
    import torch
    from torch.utils._pytree import tree_map

    def copy_of(x):
        if not isinstance(x, torch.Tensor):
            return x
        if not to_cpu:
            return x.clone()
        host = x.detach().cpu().clone()
        if upcast and host.dtype in _low_precision():
            host = host.float()
        return host.requires_grad_(x.requires_grad)

    return tree_map(copy_of, tree)


def _to_cpu(tree):
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda x: x.cpu() if isinstance(x, torch.Tensor) else x, tree)


def _round_like(expected, actual):
    """The float32 reference rounded once to each compiled output's bfloat16 / float16 dtype."""
    import torch
    from torch.utils._pytree import tree_flatten, tree_unflatten

    expected_leaves, spec = tree_flatten(expected)
    actual_leaves, _ = tree_flatten(actual)
    if len(expected_leaves) != len(actual_leaves):
        return expected  # assert_close names the difference in structure
    rounded = [e.to(a.dtype) if isinstance(e, torch.Tensor) and isinstance(a, torch.Tensor)
               and a.dtype in _low_precision() and e.dtype == torch.float32 else e
               for e, a in zip(expected_leaves, actual_leaves)]
    return tree_unflatten(rounded, spec)


def _what_computed(entries: list[Computation], upcast: bool) -> str:
    """The compute mode's words for a mismatch: what computed the compiled result, and the reference."""
    kernels = list(dict.fromkeys(e.name for e in entries if e.by == TRITON_INTERPRETER))
    others = sorted({f"{e.by}: {e.name}" for e in entries if e.by != TRITON_INTERPRETER})
    ran = f"Triton kernels in Triton's interpreter ({', '.join(kernels)})" if kernels else "no Triton kernel"
    host = f"; besides: {', '.join(others[:8])}{' ...' if len(others) > 8 else ''}" if others else ""
    if upcast:
        reference = ("eager reference: the same function on CPU copies of the inputs upcast to float32, each output "
                     "rounded once to the compiled output's dtype: Inductor's numerics for bfloat16 and float16 (its "
                     "kernels compute in float32 and round once; ATen's CPU kernels would round after every operator)")
    else:
        reference = "eager reference: the same function on CPU copies of the inputs (ATen's CPU kernels)"
    return f"compiled on the emulated NPU (--npu-lazy-cann=compute): {ran}{host}\n{reference}"
