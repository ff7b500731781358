"""torch.export and the ONNX Dynamo exporter set up torch_npu's Dynamo integration, never its Inductor.

Export captures a graph with Dynamo (strict) or with the tracer (non-strict);
neither compiles, so neither may register NPU Inductor, run its set-up or
import torch_npu._inductor, whichever way the entry point was reached: the
module attribute, or a name bound before torch_npu was imported.
"""

from __future__ import annotations

import contextlib

import importlib.util

import pytest
import regressions
from breakage import caught
from facts import DYNAMO_SETUP, INDUCTOR_SETUP, dynamo_trace_initialises_accelerator, needs_deferred_setup

pytestmark = needs_deferred_setup

REGISTER = "torch_npu.utils._dynamo:register_inductor_npu"
REGISTER_BACKENDS = "torch_npu.dynamo:_register_backends"
NPU_INIT = "torch_npu.npu:_lazy_init"
TRACKED = [REGISTER, REGISTER_BACKENDS, NPU_INIT]

#: case -> (how the entry point is reached, its name in torch.export)
EXPORT_ENTRIES = {
    "module_export": ("attribute", "export"),
    "prebound_export": ("prebound", "export"),
    "prebound_export_for_training": ("prebound", "export_for_training"),
    "prebound_export_for_inference": ("prebound", "export_for_inference"),
}
#: case -> (how the entry point is reached, its name in torch.onnx, whether it takes dynamo=True)
ONNX_ENTRIES = {
    "module_export": ("attribute", "export", True),
    "prebound_export": ("prebound", "export", True),
    "prebound_legacy_dynamo_export": ("prebound", "dynamo_export", False),
}
ONNX_MISSING = [name for name in ("onnxscript", "onnx") if importlib.util.find_spec(name) is None]


def _entry(npu_lazy, package: str, how: str, name: str):
    """Import torch_npu (phase 'import') and return ``package.name``, bound before or after that import.

    Skips, naming the torch release and what to install, when torch has no such entry point (PyTorch removed
    ``export_for_training``, ``export_for_inference`` and ``torch.onnx.dynamo_export`` from later releases).
    """
    import importlib

    import torch

    module = importlib.import_module(package)
    if not hasattr(module, name):
        pytest.skip(f"needs a torch that still has {package}.{name}, which PyTorch removed: torch {torch.__version__} "
                    "has none; run this case with an older torch that has it, and the torch_npu built for that torch")
    with npu_lazy.phase("prebind"):
        bound = getattr(module, name) if how == "prebound" else None
    with npu_lazy.phase("import"):
        import torch_npu  # noqa: F401
    npu_lazy.assert_not_loaded("torch._dynamo", "torch_npu._inductor")
    return bound if bound is not None else getattr(importlib.import_module(package), name)


def _expected_npu_inits(strict: bool) -> int:
    """How often exporting a CPU model initialises the NPU: never, except a strict export (a Dynamo trace) where a
    device is present and stock torch's Dynamo asks for the current accelerator stream as every trace starts
    (facts.dynamo_trace_initialises_accelerator): once, on a real NPU as on the emulated one."""
    import torch

    return int(strict and dynamo_trace_initialises_accelerator() is not None and torch.npu.is_available())


def _assert_dynamo_only(npu_lazy, phase: str, strict: bool = False) -> None:
    """After ``phase``: Dynamo's NPU set-up ran exactly once, nothing of NPU Inductor, and the NPU initialised
    only as often as stock Dynamo does it on this machine (see _expected_npu_inits)."""
    npu_lazy.assert_not_loaded("torch_npu._inductor")
    registered = npu_lazy.calls(REGISTER)
    assert registered == 0, f"{REGISTER} was called {registered} time(s) by phase {phase!r}; export must not"
    assert not npu_lazy.ran(INDUCTOR_SETUP), f"{INDUCTOR_SETUP} ran by phase {phase!r}; export must not run it"
    assert npu_lazy.ran(DYNAMO_SETUP), f"{DYNAMO_SETUP} did not run by phase {phase!r}"
    backends = npu_lazy.calls(REGISTER_BACKENDS)
    assert backends == 1, f"torch_npu registered its Dynamo backends {backends} time(s) by phase {phase!r}"
    assert npu_lazy.first_loaded("torch._dynamo") == phase, npu_lazy.explain("torch._dynamo")
    initialised, expected = npu_lazy.calls(NPU_INIT), _expected_npu_inits(strict)
    assert initialised == expected, (f"exporting a CPU model initialised the NPU runtime {initialised} time(s), "
                                     f"expected {expected} ({dynamo_trace_initialises_accelerator() or 'no device'})")
    if expected and npu_lazy.device_calls_recorded:  # the initialisation came from where the facts say
        sets = [call for call in npu_lazy.device_call_records(phase) if call.name == "aclrtSetDevice"]
        assert sets, f"the NPU was initialised in phase {phase!r} without an aclrtSetDevice call"
        assert "torch/accelerator/__init__.py" in sets[0].where(), sets[0].where()
    elif npu_lazy.device_calls_recorded:
        npu_lazy.assert_no_device_calls("aclInit", "aclrtSetDevice", phase=phase)


def _npu_aware_model(torch):
    class NpuAware(torch.nn.Module):
        """Branches on torch.npu.is_available(), which torch_npu's trace rules let Dynamo fold to a constant."""

        def forward(self, x):
            return x * 2 + 1 if torch.npu.is_available() else x * 2 - 1

    return NpuAware()


@pytest.mark.npu_lazy(preload=["torch"], track=TRACKED)
@pytest.mark.parametrize("strict", [True, False], ids=["strict", "non_strict"])
@pytest.mark.parametrize("case", EXPORT_ENTRIES)
def test_npu_export_public_entry_and_import_order_matrix(npu_lazy, case, strict):
    import torch

    export = _entry(npu_lazy, "torch.export", *EXPORT_ENTRIES[case])
    model, x = _npu_aware_model(torch), torch.randn(4)
    with npu_lazy.phase("export"):
        exported = export(model, (x,), strict=strict)
    _assert_dynamo_only(npu_lazy, "export", strict)
    with npu_lazy.phase("run"):
        actual = exported.module()(x)
    torch.testing.assert_close(actual, model(x))
    npu_lazy.assert_not_loaded("torch_npu._inductor")


def _capture_model(torch, name: str):
    """One model per NPU-specific call; what a forward uses is created outside it, as a user's globals are."""
    if name == "is_available":
        class IsAvailable(torch.nn.Module):
            def forward(self, value):
                return value + 1 if torch.npu.is_available() else value - 1

        return IsAvailable()
    if name == "stream_and_event":
        stream, event = torch.npu.Stream(), torch.npu.Event()

        class StreamAndEvent(torch.nn.Module):
            def forward(self, value):
                event.record()
                with torch.npu.stream(stream):
                    event.wait(stream)
                    result = value + 1
                return result

        return StreamAndEvent()
    if name == "record_stream":
        side_stream = torch.npu.Stream()

        class RecordStream(torch.nn.Module):
            def forward(self, value):
                value.record_stream(side_stream)
                return value + 1

        return RecordStream()
    if name == "autocast":
        class Autocast(torch.nn.Module):
            def forward(self, value):
                with torch.npu.amp.autocast(dtype=torch.float16):
                    return value * value

        return Autocast()
    if name == "current_device":
        class CurrentDevice(torch.nn.Module):
            def forward(self, value):
                return value + torch.npu.current_device()

        return CurrentDevice()

    class DeviceProperties(torch.nn.Module):
        def forward(self, value):
            properties = torch.npu.get_device_properties(torch.npu.current_device())
            return value + 1 if properties.total_memory > 0 else value - 1

    return DeviceProperties()


#: capture cases that need a device: their eager forward initialises the NPU
DEVICE_CAPTURES = ("stream_and_event", "record_stream", "autocast", "current_device", "device_properties")
CAPTURES = ["is_available"] + [pytest.param(name, marks=pytest.mark.requires_npu) for name in DEVICE_CAPTURES]


@pytest.mark.npu_lazy(preload=["torch"], track=[REGISTER])
@pytest.mark.parametrize("strict", [True, False], ids=["strict", "non_strict"])
@pytest.mark.parametrize("capture", CAPTURES)
def test_npu_export_capture_semantics_matrix(npu_lazy, capture, strict):
    """NPU-specific calls keep their meaning in the exported program, and export stays Dynamo-only.

    On the host stub only torch.npu.is_available() can run (False); under
    strict export it is captured through torch_npu's constant-fold rule, so
    the graph holds the eager branch and no call. Streams, events,
    record_stream, autocast and device queries initialise the NPU even in
    eager: requires_npu.
    """
    import torch

    with npu_lazy.phase("import"):
        import torch_npu  # noqa: F401
    device = "npu" if capture in DEVICE_CAPTURES else "cpu"
    model, x = _capture_model(torch, capture), torch.ones(4, device=device)
    expected = model(x)
    with npu_lazy.phase("export"):
        exported = torch.export.export(model, (x,), strict=strict)
    npu_lazy.assert_not_loaded("torch_npu._inductor")
    assert npu_lazy.calls(REGISTER) == 0, f"{REGISTER} ran during export"
    assert not npu_lazy.ran(INDUCTOR_SETUP), f"{INDUCTOR_SETUP} ran during phase 'export'"
    assert npu_lazy.ran(DYNAMO_SETUP), f"{DYNAMO_SETUP} did not run during phase 'export'"
    if capture == "is_available":
        calls = [node.target for node in exported.graph.nodes if node.op == "call_function"]
        assert torch.npu.is_available not in calls, f"is_available() stayed a call in the exported graph: {calls}"
    with npu_lazy.phase("run"):
        actual = exported.module()(x)
    torch.testing.assert_close(actual, expected)


@contextlib.contextmanager
def _without_torchs_leafspec_warning():
    """torch 2.13's own ONNX exporter copies a ``LeafSpec``, which torch itself deprecates with a FutureWarning in
    every run (torch's, not torch_npu's nor this project's). Something on the exporter's path sets warning filters of
    its own: neither a ``filterwarnings`` mark nor ``-W error`` reaches that warning (seen: still only a warning).
    Its warnings are recorded here, and every other one is warned again."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for message in caught:
        if "isinstance(treespec, LeafSpec)" not in str(message.message):
            warnings.warn_explicit(message.message, message.category, message.filename, message.lineno)


@pytest.mark.skipif(bool(ONNX_MISSING), reason=f"needs {' and '.join(ONNX_MISSING)} (pinned in requirements/ci.txt)")
@pytest.mark.npu_lazy(preload=["torch"], track=TRACKED)
@pytest.mark.parametrize("case", ONNX_ENTRIES)
def test_npu_onnx_dynamo_export_initialization_chain(npu_lazy, case):
    """The ONNX Dynamo exporter captures through torch.export: Dynamo's NPU set-up only.

    Stricter than a non-None result: the ONNX model runs (ONNX's reference
    evaluator) and equals eager.
    """
    import torch

    how, name, takes_dynamo = ONNX_ENTRIES[case]
    onnx_export = _entry(npu_lazy, "torch.onnx", how, name)

    class SinPlusOne(torch.nn.Module):
        def forward(self, x):
            return torch.sin(x) + 1

    model, x = SinPlusOne().eval(), torch.randn(8)
    with npu_lazy.phase("onnx_export"), _without_torchs_leafspec_warning():
        program = onnx_export(model, (x,), dynamo=True) if takes_dynamo else onnx_export(model, x)
    _assert_dynamo_only(npu_lazy, "onnx_export")
    with npu_lazy.phase("onnx_run"):
        from onnx.reference import ReferenceEvaluator

        proto = program.model_proto
        (actual,) = ReferenceEvaluator(proto).run(None, {proto.graph.input[0].name: x.numpy()})
    torch.testing.assert_close(torch.from_numpy(actual), model(x))
    npu_lazy.assert_not_loaded("torch_npu._inductor")


@pytest.mark.npu_lazy(preload=["torch"], track=TRACKED)
def test_export_running_the_inductor_setup_is_caught(npu_lazy):
    regressions.export_runs_inductor_setup()
    caught(test_npu_export_public_entry_and_import_order_matrix, npu_lazy, "module_export", True,
                       says=["'torch_npu._inductor' must not be loaded yet, but it was loaded during phase 'export'",
                             "triggered at: torch_npu/utils/_dynamo.py", "in export_runs_inductor_setup.<locals>."])
