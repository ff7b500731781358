"""The eager reference a compiled first call is compared with, what computed each side, and its gradients.

Where the function runs on a device that computes for itself (a real NPU, the CPU), the
reference is the same function, eager, on copies of the inputs where they are. On the
emulated NPU that computes (``--npu-lazy-cann=compute``) an eager reference on ``npu``
tensors would be computed by the same host kernels the compiled call's fallbacks used, so
it runs on CPU copies instead: of the inputs, of a module's parameters and buffers, and of
the ``npu`` tensors and modules the function reaches through its closure, its defaults and
the globals it names (:mod:`.host_copy`). What it reaches another way (a helper function's
closure) stops that reference with a mixed-devices error; the reference then runs on the
emulated device itself, on copies of the inputs taken before the compiled call, and says so.

Host numerics are part of that choice, stated rather than hidden behind a tolerance: where
bfloat16 or float16 values take part, Inductor's kernels compute in float32 and round each
output once, while eager ATen rounds after every operator (a single operator rounds once on
both sides). So on the host the reference runs in float32 (inputs, parameters, captured
tensors) and each output is rounded once to the compiled output's dtype: the kernel is checked
against its own numerics, with the dtype's tolerance.

Every comparison is kept as a :class:`Check`: per output, what produced the compiled value (a
Triton kernel in the interpreter, the host's ATen operator, the device, an input returned
unchanged), and which reference it was compared with. The reports read them.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Callable

from ..cann.compute.ledger import HOST_ATEN, LEDGER, TRITON_INTERPRETER
from . import host_copy

#: what produced a compiled output, besides the ledger's ``by`` (a Triton kernel, a host ATen operator)
BY_DEVICE = "device"
UNCHANGED = "unchanged input"

REFERENCES = {
    "same device": "eager reference: the same function on copies of the inputs, on the same device",
    "host": "eager reference: the same function on CPU copies of the inputs, parameters and captured tensors "
            "(ATen's CPU kernels)",
    "host float32": "eager reference: the same function on CPU copies in float32 (inputs, parameters and captured "
                    "tensors), each output rounded once to the compiled output's dtype: Inductor's numerics for "
                    "bfloat16 and float16 (its kernels compute in float32 and round once)",
    "emulated device": "eager reference: the same function on the emulated NPU (ATen's CPU kernels on its host "
                       "memory), on copies of the inputs taken before the compiled call: the function reaches npu "
                       "tensors a CPU copy could not replace ({why})",
}


def emulated_npu_computes() -> bool:
    """``--npu-lazy-cann=compute`` is in force in this process and torch_npu is loaded."""
    from ..cann.common import ENV_MODE

    return os.environ.get(ENV_MODE) == "compute" and "torch_npu" in sys.modules


def _leaves(tree) -> list:
    from torch.utils._pytree import tree_leaves

    return tree_leaves(tree)


def _mixed_devices(error: BaseException) -> bool:
    text = str(error)
    return "same device" in text or "two devices" in text or "Expected all tensors to be on" in text


@dataclass
class Check:
    """One comparison of a compiled call with its reference, as plain data for the reports."""

    phase: str
    reference: str
    outputs: list[dict] = field(default_factory=list)
    gradients: list[dict] = field(default_factory=list)
    passed: bool = True

    def to_dict(self) -> dict:
        return {"phase": self.phase, "reference": self.reference, "outputs": list(self.outputs),
                "gradients": list(self.gradients), "passed": self.passed}


class EagerReference:
    """The function and its input copies, made before the compiled call can touch the inputs."""

    def __init__(self, fn: Callable, args: tuple, kwargs: dict) -> None:
        import torch

        self.original = (args, kwargs)
        self.on_host = emulated_npu_computes() and host_copy.reaches_npu(fn, args, kwargs)
        self.upcast = self.on_host and host_copy.reaches_low_precision(fn, args, kwargs)
        self.kind = ("host float32" if self.upcast else "host") if self.on_host else "same device"
        self.why_not_host = ""
        copier = host_copy.HostCopier(upcast=self.upcast) if self.on_host else None
        self.fn = copier.function(fn) if copier else fn
        self.args, self.kwargs = copier.tree((args, kwargs)) if copier else host_copy.clones((args, kwargs))
        # the inputs as they were, on their device, for a reference the host cannot take
        self._device_fn = fn
        self._device_inputs = host_copy.clones((args, kwargs)) if self.on_host else None
        self._torch = torch

    @classmethod
    def for_call(cls, fn: Callable, args: tuple, kwargs: dict) -> "EagerReference":
        return cls(fn, args, kwargs)

    def run(self):
        """The reference's result: on the host where it can be, else on the device the function reaches."""
        try:
            return self.fn(*self.args, **self.kwargs)
        except RuntimeError as error:
            if not (self.on_host and _mixed_devices(error)):
                raise
            first_line = str(error).strip().splitlines()[0]
            self.kind, self.upcast, self.on_host, self.why_not_host = "emulated device", False, False, first_line
            self.fn, (self.args, self.kwargs) = self._device_fn, self._device_inputs
            return self.fn(*self.args, **self.kwargs)

    @property
    def description(self) -> str:
        return REFERENCES[self.kind].format(why=self.why_not_host)

    def inputs_after(self):
        """The reference's inputs after it ran: in-place updates are outputs too."""
        return self.args, self.kwargs

    def compare(self, actual, expected, tolerances: dict, phase: str, since: int,
                actual_inputs=None) -> Check:
        """Compare the compiled outputs (and inputs it updated in place) with the reference's; a Check either way,
        an AssertionError naming what computed each side where they differ."""
        __tracebackhide__ = True
        check = Check(phase=phase, reference=self.description)
        check.outputs = provenance(actual, since)
        pairs = [("output", actual, expected)]
        if actual_inputs is not None:
            pairs.append(("input updated in place", *self._updated_inputs(actual_inputs)))
        for what, compiled, reference in pairs:
            error = self._difference(compiled, reference, tolerances)
            if error is not None:
                check.passed = False
                raise _mismatch(f"the compiled {what} of {phase!r} differs from eager", error, check)
        return check

    def _difference(self, compiled, reference, tolerances: dict) -> AssertionError | None:
        compiled, reference = _to_cpu(compiled), _to_cpu(reference)
        if self.upcast:
            reference = _round_like(reference, compiled)
        try:
            self._torch.testing.assert_close(compiled, reference, **tolerances)
        except AssertionError as error:
            return error
        return None

    def _updated_inputs(self, actual_inputs):
        """The tensor inputs, compiled side and reference side, where either changed them in place."""
        compiled = [x for x in _leaves(actual_inputs) if _is_tensor(x)]
        reference = [x for x in _leaves(self.inputs_after()) if _is_tensor(x)]
        return compiled, reference

    # -- gradients ----------------------------------------------------------
    def compare_gradients(self, compiled_grads: list, reference_grads: list, names: list[str], tolerances: dict,
                          phase: str, since: int, check: Check) -> None:
        __tracebackhide__ = True
        check.gradients = [dict(row, of=name) for name, row in zip(names, provenance(compiled_grads, since))]
        for name, compiled, reference in zip(names, compiled_grads, reference_grads):
            if compiled is None and reference is None:
                continue
            if (compiled is None) != (reference is None):
                check.passed = False
                raise _mismatch(f"the gradient of {name} after {phase!r}",
                                AssertionError(f"compiled: {'none' if compiled is None else 'a tensor'}, eager: "
                                               f"{'none' if reference is None else 'a tensor'}"), check)
            error = self._difference(compiled, reference, tolerances)
            if error is not None:
                check.passed = False
                raise _mismatch(f"the gradient of {name} after {phase!r} differs from eager's", error, check)


def _is_tensor(value) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


#: the attribute of a mismatch's AssertionError that holds its Check, for the reports
CHECK_ATTRIBUTE = "npu_lazy_check"


def _mismatch(headline: str, error: AssertionError, check: Check) -> AssertionError:
    mismatch = AssertionError(f"npu_lazy: {headline}:\n{error}\n{describe(check)}")
    setattr(mismatch, CHECK_ATTRIBUTE, check)
    return mismatch


def _to_cpu(tree):
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda x: x.detach().cpu() if isinstance(x, torch.Tensor) else x, tree)


def _round_like(expected, actual):
    """The float32 reference rounded once to each compiled output's bfloat16 / float16 dtype."""
    import torch
    from torch.utils._pytree import tree_flatten, tree_unflatten

    expected_leaves, spec = tree_flatten(expected)
    actual_leaves, _ = tree_flatten(actual)
    if len(expected_leaves) != len(actual_leaves):
        return expected  # assert_close names the difference in structure
    rounded = [e.to(a.dtype) if isinstance(e, torch.Tensor) and isinstance(a, torch.Tensor)
               and a.dtype in host_copy.low_precision() and e.dtype == torch.float32 else e
               for e, a in zip(expected_leaves, actual_leaves)]
    return tree_unflatten(rounded, spec)


def provenance(tree, since: int) -> list[dict]:
    """Per tensor leaf of a compiled result: what produced it, from the compute mode's ledger where it keeps one."""
    import torch

    rows = []
    for index, value in enumerate(_leaves(tree)):
        if not isinstance(value, torch.Tensor):
            continue
        row = {"index": index, "dtype": str(value.dtype).replace("torch.", ""), "shape": list(value.shape)}
        if value.device.type == "npu" and emulated_npu_computes():
            storage = value.untyped_storage()
            writer = LEDGER.last_writer(storage.data_ptr(), storage.data_ptr() + storage.nbytes(), since)
            row.update({"by": writer.by, "name": writer.name} if writer is not None else {"by": UNCHANGED, "name": ""})
        else:
            row.update({"by": BY_DEVICE, "name": value.device.type})
        rows.append(row)
    return rows


def describe(check: Check) -> str:
    """What computed the compiled side of a check, output by output, and which reference it was compared with."""
    lines = []
    for kind, rows in (("output", check.outputs), ("gradient", check.gradients)):
        for row in rows:
            what = {TRITON_INTERPRETER: f"Triton kernel {row['name']} in Triton's interpreter",
                    HOST_ATEN: f"the host's ATen kernel {row['name']} (no Triton kernel)",
                    UNCHANGED: "nothing in this call (an input or a buffer as it was)",
                    BY_DEVICE: f"the {row['name']} device"}.get(row["by"], f"{row['by']} {row['name']}")
            of = f" of {row['of']}" if "of" in row else f" {row['index']}"
            lines.append(f"  {kind}{of} ({row['dtype']}{row['shape']}): {what}")
    head = "compiled on the emulated NPU (--npu-lazy-cann=compute):" if emulated_npu_computes() else "compiled:"
    return "\n".join([head, *lines, check.reference])


def gradient_inputs(fn, args, kwargs) -> tuple[list[str], list]:
    """What a backward check differentiates: the tensor inputs that require grad, and the parameters of the modules
    the function is or reaches (its closure, defaults, the globals it names), in an order its copy repeats."""
    import torch

    names, tensors = [], []
    for index, value in enumerate(_leaves((args, kwargs))):
        if isinstance(value, torch.Tensor) and value.requires_grad:
            names.append(f"input {index}")
            tensors.append(value)
    seen: set[int] = set()
    for module in (value for value in host_copy.reached(fn) if isinstance(value, torch.nn.Module)):
        for name, parameter in module.named_parameters():
            if parameter.requires_grad and id(parameter) not in seen:
                seen.add(id(parameter))
                names.append(f"parameter {type(module).__name__}.{name}")
                tensors.append(parameter)
    return names, tensors


def cotangents_for(outputs) -> list:
    """A fixed cotangent per output leaf (the same values on both sides): seeded, not the test's random stream."""
    import torch

    generator = torch.Generator().manual_seed(20261206)
    result: list = []
    for value in _leaves(outputs):
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            result.append(torch.randn(value.shape, generator=generator, dtype=torch.float32))
        else:
            result.append(None)
    return result


def backward(outputs, wrt: list, cotangents: list) -> list:
    """The gradients of ``outputs`` (weighted by ``cotangents``) with respect to ``wrt``; the graph is kept for the
    test's own backward."""
    import torch

    pairs = [(o, c.to(device=o.device, dtype=o.dtype)) for o, c in zip(_leaves(outputs), cotangents)
             if isinstance(o, torch.Tensor) and o.requires_grad and c is not None]
    if not pairs or not wrt:
        return [None] * len(wrt)
    return list(torch.autograd.grad([o for o, _ in pairs], wrt, [c for _, c in pairs], allow_unused=True,
                                    retain_graph=True))


def requires_grad(outputs) -> bool:
    import torch

    return any(isinstance(o, torch.Tensor) and o.requires_grad for o in _leaves(outputs))

