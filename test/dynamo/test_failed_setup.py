"""Guarantee 13: a lazy set-up whose work fails leaves nothing marked done.

Every deferred set-up of torch_npu records, somewhere, that it ran: the NPU
Inductor registry the backend it loaded (``_InductorNpuRegistry._loaded_backend``,
which ``is_inductor_npu_initialized()`` reads), the run-once set-ups their
``has_run``, the Dynamo set-up each step it completed
(``_COMPLETED_DYNAMO_SETUP_STEPS``), the post-import trigger its own removal from
``sys.meta_path``. If the record is written before the work succeeds (an
ordinary refactor: set the state, then do the work), the next call skips the
work and goes on with a half set-up, while every query says it is done.

So for each place: after the work fails, every "initialised / loaded" query
says no, the next call tries again and fails the same way, and once the
cause is gone the call succeeds and the queries say yes. The failures are
real where this machine has them (no ``torch_mlir``: the mlir backend; no NPU
under the CANN host stub: dvm and ascendc initialise the device) and
injected where it has none. The mutation operator ``record-before-work``
(docs/mutation.md) makes exactly the refactor above, and these tests catch it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

import pytest
from facts import needs_deferred_setup, triton_backend_load_not_retryable

pytestmark = [needs_deferred_setup, pytest.mark.npu_lazy(preload=["torch", "torch_npu"])]

VAR = "TORCHINDUCTOR_NPU_BACKEND"


def _registry_state() -> dict:
    """Every answer torch_npu gives to "is NPU Inductor set up?"."""
    from torch_npu.utils import _dynamo

    return {"is_inductor_npu_initialized()": _dynamo.is_inductor_npu_initialized(),
            "_InductorNpuRegistry._loaded_backend": _dynamo._InductorNpuRegistry._loaded_backend,
            "_lazy_inductor_setup.has_run": _dynamo._lazy_inductor_setup.has_run}


NOTHING_SET_UP = {"is_inductor_npu_initialized()": False, "_InductorNpuRegistry._loaded_backend": None,
                  "_lazy_inductor_setup.has_run": False}


def _set_up(backend: str) -> dict:
    return {"is_inductor_npu_initialized()": True, "_InductorNpuRegistry._loaded_backend": backend,
            "_lazy_inductor_setup.has_run": True}


def _compile_and_call():
    """What a user does: a compiled function, called once. Returns how it ended, in words."""
    import torch

    try:
        compiled = torch.compile(lambda x: torch.sin(x) + 1)
        torch.testing.assert_close(compiled(torch.ones(4)), torch.sin(torch.ones(4)) + 1)
    except Exception as exc:
        root = exc
        while getattr(root, "inner_exception", None) or root.__cause__:  # Dynamo wraps a backend's error
            root = getattr(root, "inner_exception", None) or root.__cause__
        lines = str(root).strip().splitlines()
        return f"{type(root).__name__}: {lines[0] if lines else ''}"
    return "ok"


def _device_initialises() -> bool:
    """Whether the NPU initialises here (a real NPU, or the emulated one): dvm and ascendc then get further."""
    import torch

    try:
        return bool(torch.npu.is_available()) and torch.npu.device_count() > 0
    except Exception:
        return False


def _why_it_fails(backend: str) -> str | None:
    """Why the backend's set-up cannot succeed on this machine, or None where it may."""
    if backend == "mlir":
        return None if importlib.util.find_spec("torch_mlir") else "torch_mlir is not installed"
    return None if _device_initialises() else "no NPU initialises (the CANN host stub)"


# torch_npu says so each time the mlir backend is chosen; choosing it is the point here
@pytest.mark.filterwarnings("ignore:npu_backend='mlir' is deprecated:FutureWarning")
@pytest.mark.parametrize("backend", ["mlir", "dvm", "ascendc"])
def test_a_backend_that_fails_to_load_is_not_recorded_and_is_tried_again(npu_lazy, monkeypatch, backend):
    cause = _why_it_fails(backend)
    if cause is None:
        pytest.skip(f"needs a machine where the {backend} backend cannot load: here it can, so its failure cannot "
                    "be made real")
    monkeypatch.setenv(VAR, backend)
    first = _compile_and_call()
    assert first != "ok", f"TORCHINDUCTOR_NPU_BACKEND={backend} compiled although {cause}"
    assert _registry_state() == NOTHING_SET_UP, (
        f"the {backend} backend failed to load ({first}), and torch_npu records it as set up")
    again = _compile_and_call()
    assert again == first, (f"the second call with the {backend} backend did not try the load again: it ended "
                            f"with {again!r}, the first with {first!r}")
    assert _registry_state() == NOTHING_SET_UP
    monkeypatch.setenv(VAR, "default")  # the cause gone: the backend this machine can load
    assert _compile_and_call() == "ok"
    assert _registry_state() == _set_up("default")


def test_an_unknown_backend_name_loads_the_default_backend_under_its_own_name(npu_lazy, monkeypatch):
    """Not a failure: ``_load_backend`` falls back to the Triton loader for a name it does not know and records the
    name asked for. Pinned so that a change to this (a refusal, or a record of "default") is a decision."""
    monkeypatch.setenv(VAR, "no_such_backend")
    assert _compile_and_call() == "ok"
    assert _registry_state() == _set_up("no_such_backend")


class _RefusedImport(importlib.abc.MetaPathFinder):
    """Makes one module fail to import, as a missing or broken dependency does, until taken off sys.meta_path."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.refused = 0

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.name:
            self.refused += 1
            raise ImportError(f"injected: {fullname} cannot be imported")
        return None

    def __enter__(self):
        sys.meta_path.insert(0, self)
        return self

    def __exit__(self, *exc):
        sys.meta_path.remove(self)


class TritonBackendRetryFinding(AssertionError):
    """The retry failed exactly as torch_npu's source predicts (facts.triton_backend_load_not_retryable): the
    only failure the strict xfail below accepts; any other failure fails the test."""


def _loader_registers() -> bool:
    """Whether torch_npu's Triton loader registers anything here: it returns early unless has_triton() (torch_npu's
    device-aware version) is true, as on a real or emulated NPU with Triton installed."""
    import torch

    return bool(torch.utils._triton.has_triton())


@pytest.mark.parametrize("module", [
    "torch_npu._inductor.lowering_patch",  # what _load_backend imports first, before any loader
    "torch_npu._inductor.fx_passes.overlap_scheduling",  # what _load_backend imports after the loader ran
])
def test_a_default_backend_load_that_fails_is_not_recorded_and_succeeds_once_the_cause_is_gone(
        npu_lazy, monkeypatch, request, module):
    """The guarantee: a failed first call leaves the process as it found it, so the retry fails the same way while
    the cause lasts and succeeds once it is gone. Where torch_npu's Triton loader registers (a device) and the
    failure comes after it, torch_npu 2.13.0 breaks it (facts.triton_backend_load_not_retryable): a strict xfail
    that accepts only that failure, and passes to be noticed the day torch_npu fixes it."""
    monkeypatch.delenv(VAR, raising=False)
    with _RefusedImport(module) as refusal:
        first = _compile_and_call()
        assert first != "ok" and "injected" in first, first
        assert _registry_state() == NOTHING_SET_UP, f"the default backend failed to load ({first}) and is recorded"
        finding = triton_backend_load_not_retryable(module) if _loader_registers() else None
        if finding:
            request.applymarker(pytest.mark.xfail(strict=True, raises=TritonBackendRetryFinding,
                                                  reason=f"known: {finding}"))
        again = _compile_and_call()
        refused = refusal.refused
    gone = _compile_and_call()
    outcomes = {"retry": again, "cause gone": gone}
    if outcomes != {"retry": first, "cause gone": "ok"}:
        duplicate = "RuntimeError: duplicate registrations for aten.erfc.default"
        if finding and outcomes == {"retry": duplicate, "cause gone": duplicate}:
            raise TritonBackendRetryFinding(f"after {first!r}: {outcomes}")
        assert outcomes == {"retry": first, "cause gone": "ok"}, (
            f"the default backend failed to load ({first!r}); then {outcomes}. "
            + (f"torch_npu's known cause predicted {duplicate!r} for both" if finding else
               "facts.triton_backend_load_not_retryable finds no cause in torch_npu's source for this (the construct "
               "it reads is gone or was never there for this module): a new failure to read from the source"))
    assert refused >= 2, f"the retry did not try the import of {module} again"
    assert _registry_state() == _set_up("default")
    npu_lazy.assert_loaded("torch_npu._inductor")


class _RecordedMarks:
    """Stands in for pytest's ``request`` where a guarantee's body runs inside another test: the marks it would
    apply are kept here, not applied to the test that runs it."""

    def __init__(self) -> None:
        self.marks: list = []

    def applymarker(self, mark) -> None:
        self.marks.append(mark)


def _reset_that_forgets_the_erfc_registration() -> None:
    """torch_npu's fix, injected: the reset before every backend load also drops the decompositions the Triton
    loader registers without deleting them first (aten.erfc), so a second load registers them afresh."""
    from breakage import after_import

    def patch(lowering_patch) -> None:
        restore = lowering_patch.restore_inductor_baseline

        def restore_and_forget_erfc() -> None:
            from torch._inductor.decomposition import decompositions

            restore()
            for op in [op for op, fn in decompositions.items() if str(op).startswith("aten.erfc.")
                       and getattr(fn, "__module__", "") == "torch_npu._inductor.decomposition"]:
                del decompositions[op]

        lowering_patch.restore_inductor_baseline = restore_and_forget_erfc

    after_import("torch_npu._inductor.lowering_patch", patch)


@pytest.mark.requires_npu(emulated=True)
def test_the_triton_retry_finding_flips_once_torch_npu_resets_its_decompositions(npu_lazy, monkeypatch):
    """The strict xfail of the finding can fail: with the fix injected, the guarantee's body passes where the
    finding predicted the failure, which the strict xfail reports as XPASS(strict), a failure."""
    _reset_that_forgets_the_erfc_registration()
    marks = _RecordedMarks()
    test_a_default_backend_load_that_fails_is_not_recorded_and_succeeds_once_the_cause_is_gone(
        npu_lazy, monkeypatch, marks, "torch_npu._inductor.fx_passes.overlap_scheduling")
    assert [mark.kwargs.get("strict") for mark in marks.marks] == [True], (
        f"the finding was not predicted here, so its xfail cannot flip: {marks.marks}")


def _fails_once(monkeypatch, owner, attribute: str, message: str) -> list:
    """``owner.attribute`` replaced by a function that raises RuntimeError(message) at its first call and is the
    original after; returns the list its calls are counted in."""
    original, calls = getattr(owner, attribute), []

    def fails_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError(message)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, attribute, fails_once)
    return calls


def test_an_inductor_setup_that_fails_after_registering_the_backend_is_not_recorded(npu_lazy, monkeypatch):
    """The backend loaded (the registry says so, rightly), the next set-up step failed: the Inductor set-up as a
    whole is not done, and the retry does what is left without loading the backend again."""
    import torch_npu.utils._graph_tree as graph_tree
    from torch_npu.utils import _dynamo

    monkeypatch.delenv(VAR, raising=False)
    calls = _fails_once(monkeypatch, graph_tree, "_apply_npugraph_tree_methods",
                        "injected: the npugraph tree methods could not be applied")
    assert "injected" in _compile_and_call()
    assert _registry_state() == {**_set_up("default"), "_lazy_inductor_setup.has_run": False}
    loads = []
    monkeypatch.setattr(sys.modules["torch_npu._inductor"], "_load_backend", lambda: loads.append(1))
    assert _compile_and_call() == "ok"
    assert _registry_state() == _set_up("default") and calls == [1, 1] and loads == []
    assert _dynamo._inject_inductor_npu_backend_config.has_run


DYNAMO_STEPS = {
    # step name: (module, attribute) the step's function is looked up from when the set-up runs
    "device_interface": ("torch_npu.utils._dynamo", "_dynamo_register_interface_for_device"),
    "user_defined_class_variable": ("torch_npu.utils._dynamo", "patch_user_defined_class_variable"),
    "stream_event_variable": ("torch_npu.utils._dynamo", "patch_stream_event_variable_python_type"),
    "npu_stream_context": ("torch_npu.utils._dynamo", "patch_npu_stream_context"),
    "builtin_variable": ("torch_npu.utils._dynamo", "patch_builtin_variable"),
    "backends": ("torch_npu.dynamo", "_register_backends"),
    "graphsafe_rng": ("torch_npu.utils._dynamo", "register_npu_graphsafe_rng"),
}


@pytest.mark.parametrize("step", list(DYNAMO_STEPS))
def test_a_dynamo_setup_step_that_fails_is_not_recorded_and_is_run_again(npu_lazy, monkeypatch, step):
    import importlib

    from torch_npu.utils import _dynamo

    module_name, attribute = DYNAMO_STEPS[step]
    calls = _fails_once(monkeypatch, importlib.import_module(module_name), attribute,
                        f"injected: the {step} step failed")
    with pytest.raises(RuntimeError, match=f"injected: the {step} step failed"):
        _dynamo._lazy_dynamo_setup()
    assert step not in _dynamo._COMPLETED_DYNAMO_SETUP_STEPS, f"the {step} step failed and is recorded as done"
    assert not _dynamo._lazy_dynamo_setup.has_run
    _dynamo._lazy_dynamo_setup()
    assert calls == [1, 1], f"the retry ran the failed {step} step {len(calls) - 1} times, not once"
    assert step in _dynamo._COMPLETED_DYNAMO_SETUP_STEPS and _dynamo._lazy_dynamo_setup.has_run


def test_a_dynamo_import_whose_setup_failed_cannot_be_imported_again_in_that_process(npu_lazy, monkeypatch):
    """The premise of an equivalent verdict (docs/mutation.md, record-before-work at the post-import trigger): the
    trigger runs the Dynamo set-up inside ``import torch._dynamo``; if the set-up fails, so does the import, and
    torch cannot import torch._dynamo again in that process (its submodules stay loaded, the package does not),
    whether or not the trigger stayed on sys.meta_path. The day torch can, this fails, and the trigger's place
    after the set-up matters: a retried import must then set up."""
    import torch_npu.utils._dynamo as npu_dynamo

    assert "torch._dynamo" not in sys.modules
    _fails_once(monkeypatch, npu_dynamo, "patch_builtin_variable", "injected: the builtin_variable step failed")
    with pytest.raises(RuntimeError, match="injected"):
        import torch._dynamo
    assert "torch._dynamo" not in sys.modules and not npu_dynamo._lazy_dynamo_setup.has_run
    assert any(isinstance(f, npu_dynamo._DynamoPostImportFinder) for f in sys.meta_path), "the trigger is gone"
    with pytest.raises(AttributeError, match="partially initialized module 'torch._dynamo'"):
        import torch._dynamo  # noqa: F401
