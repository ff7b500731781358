"""The NPU backend scope: TORCHINDUCTOR_NPU_BACKEND is set only while a backend is in use, always restored,
and bad arguments or shape handling never set up NPU Inductor early.

``_NpuBackendScope`` (torch_npu/utils/_dynamo.py) writes the variable,
registers NPU Inductor for that backend and runs the Inductor set-up. Every
change of the variable is recorded here with the line that made it and the
phase it happened in, so a scope that leaves it behind is named in the
failure, not just detected.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from dataclasses import dataclass

import pytest
import regressions
from breakage import caught
from facts import DYNAMO_SETUP, INDUCTOR_SETUP, needs_deferred_setup, triton_backend_reload_duplicates

pytestmark = needs_deferred_setup

VAR = "TORCHINDUCTOR_NPU_BACKEND"
REGISTER = "torch_npu.utils._dynamo:register_inductor_npu"
REGISTRY_REGISTER = "torch_npu.utils._dynamo:_InductorNpuRegistry.register_inductor_npu"
SCOPE_ENTER = "torch_npu.utils._dynamo:_NpuBackendScope.__enter__"
NPU_INIT = "torch_npu.npu:_lazy_init"
#: what the CANN host stub answers when torch_npu initialises the device
NO_DEVICE = r"aclInit|207004"

#: case -> (torch.compile keyword arguments, the error torch raises while creating the wrapper)
INVALID_ARGUMENTS = {
    "invalid_mode": ({"mode": "invalid-mode"}, "Unrecognized mode=invalid-mode"),
    "invalid_option": ({"options": {"invalid.option": True}}, "Unexpected optimization option invalid.option"),
    "invalid_npu_option_type": ({"options": {"npu_backend": 1}}, "Unexpected type of attr npu_backend"),
    "invalid_hyphenated_npu_option_type": ({"options": {"npu-backend": 1}}, "Unexpected type of attr npu-backend"),
}
#: what the variable holds before a scope: absent, or a value of the user's
BEFORE = {"unset": None, "user_value": "users-choice"}


def _where(frame) -> str:
    path = frame.f_code.co_filename
    short = path.split("site-packages/")[-1] if "site-packages/" in path else os.path.basename(path)
    name = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
    return f"{short}:{frame.f_lineno} in {name}"


@dataclass
class EnvChange:
    value: str | None  # None: removed
    where: str
    phase: str | None

    def __str__(self) -> str:
        what = "removed" if self.value is None else f"set to {self.value!r}"
        return f"{what} at {self.where} (phase {self.phase!r})"


class BackendEnvLog:
    """Records every change of TORCHINDUCTOR_NPU_BACKEND in this process: value, code location, phase."""

    def __init__(self, npu_lazy, monkeypatch) -> None:
        self.npu_lazy = npu_lazy
        self.changes: list[EnvChange] = []
        self.current: str | None = None
        environ = type(os.environ)
        set_item, del_item = environ.__setitem__, environ.__delitem__
        log = self

        def recording_set(mapping, key, value):
            set_item(mapping, key, value)  # a value that is not a str raises here, before anything changed
            if key == VAR:
                log._note(value)

        def recording_del(mapping, key):
            del_item(mapping, key)
            if key == VAR:
                log._note(None)

        monkeypatch.setattr(environ, "__setitem__", recording_set)
        monkeypatch.setattr(environ, "__delitem__", recording_del)

    def _note(self, value: str | None) -> None:
        frame = sys._getframe(2)
        while frame is not None and os.path.basename(frame.f_code.co_filename) in ("os.py", "_collections_abc.py"):
            frame = frame.f_back
        self.changes.append(EnvChange(value, _where(frame) if frame else "?", self.current))

    @contextlib.contextmanager
    def phase(self, name: str):
        """An npu_lazy phase whose name the recorded changes carry."""
        with self.npu_lazy.phase(name):
            outer, self.current = self.current, name
            try:
                yield
            finally:
                self.current = outer

    def preset(self, value: str | None) -> None:
        if value is None:
            os.environ.pop(VAR, None)
        else:
            os.environ[VAR] = value

    def assert_unchanged(self, before: str | None, phase: str, what: str) -> None:
        """The variable holds what it held before ``phase``; else name each change made in it."""
        now = os.environ.get(VAR)
        if now == before:
            return
        made = [str(change) for change in self.changes if change.phase == phase] or ["(none recorded)"]
        was = "unset" if before is None else repr(before)
        raise AssertionError(
            f"{VAR} is {now!r} after {what} (phase {phase!r}), but it was {was} before: it must be restored.\n"
            "  changes during that phase:\n    " + "\n    ".join(made))


@pytest.fixture
def backend_env(npu_lazy, monkeypatch):
    return BackendEnvLog(npu_lazy, monkeypatch)


def _untouched_npu_inductor(npu_lazy, _dynamo, during: str) -> None:
    """Nothing of NPU Inductor was set up and the NPU was never initialised."""
    npu_lazy.assert_not_loaded("torch_npu._inductor")
    for target in (REGISTER, REGISTRY_REGISTER, SCOPE_ENTER, NPU_INIT):
        count = npu_lazy.calls(target)
        assert count == 0, f"{target} was called {count} time(s) during {during}; it must not be called at all"
    assert not npu_lazy.ran(INDUCTOR_SETUP), f"{INDUCTOR_SETUP} ran during {during}"
    assert not _dynamo.is_inductor_npu_initialized(), f"NPU Inductor reports itself initialised after {during}"


# -- rejected arguments ---------------------------------------------------------------------------------


@pytest.mark.npu_lazy(preload=["torch"], track=[REGISTER, REGISTRY_REGISTER, SCOPE_ENTER, NPU_INIT])
@pytest.mark.parametrize("case", INVALID_ARGUMENTS)
def test_invalid_inductor_arguments_fail_without_npu_initialization(npu_lazy, backend_env, case):
    """torch rejects the arguments while the wrapper is created, before NPU Inductor is touched.

    Tried twice, with the variable unset and with a value of the user's:
    both times it must stay as it was, nothing of NPU Inductor may be
    registered, entered or imported, and the NPU is never initialised.
    """
    kwargs, message = INVALID_ARGUMENTS[case]
    with npu_lazy.phase("import"):
        import torch
        import torch_npu  # noqa: F401
        from torch_npu.utils import _dynamo
    for label, before in BEFORE.items():
        backend_env.preset(before)
        phase = f"wrap-{label}"
        with backend_env.phase(phase), pytest.raises(RuntimeError) as excinfo:
            torch.compile(lambda x: x + 1, **kwargs)
        assert message in str(excinfo.value), f"phase {phase!r}: unexpected error {excinfo.value!r}"
        backend_env.assert_unchanged(before, phase, f"torch.compile(**{kwargs!r}) was rejected")
        _untouched_npu_inductor(npu_lazy, _dynamo, f"the rejected torch.compile of phase {phase!r}")


# -- the scope restores the variable ------------------------------------------------------------------------


class InjectedFailure(RuntimeError):
    pass


def _fail_register():
    raise InjectedFailure(f"injected: register_inductor_npu failed with {VAR}={os.environ.get(VAR)!r}")


def _fail_inductor_setup():
    raise InjectedFailure(f"injected: _lazy_inductor_setup failed with {VAR}={os.environ.get(VAR)!r}")


#: how the scope's entry fails -> (backend given to the scope, the exception and its text, whether the variable
#: was written before the failure)
ENTRY_FAILURES = {
    "non_str_backend": (1, TypeError, "str", False),
    "register_fails": ("mlir", InjectedFailure, "register_inductor_npu failed", True),
    "inductor_setup_fails": ("dvm", InjectedFailure, "_lazy_inductor_setup failed", True),
    "ascendc_without_npu_inductor": ("ascendc", ModuleNotFoundError, "torch_npu._inductor", True),
}


@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
@pytest.mark.parametrize("before", BEFORE.values(), ids=BEFORE.keys())
@pytest.mark.parametrize("failure", ENTRY_FAILURES)
def test_npu_backend_scope_restores_env_after_entry_failure(npu_lazy, backend_env, monkeypatch, failure, before):
    """A scope whose entry fails restores the variable, also when it failed after writing it.

    A non-str backend fails before the variable changes, so it alone cannot
    tell a restoring scope from one that never restores; the other cases
    fail after the write: registration raising, the Inductor set-up raising,
    and the ascendc backend on a machine without torch_npu._inductor.
    """
    from torch_npu.utils import _dynamo

    backend, error, text, written_first = ENTRY_FAILURES[failure]
    seen = []
    monkeypatch.setattr(_dynamo, "register_inductor_npu",
                        _fail_register if failure == "register_fails" else lambda: seen.append(os.environ.get(VAR)))
    if failure == "inductor_setup_fails":
        monkeypatch.setattr(_dynamo, "_lazy_inductor_setup", _fail_inductor_setup)
    else:
        monkeypatch.setattr(_dynamo, "_lazy_inductor_setup", lambda: None)
    if failure == "ascendc_without_npu_inductor":
        npu_lazy.block("torch_npu._inductor")
    backend_env.preset(before)
    with backend_env.phase("enter"), pytest.raises(error, match=text) as excinfo:
        with _dynamo._NpuBackendScope(backend):
            pytest.fail(f"_NpuBackendScope({backend!r}) was entered; its entry should have raised {error.__name__}")
    if failure == "register_fails":
        assert f"{VAR}={backend!r}" in str(excinfo.value), excinfo.value
    written = [change for change in backend_env.changes if change.phase == "enter" and change.value == backend]
    assert bool(written) == written_first, (
        f"_NpuBackendScope({backend!r}) {'did not write' if written_first else 'wrote'} {VAR} before its entry "
        f"failed ({[str(change) for change in backend_env.changes]}); this case no longer tests what it says")
    backend_env.assert_unchanged(
        before, "enter", f"_NpuBackendScope({backend!r}).__enter__ failed ({type(excinfo.value).__name__})")


@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
@pytest.mark.parametrize("before", BEFORE.values(), ids=BEFORE.keys())
@pytest.mark.parametrize("body_raises", [False, True], ids=["normal_exit", "body_raises"])
def test_npu_backend_scope_sets_env_inside_and_restores_on_exit(npu_lazy, backend_env, monkeypatch, before,
                                                              body_raises):
    from torch_npu.utils import _dynamo

    seen = {}
    monkeypatch.setattr(_dynamo, "register_inductor_npu", lambda: seen.setdefault("register", os.environ.get(VAR)))
    monkeypatch.setattr(_dynamo, "_lazy_inductor_setup", lambda: seen.setdefault("setup", os.environ.get(VAR)))
    backend_env.preset(before)
    with backend_env.phase("scope"), contextlib.suppress(InjectedFailure):
        with _dynamo._NpuBackendScope("dvm"):
            seen["body"] = os.environ.get(VAR)
            if body_raises:
                raise InjectedFailure("injected: the compiled call failed")
    assert seen == {"register": "dvm", "setup": "dvm", "body": "dvm"}, (
        f"inside _NpuBackendScope('dvm') {VAR} was {seen}; registration, set-up and body must all see 'dvm'")
    backend_env.assert_unchanged(before, "scope", "_NpuBackendScope('dvm') exited")


# -- shape handling comes before the backend -------------------------------------------------------------------


def _shape_handling_installed() -> bool:
    """torch_npu's shape handling wraps Dynamo's context call (``_patch_dynamo_context``)."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    call = vars(getattr(eval_frame, "_TorchDynamoContext", object)).get("__call__")  # the class's own, if wrapped
    return getattr(call, "__module__", None) == "torch_npu.utils._dynamo"


def _record_mlir_wrapper_creation(npu_lazy, backend_env, monkeypatch, backend="mlir"):
    """Create an Inductor wrapper for the mlir (or another) backend with shape handling; return (wrapper, events,
    error).

    Registration and the Inductor set-up only record (the mlir backend needs
    torch_mlir); the shape-handling patch and the device query are real.
    """
    import torch
    import torch_npu
    from torch_npu.utils import _dynamo

    events = []
    patch_shape_handling, current_device = _dynamo._patch_shape_handling, torch_npu.npu.current_device

    def event(name):
        events.append((name, os.environ.get(VAR), _dynamo._lazy_dynamo_setup.has_run, _shape_handling_installed()))

    def recording_patch_shape_handling():
        event("shape_handling")
        patch_shape_handling()

    def recording_current_device():
        event("current_device")
        return current_device()

    monkeypatch.setattr(_dynamo, "_patch_shape_handling", recording_patch_shape_handling)
    monkeypatch.setattr(_dynamo, "register_inductor_npu", lambda: event("register"))
    monkeypatch.setattr(_dynamo, "_lazy_inductor_setup", lambda: event("inductor_setup"))
    monkeypatch.setattr(torch_npu.npu, "current_device", recording_current_device)
    wrapper_type = torch._TorchCompileInductorWrapper
    wrapper = wrapper_type.__new__(wrapper_type)
    error = None
    with backend_env.phase("wrap"):
        try:
            wrapper.__init__(None, {"npu_backend": backend, "enable_shape_handling": True}, None)
        except RuntimeError as exc:
            error = exc
    return wrapper, events, error


#: (event, TORCHINDUCTOR_NPU_BACKEND, Dynamo set-up done, shape handling patched) in the order they must happen
MLIR_EVENTS = [("shape_handling", None, True, False), ("register", "mlir", True, True),
               ("inductor_setup", "mlir", True, True), ("current_device", "mlir", True, True)]


@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
def test_shape_handling_initializes_before_backend_selection(npu_lazy, backend_env, monkeypatch):
    """Dynamo set-up, then shape handling, then the mlir backend's scope, and the variable restored.

    On the host stub the mlir path's ``torch_npu.npu.current_device()``
    initialises the NPU and fails (aclInit); the order up to that call and
    the restored variable are still checked. The device part is
    test_mlir_backend_selection_completes_on_npu.
    """
    import torch

    wrapper, events, error = _record_mlir_wrapper_creation(npu_lazy, backend_env, monkeypatch)
    assert events == MLIR_EVENTS, (
        "creating the mlir wrapper with shape handling (phase 'wrap') ran, as (event, env, dynamo set-up done, "
        f"shape handling patched):\n  {events}\nexpected:\n  {MLIR_EVENTS}")
    if torch.npu.is_available():
        assert error is None, f"the mlir wrapper could not be created on an NPU: {error!r}"
    else:
        assert error is not None and re.search(NO_DEVICE, str(error)), (
            f"without an NPU, current_device() in the mlir scope should fail with the device error; got {error!r}")
    assert wrapper.config["npu_backend"] == "mlir" and wrapper.config["enable_shape_handling"] is True, wrapper.config
    backend_env.assert_unchanged(None, "wrap", "the mlir wrapper was created (its scope exited)")


@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
def test_a_dvm_wrapper_selects_its_backend_when_it_is_created(npu_lazy, backend_env, monkeypatch):
    """The dvm backend is registered and set up in its own scope as the wrapper is created (it needs no device
    for that), after the Dynamo set-up and shape handling, and the variable is restored."""
    wrapper, events, error = _record_mlir_wrapper_creation(npu_lazy, backend_env, monkeypatch, backend="dvm")
    assert error is None, f"the dvm wrapper could not be created: {error!r}"
    expected = [("shape_handling", None, True, False), ("register", "dvm", True, True),
                ("inductor_setup", "dvm", True, True)]
    assert events == expected, f"creating the dvm wrapper ran:\n  {events}\nexpected:\n  {expected}"
    backend_env.assert_unchanged(None, "wrap", "the dvm wrapper was created (its scope exited)")


@pytest.mark.requires_npu
@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
def test_mlir_backend_selection_completes_on_npu(npu_lazy, backend_env, monkeypatch):
    """Needs a device: on the mlir path the wrapper queries the current NPU and recovers its streams."""
    import torch_npu

    recovered = []
    recover = torch_npu._C._recovery_all_npu_stream
    monkeypatch.setattr(torch_npu._C, "_recovery_all_npu_stream",
                        lambda device: (recovered.append((device, os.environ.get(VAR))), recover(device))[1])
    wrapper, events, error = _record_mlir_wrapper_creation(npu_lazy, backend_env, monkeypatch)
    assert error is None, error
    assert events == MLIR_EVENTS, events
    assert recovered == [(torch_npu.npu.current_device(), "mlir")], recovered
    backend_env.assert_unchanged(None, "wrap", "the mlir wrapper was created")


@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
def test_shape_handling_backend_load_is_deferred_until_first_call(npu_lazy, backend_env, monkeypatch):
    """Stricter than test_wrapper's enable_shape_handling case: the first call, not only the wrapper.

    The wrapper installs shape handling without NPU Inductor; the first call
    runs the shape-handling transform once, loads torch_npu._inductor and
    runs the Inductor set-up in phase first_call, matches eager for a batch
    that is not a gear size, and leaves the variable as it was.
    """
    import torch
    from torch_npu.utils import _dynamo

    transforms = []
    transform_hook = _dynamo.NPUShapeHandling.transform_hook

    def counting_transform_hook(self, *args, **kwargs):
        transforms.append([tuple(arg.shape) for arg in args if isinstance(arg, torch.Tensor)])
        return transform_hook(self, *args, **kwargs)

    monkeypatch.setattr(_dynamo.NPUShapeHandling, "transform_hook", counting_transform_hook)
    fn = npu_lazy.compile(lambda x: torch.sin(x) * 2 + 1, backend="inductor", options={"enable_shape_handling": True})
    assert _shape_handling_installed(), "the wrapper (phase 'wrap') did not install shape handling"
    npu_lazy.assert_not_loaded("torch_npu._inductor")
    assert npu_lazy.ran(DYNAMO_SETUP) and not npu_lazy.ran(INDUCTOR_SETUP), "after the wrapper (phase 'wrap')"
    fn(torch.randn(5, 4, device=npu_lazy.device))
    assert npu_lazy.first_loaded("torch_npu._inductor") == "first_call", npu_lazy.explain("torch_npu._inductor")
    assert npu_lazy.ran(INDUCTOR_SETUP), "the first call did not run the NPU Inductor set-up"
    assert transforms == [[(5, 4)]], f"the shape-handling transform ran {transforms} in the first call; expected once"
    assert VAR not in os.environ, f"{VAR} is {os.environ[VAR]!r} after the first call: {backend_env.changes}"


@pytest.mark.requires_npu(emulated=True)
@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
def test_reloading_the_triton_backend_on_a_device(npu_lazy, backend_env):
    """Where a device is present, switching the variable between two names that both load torch_npu's Triton
    backend reloads it in one process. torch_npu 2.13.0 re-registers ``aten.erfc`` then, and raises
    "duplicate registrations" (facts.triton_backend_reload_duplicates): its behaviour on a real NPU, not the
    emulation's, since a device is all that makes has_triton() true. Pinned both ways: a release that fixes
    it passes here only once the facts stop predicting the error."""
    from torch_npu.utils import _dynamo

    backend_env.preset(None)
    with npu_lazy.phase("first_load"):
        _dynamo.register_inductor_npu()
    backend_env.preset("triton_again")  # unknown names load the Triton backend too
    expected = triton_backend_reload_duplicates()
    with npu_lazy.phase("second_load"):
        if expected is None:
            _dynamo.register_inductor_npu()
        else:
            with pytest.raises(RuntimeError, match=re.escape(expected)):
                _dynamo.register_inductor_npu()
    assert npu_lazy.first_loaded("torch_npu._inductor") == "first_load"


# -- the regression zoo for this group ------------------------------------------------------------------------


@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
def test_scope_that_keeps_the_variable_after_a_failed_entry_is_caught(npu_lazy, backend_env, monkeypatch):
    regressions.scope_entry_without_restore()
    caught(test_npu_backend_scope_restores_env_after_entry_failure,
                       npu_lazy, backend_env, monkeypatch, "register_fails", None,
                       says=[f"{VAR} is 'mlir' after _NpuBackendScope('mlir').__enter__ failed (InjectedFailure) "
                             "(phase 'enter'), but it was unset before",
                             "set to 'mlir' at regressions.py:", "in scope_entry_without_restore.<locals>."])


@pytest.mark.npu_lazy(preload=["torch"], track=[REGISTER, REGISTRY_REGISTER, SCOPE_ENTER, NPU_INIT])
def test_options_validated_after_npu_registration_are_caught(npu_lazy, backend_env):
    regressions.register_before_option_validation()
    caught(test_invalid_inductor_arguments_fail_without_npu_initialization,
                       npu_lazy, backend_env, "invalid_npu_option_type",
                       says=["'torch_npu._inductor' must not be loaded yet, but it was loaded during phase 'wrap-unset'",
                             "in register_before_option_validation.<locals>."])


#: (compile option, torch._inductor.config.npu_backend, TORCHINDUCTOR_NPU_BACKEND) -> the backend resolved.
#: Each level counts only when set: None, "" and "default" mean "not chosen here", and the next level decides.
RESOLUTION = {
    ("ascendc", "mlir", "dvm"): "ascendc",
    (None, "mlir", "dvm"): "mlir",
    ("", "mlir", "dvm"): "mlir",
    ("default", "mlir", "dvm"): "mlir",
    (None, "default", "dvm"): "dvm",
    (None, "", "dvm"): "dvm",
    (None, None, "dvm"): "dvm",
    ("default", "default", "dvm"): "dvm",
    (None, "default", None): "default",
    (None, None, None): "default",
}


@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
def test_the_backend_is_resolved_from_options_then_config_then_environment(npu_lazy, monkeypatch):
    """The documented priority: torch.compile's npu_backend option, else Inductor's config, else the variable;
    Inductor's own default ("default") must not hide a backend the variable chose."""
    import types

    from torch_npu.utils import _dynamo

    wrong = []
    for (option, config, env), expected in RESOLUTION.items():
        fake_config = types.ModuleType("torch._inductor.config")
        if config is not None:
            fake_config.npu_backend = config
        monkeypatch.setitem(sys.modules, "torch._inductor.config", fake_config)
        if env is None:
            monkeypatch.delenv(VAR, raising=False)
        else:
            monkeypatch.setenv(VAR, env)
        got = _dynamo._resolve_npu_backend(option)
        if got != expected:
            wrong.append(f"option={option!r} config={config!r} {VAR}={env!r}: resolved {got!r}, expected {expected!r}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
@pytest.mark.parametrize("backend", ["ascendc", "dvm"])
def test_only_an_ascendc_scope_puts_the_deterministic_level_into_inductors_cache_keys(npu_lazy, monkeypatch, backend):
    """AscendC kernels differ by the NPU deterministic level: its scope must add the level to the FX graph and
    AOT autograd cache keys before anything is compiled, or a cached kernel of another level is reused."""
    from torch_npu.utils import _dynamo

    # NPU Inductor loaded for the default backend first: loading the ascendc backend itself asks the device for its
    # SoC, which this check does not need (registration and the set-up are left out of the scope below)
    monkeypatch.delenv(VAR, raising=False)
    import torch_npu._inductor  # noqa: F401

    monkeypatch.setattr(_dynamo, "register_inductor_npu", lambda: None)
    monkeypatch.setattr(_dynamo, "_lazy_inductor_setup", lambda: None)
    with _dynamo._NpuBackendScope(backend):
        pass
    codecache = sys.modules.get("torch._inductor.codecache")
    patched = bool(getattr(getattr(codecache, "FxGraphHashDetails", None), "_npu_deterministic_level_patched", False))
    assert patched == (backend == "ascendc"), (
        f"after a {backend!r} scope the deterministic level is {'' if patched else 'not '}part of Inductor's cache "
        f"keys; it must be for ascendc only")


@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
@pytest.mark.parametrize("options", [None, {"enable_shape_handling": False}, {"max_autotune": False}],
                         ids=["no-options", "shape-handling-off", "other-options"])
def test_a_wrapper_without_shape_handling_leaves_dynamos_context_call_alone(npu_lazy, options):
    """Shape handling wraps every Dynamo-compiled call: only a wrapper that asks for it may install it."""
    import torch

    npu_lazy.compile(lambda x: torch.sin(x) + 1, backend="inductor", options=options)
    assert npu_lazy.ran(DYNAMO_SETUP)
    assert not _shape_handling_installed(), (
        f"torch.compile(backend='inductor', options={options!r}) installed NPU shape handling, which it did not ask for")


@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
def test_shape_handling_wraps_dynamos_context_once_and_again_after_a_failed_attempt(npu_lazy, monkeypatch):
    """Every wrapper that asks for shape handling calls ``_patch_shape_handling``: Dynamo's context call must be
    wrapped once (twice would run the shape handling twice per call), and an attempt that failed must not
    count as done."""
    import torch._dynamo.eval_frame as eval_frame
    from torch_npu.utils import _dynamo as npu_dynamo

    real_patch = npu_dynamo._patch_dynamo_context
    attempts = []

    def failing_once():
        attempts.append(len(attempts))
        if len(attempts) == 1:
            raise RuntimeError("injected failure while wrapping Dynamo's context")
        real_patch()

    monkeypatch.setattr(npu_dynamo, "_patch_dynamo_context", failing_once)
    original = eval_frame._TorchDynamoContext.__call__
    with pytest.raises(RuntimeError, match="injected failure"):
        npu_dynamo._patch_shape_handling()
    assert eval_frame._TorchDynamoContext.__call__ is original
    npu_dynamo._patch_shape_handling()
    assert attempts == [0, 1], "after a failed attempt, shape handling was never installed"
    wrapped = eval_frame._TorchDynamoContext.__call__
    assert _shape_handling_installed() and wrapped is not original
    npu_dynamo._patch_shape_handling()
    assert eval_frame._TorchDynamoContext.__call__ is wrapped, "a second request wrapped Dynamo's context again"
    assert attempts == [0, 1]


@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
@pytest.mark.parametrize("backend", ["ascendc", "default"])
def test_only_an_ascendc_compile_guards_the_deterministic_level_while_dynamo_traces(npu_lazy, monkeypatch, backend):
    """A graph compiled by AscendC depends on the NPU deterministic level: each compile under ascendc adds a guard
    on it to the frame Dynamo is tracing (a later change of level recompiles); other backends add none.
    Registration and the Inductor set-up are left out (the ascendc backend asks the device for its SoC);
    Inductor then compiles the graph for the CPU."""
    import torch
    import torch._guards
    import torch_npu.dynamo._deterministic_guard as deterministic_guard
    from torch_npu.utils import _dynamo

    monkeypatch.delenv(VAR, raising=False)
    import torch_npu._inductor  # noqa: F401 - NPU Inductor for the default backend, before the recording

    guards = []
    monkeypatch.setattr(deterministic_guard, "install_npu_deterministic_level_guard",
                        lambda: guards.append((os.environ.get(VAR), torch._guards.TracingContext.try_get() is not None)))
    monkeypatch.setattr(_dynamo, "register_inductor_npu", lambda: None)
    monkeypatch.setattr(_dynamo, "_lazy_inductor_setup", lambda: None)
    compiled = torch.compile(lambda x: x * 2 + 1, backend="inductor", options={"npu_backend": backend})
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), x * 2 + 1)
    expected = [("ascendc", True)] if backend == "ascendc" else []
    assert guards == expected, (
        f"compiling under {backend!r} installed the deterministic-level guard as (backend variable, while tracing) "
        f"{guards}; expected {expected}")
