"""The mutation run's configuration: what to mutate, which tests judge it, and verdicts on survivors.

One TOML file (``test/dynamo/mutation.toml`` for torch_npu) holds it all, so
the table in docs/mutation.md can always be rebuilt from the file, the
installed package and the suite. Bad input stops the run with the problem
and its fix named.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .status import VERDICTS, Status

VERDICT_KINDS = tuple(status.value for status in VERDICTS)


class ConfigError(Exception):
    """The configuration file is wrong; the message names the key and the fix."""


@dataclass(frozen=True)
class Verdict:
    """Why a surviving mutant is not a missing test: no observable difference, or only on an NPU.

    One mutant (``mutant = "<id>"``), or every mutant of a block of lines (``block = "<module>:<first>-<last>"``):
    code that runs only on another chip than the emulated one (torch_npu's Ascend 950 lowerings) is argued once,
    for its whole branch, not once per edit. A mutant's own verdict wins over a block's."""

    mutant: str  #: the mutant's id, or the block as written
    kind: str
    why: str
    npu_test: str = ""  #: for device-only: the test that would catch it on an NPU runner
    lines: tuple[int, int] | None = None  #: a block's first and last line (inclusive); None for one mutant

    @property
    def module(self) -> str:
        return self.mutant.split(":", 1)[0]

    def covers(self, mutant) -> bool:
        """Whether this verdict judges ``mutant`` (an :class:`~.operators.Mutant`)."""
        if self.lines is None:
            return mutant.id == self.mutant
        return mutant.module == self.module and self.lines[0] <= mutant.line <= self.lines[1]


@dataclass(frozen=True)
class Config:
    path: Path
    root: Path  #: the folder pytest runs in (the file's repository root)
    targets: dict[str, list[str]]
    tests: list[str]
    excluded: dict[str, list[str]]  #: module -> qualified names (and their nested functions) not mutated
    pytest_args: list[str]
    test_timeout: float
    mutant_timeout: float
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    #: verdicts on blocks of lines, in the file's order (no two overlap)
    blocks: list[Verdict] = field(default_factory=list)
    sample: list[str] = field(default_factory=list)
    sample_tests: list[str] = field(default_factory=list)
    #: functions whose mutants run first, in this order (the rest after them, in source order): a pass
    #: stopped early, or resumed in parts, has done the most wanted
    first: list[str] = field(default_factory=list)
    #: what the pass is over, for the report's title ([report] subject)
    subject: str = "torch_npu's deferred-loading code"
    #: module -> the digest (:func:`digest`) of the source its verdicts were written against ([targets] source):
    #: a mutant id is a position, and on another source the same position can be another edit
    sources: dict[str, str] = field(default_factory=dict)

    def verdict_for(self, mutant) -> Verdict | None:
        """The verdict that judges ``mutant``: its own, else the block it lies in, else None."""
        own = self.verdicts.get(mutant.id)
        if own is not None:
            return own
        return next((block for block in self.blocks if block.covers(mutant)), None)

    def all_verdicts(self) -> list[Verdict]:
        return [*self.verdicts.values(), *self.blocks]

    def describe_run(self) -> str:
        """The pytest command each mutant's run is, as the report says it."""
        return " ".join(["pytest", *self.pytest_args, *self.tests])


def _toml(path: Path) -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python < 3.11
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            raise ConfigError("reading the mutation configuration needs Python 3.11+ or `pip install tomli`") from None
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file; pass --config with the mutation.toml to use") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML ({error}); fix the line it names") from None


def _root_of(path: Path) -> Path:
    for folder in [path.parent, *path.parent.parents]:
        if (folder / "pyproject.toml").exists() or (folder / ".git").exists():
            return folder
    return path.parent


def load(path: Path) -> Config:
    data = _toml(path)
    run = data.get("run", {})
    targets = {module: list(spec.get("functions", [])) for module, spec in data.get("targets", {}).items()}
    excluded = {module: list(spec.get("exclude", [])) for module, spec in data.get("targets", {}).items()}
    if not targets:
        raise ConfigError(f"{path}: no [targets.\"<module>\"] table with functions = [...]; add one per module")
    for module, functions in targets.items():
        if not functions:
            raise ConfigError(f"{path}: [targets.\"{module}\"] lists no functions; name them in functions = [...]")
    verdicts: dict[str, Verdict] = {}
    blocks: list[Verdict] = []
    for entry in data.get("verdict", []):
        verdict = _verdict(path, entry)
        if verdict.lines is None:
            verdicts[verdict.mutant] = verdict
        else:
            first, last = verdict.lines
            for other in blocks:
                if other.module == verdict.module and other.lines and not (last < other.lines[0]
                                                                           or other.lines[1] < first):
                    raise ConfigError(f"{path}: the verdict blocks {other.mutant} and {verdict.mutant} overlap; a line "
                                      "is judged by one block: split them")
            blocks.append(verdict)
    named = {name for functions in targets.values() for name in functions}
    strays = [name for name in run.get("first", []) if name not in named]
    if strays:
        raise ConfigError(f"{path}: [run] first names {', '.join(strays)}, which no [targets] table lists; "
                          "name target functions only")
    sample = data.get("sample", {})
    sources = {module: str(spec["source"]) for module, spec in data.get("targets", {}).items() if "source" in spec}
    return Config(sources=sources, path=path, root=_root_of(path), targets=targets, excluded=excluded,
                  tests=list(run.get("tests", ["."])),
                  pytest_args=list(run.get("pytest_args", [])), test_timeout=float(run.get("test_timeout", 120)),
                  mutant_timeout=float(run.get("mutant_timeout", 900)), verdicts=verdicts, blocks=blocks,
                  sample=list(sample.get("mutants", [])), sample_tests=list(sample.get("tests", [])),
                  first=list(run.get("first", [])),
                  subject=str(data.get("report", {}).get("subject", "torch_npu's deferred-loading code")))


def _verdict(path: Path, entry: dict) -> Verdict:
    """One ``[[verdict]]`` table: on one mutant, or on a block of lines."""
    if ("mutant" in entry) == ("block" in entry):
        raise ConfigError(f"{path}: a [[verdict]] names {'both mutant and block' if 'mutant' in entry else 'neither'}: "
                          f"give mutant = \"<id>\" (one mutant) or block = \"<module>:<first>-<last>\" (its lines): {entry}")
    missing = {"kind", "why"} - set(entry)
    if missing:
        raise ConfigError(f"{path}: a [[verdict]] lacks {', '.join(sorted(missing))}: {entry}")
    name = str(entry.get("mutant", entry.get("block")))
    if entry["kind"] not in VERDICT_KINDS:
        raise ConfigError(f"{path}: verdict for {name}: kind {entry['kind']!r} is not one of "
                          f"{', '.join(VERDICT_KINDS)}")
    if entry["kind"] == Status.DEVICE_ONLY and not entry.get("npu_test"):
        raise ConfigError(f"{path}: device-only verdict for {name} names no npu_test (the test that "
                          "would catch it on an NPU runner)")
    lines = None
    if "block" in entry:
        module, _, span = name.partition(":")
        first, _, last = span.partition("-")
        if not module or not first.isdecimal() or not last.isdecimal() or not 0 < int(first) <= int(last):
            raise ConfigError(f"{path}: verdict block {name!r} is not <module>:<first line>-<last line> "
                              "(e.g. \"torch_npu._inductor.lowering:452-506\", inclusive; one line: 41-41)")
        lines = (int(first), int(last))
    return Verdict(name, entry["kind"], entry["why"], entry.get("npu_test", ""), lines)


def digest(source: str) -> str:
    """What a record and a verdict are keyed to: ``sha256:`` and the first 16 hex digits of the source's hash."""
    return "sha256:" + hashlib.sha256(source.encode()).hexdigest()[:16]


def locate_source(module: str) -> Path:
    """The installed source file of ``module``, found without importing it or its parents.

    Importing ``torch_npu`` to ask would load the very modules the run
    mutates, and on a machine without CANN it cannot even import.
    """
    path = None
    spec = None
    parts = module.split(".")
    for index in range(len(parts)):
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: index + 1]), path)
        if spec is None:
            raise ConfigError(f"module {module!r} is not installed here (no {'.'.join(parts[: index + 1])}); "
                              "install the package or fix the [targets] name")
        path = spec.submodule_search_locations
    assert spec is not None, "a module name has a part, and the loop raises for a part not found"
    if not spec.origin or not spec.origin.endswith(".py"):
        raise ConfigError(f"module {module!r} has no Python source ({spec.origin}); only .py modules can be mutated")
    return Path(spec.origin)
