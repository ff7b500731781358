"""Triton kernels on the emulated NPU: torch_npu's generated kernels run in Triton's interpreter.

With ``TRITON_INTERPRET=1`` (set by the compute mode before anything loads Triton) every
``@triton.jit`` function is interpreted, and torch_npu's own heuristics take their
interpreter branch (``_interpret_args_grid``): the kernel torch_npu's NPU codegen wrote runs,
launched by torch_npu's launcher, on the device's host memory. Between that kernel and the
interpreter of the installed Triton stand version skews, each bridged by one shim here that
names what it bridges and goes away by itself where the installed Triton needs no bridge
(:func:`shims_in_force` lists the ones in force; the report header says them):

- ``tl.extra.cann``: torch_npu 2.13.0's kernels import ``extension`` and ``libdevice`` from
  it (``torch_npu/_inductor/runtime/triton_helpers.py``); triton-ascend 3.2.1 (torch_npu's
  CI, Ascend's release page) has it, PyPI's triton-ascend 3.2.0 has only ``tl.extra.ascend``.
  Without a bridge every compiled NPU kernel fails to import, on a real NPU too.
  ``extension``'s hints (``multibuffer``, ``compile_hint``) steer the NPU compiler only, so
  the interpreter takes them as no-ops; any other ``extension`` call is refused by name.
- launch keywords: torch_npu's interpreter branch passes every keyword of the chosen config
  to the kernel: the NPU compiler's options (``compile_mode``, ``multibuffer``, ...: fields of
  triton-ascend's ``NPUOptions``) and block sizes a persistent reduction declares inside the
  kernel (``R0_BLOCK``). Its compiled launcher passes only the kernel's parameters; the
  interpreter's ``GridExecutor`` refuses the rest. Keywords that are not kernel parameters
  are dropped, and the ledger names them.
- the interpreter's builder lacks ``get_int1_ty`` (triton-ascend 3.2.0), which ``tl.maximum``
  and ``tl.minimum`` with NaN propagation (``relu``, ``clamp``) ask for: it answers ``tl.int1``,
  as its other ``get_*_ty`` answer their types; only added where missing.
- a parameter annotated with the string ``"tl.constexpr"`` is a constexpr to the compiler (the
  annotation's text contains ``constexpr``) and not to triton-ascend 3.2.0's interpreter (exactly
  ``tl.constexpr``), where ``tl.arange(0, BLOCK_SIZE)`` then stops: read as the compiler reads it.
- ``tensor.__index__`` of the interpreter (triton-ascend 3.2.0) is ``int(handle.data)`` over a
  one-element array, which NumPy 2.4 refuses ("only 0-dimensional arrays can be converted"):
  every loop over a reduction (``for r0_offset in tl.range(0, r0_numel, R0_BLOCK)``) stops
  there. It reads the one element instead; only where this NumPy refuses the old way.
- ``libdevice`` in the interpreter: the interpreter patches ``tl`` and ``tl.math`` only, and
  its builder has no extern functions, so a kernel calling ``libdevice.*`` stops. Here the
  extern functions of triton-ascend's libdevice compute with NumPy under C's definitions
  (:mod:`.libdevice` has the table), and the names torch's codegen asks of libdevice that
  ``tl.math`` has (``floor``, ``ceil``, ``exp`` ...) are taken from there; a name neither has
  is refused, naming it.

Then what the interpreter computes, made what the device computes: its conversions, NaN rules,
bfloat16 arithmetic and integer division (:mod:`.numerics`), and its reductions and scans
(:mod:`.reductions`, which also reduces Inductor's ``min``/``max``/``argmin``/``argmax``
combine functions with NumPy, after checking that their code is torch's); a launch's programs run
together (:mod:`.batching`) and a sum's loop iterations run together (:mod:`.loops`) where the
kernel's source shows that changes no value. And the interpreter
copies every tensor argument to the host and back around each launch. On the emulated NPU the
device memory *is* host memory, so arguments are aliased instead (:func:`.host_kernels.host_alias`),
which also keeps each argument's strides and storage offset exactly as the kernel indexes
them.

What the interpreter cannot show at all: the programs of a grid run one after another, so races
between programs and the order of atomics are never seen; the NPU compiler (bisheng) never runs,
so nothing it would refuse or miscompile is seen; the launch options it takes are dropped.
Nothing compiles a kernel ahead of its launch either: what asks an interpreted kernel for a compiled
one's attributes (torch_npu's precompile of a config, a C++ wrapper's kernel binary) is refused by name
(:func:`_name_what_only_a_compiler_has`); the TTIR check of torch_npu's index codegen runs Triton's frontend
on the compiler's view of the kernel instead (:mod:`.index_codegen`).

Each launch is written to the ledger (``Triton interpreter``, with the kernel's name); a
launch on a lost device fails without running.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import types

from . import batching, gathers, loops, widening
from .gap import NEEDS_A_DEVICE, InterpreterGap, MissingAttribute
from .ledger import LEDGER, LOST, TRITON_INTERPRETER

__all__ = ["InterpreterGap", "activate_interpreter", "install_interpreter_shims", "install_language_shims",
           "planned", "shims_in_force"]

INTERPRET_ENV = "TRITON_INTERPRET"

#: Hints of triton-ascend's ``extension`` that steer only the NPU compiler: nothing to compute in the interpreter.
COMPILER_HINTS = ("multibuffer", "compile_hint")


_IN_FORCE: dict[str, str] = {}


def shims_in_force() -> dict[str, str]:
    """Each bridge in force in this process, with the versions it bridges (empty before Triton loads)."""
    return dict(_IN_FORCE)


def planned() -> list[str]:
    """The bridges that will stand once Triton loads, read from the installed files without importing Triton
    (the header is written before any test runs): names only, each one's reason is in :func:`shims_in_force`."""
    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.submodule_search_locations:
        return []
    root = list(spec.submodule_search_locations)[0]
    bridges = []
    extra = os.path.join(root, "language", "extra")
    if os.path.isdir(os.path.join(extra, "ascend")) and not os.path.isdir(os.path.join(extra, "cann")):
        bridges.append("tl.extra.cann")
    bridges += ["launch keywords", "libdevice"]
    try:
        with open(os.path.join(root, "runtime", "interpreter.py"), encoding="utf-8") as handle:
            source = handle.read()
    except OSError:
        source = ""
    if "def get_int1_ty" not in source:
        bridges.append("get_int1_ty")
    if "int(self.handle.data)" in source:
        bridges.append("one-element index (where NumPy refuses it)")
    if '== "constexpr"' in source:
        bridges.append("constexpr annotations")
    return bridges + ["device numerics", "device reductions", "reduction loops folded", "arguments aliased"]


#: what compute mode needs besides torch_npu, as the extra that brings it
COMPUTE_EXTRA = "pip install 'pytest-npu-lazy[compute]'  (triton-ascend and pybind11)"

#: run in a fresh interpreter: does Triton import, and is it triton-ascend? (the pytest process must not import it:
#: every zygote forked from it would have Triton loaded before its tests start)
_TRITON_CHECK = """
import json, os, sys, traceback
os.environ["TRITON_INTERPRET"] = "1"
answer = {"ok": True}
try:
    import triton, triton.language
    answer["ascend"] = os.path.isdir(os.path.join(os.path.dirname(triton.__file__), "language", "extra", "ascend"))
except BaseException as error:
    frames = [f for f in traceback.extract_tb(error.__traceback__) if "importlib" not in f.filename]
    where = frames[-1] if frames else None
    answer = {"ok": False, "error": f"{type(error).__name__}: {error}", "missing": getattr(error, "name", None),
              "where": f"{os.path.basename(os.path.dirname(where.filename))}/{os.path.basename(where.filename)}:"
                       f"{where.lineno}" if where else None}
print(json.dumps(answer))
"""


def triton_problem(python: str | None = None) -> str | None:
    """Why compute mode cannot run torch_npu's kernels here (Triton absent, not importable, not triton-ascend),
    asked of a fresh interpreter; None where it can."""
    import json
    import subprocess

    if importlib.util.find_spec("triton") is None:
        return (f"--npu-lazy-cann=compute runs torch_npu's Triton kernels in Triton's interpreter, but Triton is not "
                f"installed. Install what compute mode needs: {COMPUTE_EXTRA}")
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    try:
        done = subprocess.run([python or sys.executable, "-c", _TRITON_CHECK], capture_output=True, text=True,
                              env=env, timeout=120)
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as error:
        return f"--npu-lazy-cann=compute could not check that Triton imports here: {error}"
    if not answer["ok"]:
        missing = f" (the module {answer['missing']!r} is missing)" if answer.get("missing") else ""
        where = f", raised at {answer['where']}" if answer.get("where") else ""
        return (f"--npu-lazy-cann=compute runs torch_npu's Triton kernels in Triton's interpreter, but Triton does "
                f"not import here: {answer['error']}{missing}{where}. Install what compute mode needs: {COMPUTE_EXTRA}")
    if not answer.get("ascend"):
        return (f"--npu-lazy-cann=compute needs triton-ascend: torch_npu's kernels import libdevice from "
                f"triton.language.extra (cann or ascend), which the installed {_triton_version()} lacks. "
                f"Install what compute mode needs: {COMPUTE_EXTRA}")
    return None


def _triton_version() -> str:
    from importlib import metadata

    for name in ("triton-ascend", "triton"):
        try:
            return f"{name} {metadata.version(name)}"
        except metadata.PackageNotFoundError:
            continue
    return "triton (version unknown)"


# --------------------------------------------------------------------------- tl.extra.cann


def _extension_module(name: str) -> types.ModuleType:
    module = types.ModuleType(name, "triton-ascend 3.2.1's tl.extra.cann.extension, as far as the interpreter can "
                                    "take it (pytest-npu-lazy compute mode)")

    def hint(*args, **kwargs):
        return None

    for hint_name in COMPILER_HINTS:
        setattr(module, hint_name, hint)

    def __getattr__(attribute: str):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        raise MissingAttribute(
            f"tl.extra.cann.extension.{attribute}: the installed {_triton_version()} has no tl.extra.cann, and "
            f"Triton's interpreter has no implementation of extension.{attribute} (only the compiler hints "
            f"{', '.join(COMPILER_HINTS)} are taken, as no-ops); {NEEDS_A_DEVICE}")

    module.__getattr__ = __getattr__  # type: ignore[method-assign]  # PEP 562: a module's own __getattr__
    return module


class _Libdevice(types.ModuleType):
    """``tl.extra.cann.libdevice`` over triton-ascend's ``tl.extra.ascend.libdevice``, with ``tl.math`` for the rest."""

    def __init__(self, name: str, ascend) -> None:
        super().__init__(name, "libdevice for Triton's interpreter (pytest-npu-lazy compute mode)")
        self._ascend = ascend

    def __getattr__(self, attribute: str):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        import triton.language as tl

        for source in (self._ascend, tl.math):
            found = source.__dict__.get(attribute)
            if found is not None:
                return found
        from . import libdevice

        if attribute in libdevice.FUNCTIONS:
            return functools.partial(libdevice.unary, attribute)
        raise MissingAttribute(
            f"libdevice.{attribute}: neither {_triton_version()}'s libdevice (tl.extra.ascend.libdevice) nor "
            "tl.math has it, and the interpreter has no numpy equivalent here; the kernel needs a real Ascend "
            "device (pytest-npu-lazy --npu-lazy-cann=compute)")


def install_language_shims(_loaded: str = "triton.language") -> None:
    """Give ``tl.extra`` a ``cann`` where the installed Triton has none (once ``triton.language`` loaded)."""
    import triton.language as tl
    import triton.language.extra as extra

    name = "triton.language.extra.cann"
    if name in sys.modules or importlib.util.find_spec(name) is not None:
        return  # triton-ascend 3.2.1 or later: nothing to bridge
    ascend = getattr(extra, "ascend", None)
    if ascend is None:
        return  # not triton-ascend: torch_npu's kernels need it anyway, and say so themselves
    cann = types.ModuleType(name, "tl.extra.cann for Triton's interpreter (pytest-npu-lazy compute mode)")
    cann.__path__ = []
    extension = _extension_module(f"{name}.extension")
    libdevice = _Libdevice(f"{name}.libdevice", ascend.libdevice)
    cann.extension, cann.libdevice = extension, libdevice  # type: ignore[attr-defined]
    sys.modules.update({name: cann, f"{name}.extension": extension, f"{name}.libdevice": libdevice})
    extra.cann = cann
    _IN_FORCE["tl.extra.cann"] = (
        f"{_triton_version()} has tl.extra.ascend only; torch_npu's kernels import extension and libdevice from "
        "tl.extra.cann (triton-ascend 3.2.1): bridged to tl.extra.ascend.libdevice and tl.math, extension's "
        f"compiler hints ({', '.join(COMPILER_HINTS)}) as no-ops")
    del tl


# --------------------------------------------------------------------------- the launch


def _npu_launch_options() -> frozenset[str]:
    """The NPU compiler's options (triton-ascend's NPUOptions fields): what torch_npu's launcher may pass."""
    import dataclasses

    try:
        from triton.backends.ascend.compiler import NPUOptions
    except ImportError:
        return frozenset()
    return frozenset(field.name for field in dataclasses.fields(NPUOptions))


def install_interpreter_shims(_loaded: str = "triton.runtime.interpreter") -> None:
    """Alias arguments, drop NPU launch options, compute libdevice, record launches (once the interpreter loaded)."""
    from triton.runtime import interpreter

    from .host_kernels import DeviceLost, host_alias, lost_reason, storage_range

    executor = interpreter.GridExecutor
    if getattr(executor, "_npu_lazy_shimmed", False):
        return
    patched_once = _patch_lang_once_per_launch(interpreter)
    options = _npu_launch_options()
    reserved = frozenset(interpreter.RESERVED_KWS) | {"warmup"}
    original_call = executor.__call__

    def init_args_hst(self, args_dev, kwargs):
        def host(value):
            if hasattr(value, "data_ptr") and getattr(value, "device", None) is not None and value.device.type == "npu":
                return host_alias(value)
            return value.cpu() if hasattr(value, "data_ptr") else value

        return [host(a) for a in args_dev], {key: host(value) for key, value in kwargs.items()}

    def restore_args_dev(self, args_dev, args_hst, kwargs, kwargs_hst):
        def back(device, hosted):
            if hasattr(device, "data_ptr") and device.device.type != "npu":
                device.data.copy_(hosted.to(device.device).data)

        for device, hosted in zip(args_dev, args_hst):
            back(device, hosted)
        for key, device in kwargs.items():
            back(device, kwargs_hst[key])

    def call(self, *args_dev, **kwargs):
        kernel = getattr(self.fn, "__name__", "kernel")
        reason = lost_reason()
        if reason:
            LEDGER.record(LOST, kernel)
            raise DeviceLost(f"Triton kernel {kernel}: the emulated NPU is lost since an earlier refused call; "
                             f"the first refusal: {reason}")
        dropped = sorted(key for key in kwargs if key not in self.arg_names and key not in reserved)
        for key in dropped:
            kwargs.pop(key)
        interpreter._patch_builtin(_ascend_libdevice(), interpreter.interpreter_builder)
        grid = f"grid {self.grid}" if not callable(self.grid) else "grid computed"
        npu_options = [key for key in dropped if key in options]
        others = [key for key in dropped if key not in options]
        said = "".join(f"; {what} dropped: {', '.join(keys)}" for what, keys in
                       (("NPU compiler options", npu_options), ("config keywords the kernel declares", others)) if keys)
        k, programs = batching.merge_factor(self, args_dev, kwargs)
        wider, widened = widening.widths(self, args_dev, kwargs)
        said += f"; {widened}" if widened else ""
        LEDGER.record(TRITON_INTERPRETER, kernel, f"{grid}; {programs}{said}",
                      wrote=_written(self.arg_names, args_dev, kwargs, storage_range))
        entry = len(LEDGER.entries) - 1
        loops.NOTES.clear()
        import numpy

        # a device computes IEEE infinities and NaNs (log(0), 1/0) without a word; NumPy, evaluating the kernel
        # here, would warn at each: those warnings are the interpreter's, not the kernel's, and no test's to see
        launched = self.grid
        if k > 1:  # the same rows, k programs' worth at a time (batching's docstring says when and why exact)
            self.grid = (launched[0] // k, 1, 1)
            kwargs = {**kwargs, batching.ROWS: kwargs[batching.ROWS] * k}
        tensors = [value for value in (*args_dev, *kwargs.values()) if hasattr(value, "untyped_storage")]

        def run(launch_kwargs):
            with numpy.errstate(all="ignore"), patched_once(), gathers.launch(tensors):
                return original_call(self, *args_dev, **launch_kwargs)

        try:
            if wider and os.environ.get(widening.CHECK_ENV) == "1":
                return widening.run_both_ways(run, kernel, args_dev, kwargs, wider, host_alias)
            return run({**kwargs, **wider})
        finally:
            self.grid = launched
            ran = sorted(set(loops.NOTES)) or [loops.decided(self.fn)]
            if any(ran):
                LEDGER.add_detail(entry, "; ".join(n for n in ran if n))

    executor._init_args_hst = init_args_hst
    executor._restore_args_dev = restore_args_dev
    executor.__call__ = call
    executor._npu_lazy_shimmed = True
    _name_what_only_a_compiler_has(interpreter)
    _constexpr_as_the_compiler_reads_it(interpreter)
    _index_one_element_arrays(interpreter)
    from . import libdevice, numerics, reductions

    _IN_FORCE["device numerics"] = "; ".join(numerics.install(interpreter))
    _IN_FORCE["device reductions"] = "; ".join(reductions.install(interpreter))
    _IN_FORCE["loads gathered"] = gathers.install(interpreter)
    folded = loops.install(interpreter)
    if folded:
        _IN_FORCE["reduction loops folded"] = folded
    builder_type = type(interpreter.interpreter_builder)
    builder_type.create_extern_elementwise = libdevice.extern_elementwise
    if not hasattr(builder_type, "get_int1_ty"):
        import triton.language as tl

        builder_type.get_int1_ty = lambda self: tl.int1
        _IN_FORCE["get_int1_ty"] = (f"{_triton_version()}'s interpreter builder lacks get_int1_ty (tl.maximum and "
                                    "tl.minimum with NaN propagation ask for it): answers tl.int1")
    _IN_FORCE["launch keywords"] = (
        "torch_npu's interpreter branch passes every config keyword (the NPU compiler's options: compile_mode, "
        "multibuffer, ...; a persistent reduction's R0_BLOCK); its compiled launcher passes only the kernel's "
        "parameters: the rest are dropped, each launch names them")
    _IN_FORCE["libdevice"] = ("Triton's interpreter patches tl and tl.math only and has no extern calls: "
                              "triton-ascend's libdevice externs computed with numpy under C's definitions "
                              "(pytest_npu_lazy.cann.compute.libdevice has the table)")
    _IN_FORCE["arguments aliased"] = ("the interpreter copies each argument to the host and back; the emulated "
                                      "NPU's memory is host memory, so arguments are aliased, strides and offset kept")


#: how Inductor names the arguments a kernel writes (``in_ptr``: read only)
OUTPUT_ARGUMENTS = ("out_ptr", "in_out_ptr")


def _written(names, args, kwargs, storage_range) -> tuple[tuple[int, int], ...]:
    """The storages a launch may write: Inductor's output arguments, or every tensor of a kernel not named its way."""
    bound = list(zip(names, args)) + [(key, value) for key, value in kwargs.items() if key in names]
    tensors = [(name, value) for name, value in bound if hasattr(value, "untyped_storage")]
    outputs = [value for name, value in tensors if name.startswith(OUTPUT_ARGUMENTS)]
    inductor_named = any(name.startswith(OUTPUT_ARGUMENTS + ("in_ptr",)) for name, _ in tensors)
    return tuple(storage_range(value) for value in (outputs if inductor_named else [v for _, v in tensors]))


def _patch_lang_once_per_launch(interpreter):
    """The interpreter patches ``tl``'s builtins at every launch *and* at every call of a jit helper inside a
    kernel (``tl.sum``, torch's ``triton_helpers``: once per program), walking every member of ``tl``, ``tl.core``,
    ``tl.tensor`` and ``tl.math`` each time: about 0.7 ms a call, a third of a small program's time. Within one
    launch the patches stay as the first call left them, so a language module already patched in this launch is
    not walked again. Returns the context manager a launch runs under; outside one, every call patches."""
    import contextlib

    original = interpreter._patch_lang
    state: dict[str, set[int] | None] = {"patched": None}

    def patch_lang(fn):
        patched = state["patched"]
        langs = {id(value) for value in fn.__globals__.values() if value is interpreter.tl or value is interpreter.tl.core}
        if patched is not None and langs and langs <= patched:
            return
        original(fn)
        if patched is not None:
            patched |= langs

    @contextlib.contextmanager
    def launch():
        outer = state["patched"]
        state["patched"] = set()
        try:
            yield
        finally:
            state["patched"] = outer

    interpreter._patch_lang = patch_lang
    _IN_FORCE["language patched once a launch"] = (
        "the interpreter re-patches triton.language at every jit helper call inside a kernel: once per launch")
    return launch


#: what the interpreter's function sets itself: asked before it is set (copying, unpickling), a plain AttributeError
_INTERPRETED_OWN = frozenset({"fn", "rewriter", "run", "arg_names"})


def _name_what_only_a_compiler_has(interpreter) -> None:
    """A compiled kernel's attributes asked of an interpreted one: a refusal that names them.

    Under ``TRITON_INTERPRET=1`` ``@triton.jit`` gives an ``InterpretedFunction``, which launches and
    nothing else. Code that compiles a kernel before its launch asks it what only a ``JITFunction``
    has (``constexprs``, ``src``, ``params`` ...): torch_npu's precompile of a config, a C++ wrapper's
    kernel binary (the TTIR check of its index codegen is given the compiler's view: :mod:`.index_codegen`).
    Triton answers with a bare ``AttributeError``
    that reads as a bug; here it is :class:`MissingAttribute`, which names the kernel, the attribute and
    why (still an ``AttributeError`` to ``hasattr`` and ``getattr`` with a default, so whoever only asks
    gets the answer it got before).
    """
    function = interpreter.InterpretedFunction
    if "__getattr__" in vars(function):
        return

    def __getattr__(self, attribute: str):
        if attribute.startswith("__") or attribute in _INTERPRETED_OWN:
            raise AttributeError(attribute)
        kernel = getattr(self.__dict__.get("fn"), "__name__", "kernel")
        raise MissingAttribute(
            f"Triton kernel {kernel}: {attribute} is a compiled kernel's (JITFunction.{attribute}), asked by code "
            f"that compiles the kernel before launching it (torch_npu's precompile of a config, a C++ wrapper's "
            f"kernel binary); under TRITON_INTERPRET=1 the kernel is Triton's "
            f"InterpretedFunction, which only launches, and nothing here compiles it; {NEEDS_A_DEVICE}")

    function.__getattr__ = __getattr__


def _constexpr_as_the_compiler_reads_it(interpreter) -> None:
    """A parameter annotated ``"tl.constexpr"`` (a string) is a constexpr to the compiler, not to this interpreter.

    triton-ascend 3.2.0's ``GridExecutor`` takes a parameter as constexpr only where its annotation reads exactly
    ``constexpr`` (``tl.constexpr`` itself); the compiler (``KernelParam.is_constexpr``) wherever the annotation's
    text contains ``constexpr``, so ``BLOCK_SIZE: "tl.constexpr"`` compiles, and in this interpreter
    ``tl.arange(0, BLOCK_SIZE)`` stops ("arange's arguments must be of type tl.constexpr"). The executor's list
    is made the compiler's; only where the installed interpreter compares exactly.
    """
    import inspect

    executor = interpreter.GridExecutor
    try:
        source = inspect.getsource(executor.__init__)
    except (OSError, TypeError):
        return
    if '== "constexpr"' not in source:
        return  # this interpreter reads annotations as the compiler does, or in a way not known here
    from triton.runtime.jit import _normalize_ty

    original_init = executor.__init__

    def __init__(self, fn, arg_names, grid):
        original_init(self, fn, arg_names, grid)
        annotations = {name: _normalize_ty(ty) for name, ty in fn.__annotations__.items()}
        self.constexprs = [name for name in arg_names if "constexpr" in annotations.get(name, "")]

    executor.__init__ = __init__
    _IN_FORCE["constexpr annotations"] = (
        f"{_triton_version()}'s interpreter takes a parameter as constexpr only where its annotation is exactly "
        "tl.constexpr; the compiler wherever the annotation's text contains constexpr (a string \"tl.constexpr\"): "
        "read as the compiler reads it")


def _index_one_element_arrays(interpreter) -> None:
    """Interpreted scalars are one-element arrays; NumPy 2.4 refuses ``int()`` of those, the interpreter asks it."""
    import numpy as np

    try:
        int(np.ones(1, dtype=np.int32))
        return  # this NumPy still converts them: nothing to bridge
    except TypeError:
        pass
    patch_tensor = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor):
        patch_tensor(tensor)
        tensor.__index__ = lambda self: int(self.handle.data.reshape(-1)[0]) if self.handle.data.size == 1 \
            else int(self.handle.data)

    interpreter._patch_lang_tensor = patch_lang_tensor
    _IN_FORCE["one-element index"] = (f"{_triton_version()}'s interpreter converts a scalar with int() of a "
                                      f"one-element array, which NumPy {np.__version__} refuses: reads the element")


def _ascend_libdevice():
    import triton.language.extra as extra

    ascend = getattr(extra, "ascend", None)
    return ascend.libdevice if ascend is not None else types.ModuleType("no_libdevice")


def activate_interpreter() -> None:
    """``TRITON_INTERPRET=1`` before Triton loads: every ``@triton.jit`` function is interpreted."""
    os.environ[INTERPRET_ENV] = "1"
