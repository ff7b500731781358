"""torch_npu's index codegen under compute mode: its TTIR check compiled, its kernels launched as a device would.

torch_npu writes each kernel with its index codegen (``NPUIndexTritonKernel``) and checks it by compiling it to
TTIR (``NPUTritonScheduling.make_ttir_for_check`` -> ``NPUCachingAutotuner._triton_make_ttir``); where the check
raises, ``NPUCombinedScheduling.codegen_node`` writes the kernel again with its no-linear codegen. Under
``TRITON_INTERPRET=1`` the kernel is Triton's ``InterpretedFunction``, which has nothing a compiler reads, so the
check always raised and compute mode only ever ran the fallback's kernels: not the ones a device runs.

Three bridges make it the device's choice again:

- **The check compiles.** Triton's frontend (``ast_to_ttir``) runs on the *compiler's view* of the kernel: a
  ``JITFunction`` over the same Python function, whose globals see every interpreted jit helper as a
  ``JITFunction`` too, while ``triton.language`` is, for the length of the check, as it was before the
  interpreter patched it (the interpreter rewrites ``tl``'s builtins for good at its first launch). That is the
  frontend of the installed Triton; triton-ascend 3.2.0 (PyPI) lacks the Ascend dialect torch_npu loads
  (``triton._C.libtriton.ascend.ir``), so the check loads Triton's own dialects only: a kernel that needs
  Ascend's dialect fails the check here and falls back, where triton-ascend 3.2.1 would compile it.
- **The launch gets its runtime blocks.** The index codegen passes some block sizes as runtime arguments
  (``inductor_meta["runtime_block_arg_names"]``). On a device the autotuner's chosen candidate supplies them;
  torch_npu's interpreter branch launches its first config and leaves them out (``best_runtime_blocks`` stays
  empty without an autotune), and the launch stops (missing positional arguments, or a grid naming ``Y0BLOCK``).
  They are taken from that config, as torch_npu's own candidate plan takes them
  (``extract_runtime_blocks_from_cfg``).
- **A grouped kernel launches too.** With symbolic-shape group autotune on, the index codegen's kernels get
  ``NPUSymbolicGroupedAutotuner``, whose ``run`` has no interpreter branch: it compiles every candidate, then
  launches the group's best. Under the interpreter it resolves the group from the runtime sizes as a device
  does (``_resolve_group_id``), takes that group's first candidate (the interpreter branch's rule: no timings
  to choose by), materialises its runtime blocks as a device does (``_materialize_runtime_blocks``), and
  launches through the interpreter branch.

Each launch of torch_npu's says in the ledger which of its codegens wrote the kernel (:func:`written_by`, from
the kernel's own ``inductor_meta``, so a cached kernel says it too).
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .ledger import LEDGER, TRITON_INTERPRETER

if TYPE_CHECKING:  # the probe's annotation, read by Triton's frontend at a check; nothing imports triton here
    import triton.language as tl

#: The language objects the interpreter patches at its first launch (``_patch_lang``): their pristine members.
_PRISTINE: list[tuple[object, dict[str, object]]] = []


def remember_language(_loaded: str = "triton") -> None:
    """Keep ``triton.language`` as the compiler knows it, before any launch patches it: once ``triton`` loaded, since
    triton-ascend completes its language as ``triton`` finishes loading (``triton/testing.py`` sets ``tl.range``,
    ``tl.parallel``, ``tl.load`` ... from its ``triton_patch``). Kept: the objects the interpreter patches
    (``tl``, ``tl.core``, ``tl.math``, ``tl.tensor``, ``tl.dtype``, the Ascend libdevice our launch patches) and every
    Triton module holding jit functions (``tl.standard``'s ``sum``, ``max`` ... are interpreted ones)."""
    if _PRISTINE:
        return
    import sys

    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    owners: list[object] = [tl, tl.core, tl.math, tl.tensor, tl.dtype]
    ascend = getattr(tl.extra, "ascend", None)
    if ascend is not None:
        owners.append(ascend.libdevice)
    for name, module in list(sys.modules.items()):
        if (name == "triton" or name.startswith("triton.")) and module is not None and module not in owners and \
                any(isinstance(member, InterpretedFunction) for member in list(vars(module).values())):
            owners.append(module)
    for owner in owners:
        _PRISTINE.append((owner, dict(vars(owner))))


def _swap(owner: object, wanted: dict[str, object]) -> None:
    current = dict(vars(owner))
    for name, value in wanted.items():
        if current.get(name, _swap) is not value:
            setattr(owner, name, value)
    for name in current:
        if name not in wanted:
            delattr(owner, name)


@contextlib.contextmanager
def compiler_language() -> Iterator[None]:
    """``triton.language`` as the frontend knows it, for the length of a check; the interpreter's after."""
    patched = [(owner, dict(vars(owner))) for owner, _ in _PRISTINE]
    try:
        for owner, pristine in _PRISTINE:
            _swap(owner, {name: compiler_view(member) for name, member in pristine.items()})
        yield
    finally:
        for owner, members in patched:
            _swap(owner, members)


_VIEWS: dict[object, object] = {}

#: the mutation pass's coverage probe (``pytest_npu_lazy.mutate.trace.hit``), which its coverage run puts first in
#: every function it instruments, ``@triton.jit`` helpers included
_PROBE_MODULE = "pytest_npu_lazy.mutate.trace"


def _probe_as_compiled(name: tl.constexpr):
    pass


def compiler_view(value):
    """What the compiler sees where the interpreter has ``value``: a ``JITFunction`` for an interpreted one, a
    module of those for a module holding any, a plain module for a bridged one, a jit function that does nothing
    for the mutation pass's coverage probe; anything else as it is.

    The probe: the pass's coverage run puts ``hit("<function>")`` first in every target function, torch_npu's
    ``@triton.jit`` helpers too, and the interpreter runs it as the Python call it is (that is how the run learns
    which tests run a helper). Triton's frontend refuses a call of a plain Python global ("Cannot access global
    variable"), so without this view every kernel calling a probed helper failed the TTIR check and was written
    again by the no-linear codegen: the coverage run then ran other kernels than the plain run (a compiled
    ``min(dim)`` propagated NaN there). A compiler runs nothing, so it sees a probe that does nothing."""
    import sys

    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    probe_module = sys.modules.get(_PROBE_MODULE)
    if probe_module is not None and value is getattr(probe_module, "hit", None):
        view = _VIEWS.get(_PROBE_MODULE)
        if view is None:
            import triton.language

            view = _VIEWS[_PROBE_MODULE] = JITFunction(_probe_as_compiled)
            view.__globals__ = {"tl": triton.language}  # what its annotation names, and nothing else
        return view
    if isinstance(value, InterpretedFunction):
        view = _VIEWS.get(value.fn)
        if view is None:
            view = _VIEWS[value.fn] = JITFunction(value.fn)
            view.__globals__ = {name: compiler_view(member) for name, member in value.fn.__globals__.items()}
        return view
    if isinstance(value, types.ModuleType) and all(value is not owner for owner, _ in _PRISTINE):
        members = vars(value)
        if type(value) is not types.ModuleType or any(isinstance(v, InterpretedFunction) for v in members.values()):
            view = _VIEWS.get(value)
            if view is None:
                view = _VIEWS[value] = types.ModuleType(value.__name__, value.__doc__)
                for name, member in members.items():
                    if not name.startswith("__"):
                        setattr(view, name, compiler_view(member))
                if type(value) is not types.ModuleType:  # a bridge computed on demand (tl.extra.cann.libdevice)
                    view.__getattr__ = lambda name, _bridge=value: compiler_view(getattr(_bridge, name))
            return view
    return value


#: the ledger's words for the codegen that wrote a launched kernel of torch_npu's
INDEX_CODEGEN = "written by torch_npu's index codegen (NPUIndexTritonKernel)"
NO_LINEAR_CODEGEN = "written by torch_npu's no-linear codegen (NPUTritonKernel)"


def written_by(inductor_meta: dict) -> str | None:
    """Which of torch_npu's codegens wrote a kernel, read from its ``inductor_meta``: the no-linear codegen marks
    its kernels ``requires_no_linear_block_remap``; the index codegen declares ``runtime_block_arg_names``."""
    if inductor_meta.get("requires_no_linear_block_remap"):
        return NO_LINEAR_CODEGEN
    if "runtime_block_arg_names" in inductor_meta:
        return INDEX_CODEGEN
    return None


#: the bridges :func:`install` stands up once torch_npu's autotuner loads, named in the header before it has
PLANNED = ["index codegen's TTIR check", "runtime blocks", "grouped autotuner's launch"]

_IN_FORCE: dict[str, str] = {}


def in_force() -> dict[str, str]:
    """Each of this module's bridges in force in this process, with what it does (empty before torch_npu's
    autotuner loads)."""
    return dict(_IN_FORCE)


def install(_loaded: str = "torch_npu._inductor.runtime.triton_heuristics") -> None:
    """Bridge torch_npu's autotuner (once its module loaded): the check on the compiler's view, runtime blocks."""
    from torch_npu._inductor.runtime import triton_heuristics

    autotuner = triton_heuristics.NPUCachingAutotuner
    if getattr(autotuner, "_npu_lazy_index_codegen", False):
        return
    make_ttir = autotuner._triton_make_ttir
    run = autotuner.run

    def _triton_make_ttir(self):
        import triton._C.libtriton as libtriton

        interpreted = self.fn
        ascend = getattr(libtriton, "ascend", None)
        dialect_missing = ascend is not None and not hasattr(ascend, "ir")
        if dialect_missing:  # triton-ascend 3.2.0: Triton's own dialects only (the docstring says what that costs)
            ascend.ir = types.SimpleNamespace(load_dialects=lambda context: None)
        try:
            self.fn = compiler_view(interpreted)
            with compiler_language():
                make_ttir(self)
        finally:
            self.fn = interpreted
            if dialect_missing:
                del ascend.ir

    def run_with_runtime_blocks(self, *args, **kwargs):
        if self.triton_interpret and self.runtime_block_arg_names and not self.best_runtime_blocks:
            config = self.best_candidate_config or self.configs[0]
            blocks = triton_heuristics.extract_runtime_blocks_from_cfg(config, self.runtime_block_arg_names)
            self.best_runtime_blocks = tuple(int(blocks[name]) for name in self.runtime_block_arg_names
                                             if name in blocks)
        before = len(LEDGER.entries)
        try:
            return run(self, *args, **kwargs)
        finally:
            words = written_by(self.inductor_meta or {}) if self.triton_interpret else None
            for index in range(before, len(LEDGER.entries)) if words else ():
                if LEDGER.entries[index].by == TRITON_INTERPRETER:
                    LEDGER.add_detail(index, words)

    autotuner._triton_make_ttir = _triton_make_ttir
    autotuner.run = run_with_runtime_blocks
    autotuner._npu_lazy_index_codegen = True
    _IN_FORCE[PLANNED[0]] = ("torch_npu's make_ttir_for_check compiles the compiler's view of the interpreted kernel "
                             "with Triton's frontend, so its index codegen's kernel runs, as on a device")
    _IN_FORCE[PLANNED[1]] = ("an interpreted launch gets the runtime block sizes of its config "
                             "(extract_runtime_blocks_from_cfg), which torch_npu's interpreter branch leaves out")
    grouped = getattr(triton_heuristics, "NPUSymbolicGroupedAutotuner", None)
    if grouped is not None and "run" in vars(grouped):
        _launch_a_group_in_the_interpreter(grouped, autotuner, triton_heuristics)
        _IN_FORCE[PLANNED[2]] = ("NPUSymbolicGroupedAutotuner launches its runtime group's first candidate in the "
                                 "interpreter; it has no interpreter branch of its own")


def _launch_a_group_in_the_interpreter(grouped, base, triton_heuristics) -> None:
    """The grouped autotuner's launch under the interpreter: its group's first candidate (module docstring)."""
    compiled_run = grouped.run

    def run(self, *args, stream, benchmark_run=False, **kwargs):
        if not self.triton_interpret:
            return compiled_run(self, *args, stream=stream, benchmark_run=benchmark_run, **kwargs)
        group_id = self._resolve_group_id(self._runtime_feature_inputs(args))
        candidates = self.candidate_plan["group_to_candidates"][group_id]
        if not candidates:
            raise RuntimeError(f"runtime inputs resolved to unreachable grouped autotune group {group_id}")
        candidate = candidates[0]
        config = candidate.get("full_config",
                               self.candidate_plan["variants"][candidate["variant_id"]]["config"])
        self.best_candidate_config = triton_heuristics.config_from_dict(config)
        self.best_runtime_blocks = tuple(self._materialize_runtime_blocks(candidate, args))
        return base.run(self, *args, stream=stream, benchmark_run=benchmark_run, **kwargs)

    grouped.run = run
