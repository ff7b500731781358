"""The import hook that puts a mutant (or the coverage pass's probes) into every process of a run.

The runner names what to do in one environment variable, :data:`ENV` (a
typed :class:`Plan` as JSON), and puts :mod:`pytest_npu_lazy.mutate.site`
first on ``PYTHONPATH``; its ``sitecustomize`` calls :func:`install_from_env`
as each interpreter starts: pytest, the zygotes it forks inherit the hook, and
so do their children, ``run_python``'s zygotes and any ``python -c`` a test
starts. The installed files are never touched: the hook changes what
``SourceFileLoader.get_code`` returns for the named modules, in memory, and
writes no bytecode for them.

Hooking the loader class rather than adding a ``sys.meta_path`` finder keeps
it in force whatever finder answers (torch_npu puts its own first).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from importlib.machinery import SourceFileLoader
from importlib.util import decode_source

ENV = "PYTEST_NPU_LAZY_MUTATE"


@dataclass(frozen=True)
class Plan:
    """What every process of one run does to the target modules."""

    mode: str  #: "mutant" (apply ``mutant_id``) or "trace" (record which target functions run)
    targets: dict[str, list[str]]  #: module -> target functions (see operators.generate)
    mutant_id: str | None = None
    log_dir: str = ""  #: where processes write what they did (applied mutants, function hits)
    extra: dict = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        return cls(**json.loads(text))


_original_get_code = SourceFileLoader.get_code
_plan: Plan | None = None


def _get_code(self, fullname):
    plan = _plan
    if plan is None or fullname not in plan.targets:
        return _original_get_code(self, fullname)
    from . import operators  # only here: a process that never imports a target pays nothing

    source = decode_source(self.get_data(self.path))  # as Python reads it: a BOM (torch_npu has them), a coding line
    targets = set(plan.targets[fullname])
    if plan.mode == "trace":
        tree = operators.instrument(source, fullname, targets)
    else:
        mutant_module = plan.mutant_id.split(":", 1)[0]
        if mutant_module != fullname:
            return _original_get_code(self, fullname)
        tree = operators.mutate(source, fullname, targets, plan.mutant_id)
        _note("applied", fullname)
    _show_to_source_readers(self.path, fullname, source, tree)
    return compile(tree, self.path, "exec", dont_inherit=True)


def _show_to_source_readers(path: str, fullname: str, source: str, tree) -> None:
    """Code that compiles a function's source again (Triton's interpreter and JIT) must read the changed
    text, or a ``@triton.jit`` function runs unmutated and unprobed (:mod:`.source_text`)."""
    from . import source_text

    lines, unplaced = source_text.module_lines(source, tree)
    source_text.serve_to_source_readers(path, lines)
    for name in unplaced:
        _note("unplaced", f"{fullname}:{name}")


def _note(kind: str, text: str) -> None:
    """One line in this process's log, read by the runner: ``applied`` (the mutant was applied here) or
    ``unplaced`` (a definition whose changed text did not fit its lines)."""
    if not _plan or not _plan.log_dir:
        return
    path = os.path.join(_plan.log_dir, f"{kind}-{os.getpid()}")
    with open(path, "a") as handle:
        handle.write(text + "\n")


def install(plan: Plan) -> None:
    global _plan
    _plan = plan
    SourceFileLoader.get_code = _get_code  # type: ignore[method-assign]  # the hook: patched for the run's processes


def install_from_env() -> None:
    text = os.environ.get(ENV)
    if text:
        install(Plan.from_json(text))


def active_plan() -> Plan | None:
    return _plan
