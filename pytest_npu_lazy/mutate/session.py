"""The mutation pass: generate the mutants, take coverage once, run each mutant against its tests.

A mutant is *caught* when a test of the suite fails (or is killed at its
timeout) with the mutant applied. It is not caught when only the harness
broke: pytest ending in an internal or usage error, or the whole run killed
at its wall-clock limit (both say so in the table). Before any mutant, the
coverage pass runs the suite unmutated: a suite that fails without a mutant
would "catch" everything, so the pass stops there and names the failures.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field
from importlib.util import decode_source
from typing import Callable

from . import operators
from ..shard import Shard
from .config import Config, ConfigError, digest, locate_source
from .status import VERDICTS, Status
from .hook import Plan
from .runs import SuiteRun, become_subreaper, run_suite
from .coverage_pass import BaselineFailed, take_coverage  # noqa: F401 - BaselineFailed: the pass raises it
from .selection import CoverageMap



@dataclass
class MutantResult:
    mutant: operators.Mutant
    status: Status
    killed_by: str = ""
    message: str = ""
    tests_selected: int = 0
    seconds: float = 0.0
    verdict: str = ""  #: why a survivor is equivalent or device-only (from the configuration)
    npu_test: str = ""

    def __post_init__(self) -> None:
        self.status = Status(self.status)  # a record's string, or a typo in one, named at once

    def to_dict(self) -> dict:
        data = asdict(self)
        data["mutant"] = self.mutant.to_dict()
        data["status"] = self.status.value
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "MutantResult":
        return cls(**{**data, "mutant": operators.Mutant.from_dict(data["mutant"])})


@dataclass
class PassOptions:
    exitfirst: bool = True
    workers: int = 0  #: pytest-xdist workers for each mutant's run (0: one process)
    only: list[str] = field(default_factory=list)  #: mutant ids (or prefixes) to run; empty: all
    functions: list[str] = field(default_factory=list)  #: only mutants of these functions (and nested ones)
    sample: bool = False  #: the configuration's fixed sample, against its sample tests
    tests: list[str] = field(default_factory=list)  #: run against these tests instead of the configuration's
    retake_coverage: bool = False
    #: only the mutants this shard holds (a stable hash of each id): one of N machines' part of the pass
    shard: Shard | None = None


#: a test's limit under a mutant is this many times its unmutated time (taken in the coverage pass, which is
#: slower than a plain run), and never below the floor: a loaded machine must not turn a slow test into a catch
TEST_LIMIT_FACTOR = 4.0
TEST_LIMIT_FLOOR = 12.0
#: the message of a mutant a full pass recorded under its verdict without running it
JUDGED_WITHOUT_A_RUN = "judged in the configuration; not run (run it with --only)"


class MutationPass:
    def __init__(self, config: Config, options: PassOptions, progress: Callable[[str], None] = print):
        self.config = config
        self.options = options
        self.progress = progress
        self.sources = {module: decode_source(locate_source(module).read_bytes()) for module in config.targets}
        #: module -> the digest of its installed source: what this pass's record and verdicts are keyed to
        self.digests = {module: digest(text) for module, text in self.sources.items()}
        self.tests = options.tests or (config.sample_tests if options.sample and config.sample_tests else config.tests)
        missing = [t for t in options.tests if not (config.root / t.split("::")[0]).exists()]
        if missing:
            raise ConfigError(f"--tests {', '.join(missing)}: no such file or folder under {config.root.name}/; "
                              "name test files or folders relative to the project root")
        self.catches: dict[str, int] = {}  #: how many mutants each test caught so far in this pass
        become_subreaper()

    # -- mutants -------------------------------------------------------------
    def mutants(self) -> list[operators.Mutant]:
        mutants = []
        for module, functions in self.config.targets.items():
            unknown = operators.unknown_targets(self.sources[module], set(functions))
            if unknown:
                    raise ConfigError(f"{self.config.path}: [targets.\"{module}\"] names {', '.join(sorted(unknown))}, "
                                  f"which {module} does not define; fix or remove the names")
            mutants += operators.compilable(self.sources[module], module, set(functions), self._wanted)
        unknown_functions = [name for name in self.options.functions if not any(_within(m, name) for m in mutants)]
        if unknown_functions:
            raise ConfigError(f"--function {', '.join(unknown_functions)}: no mutant of such a function among the targets "
                              f"of {self.config.path.name}; --list shows each mutant's function")
        missing = [w for w in self._patterns() if not any(m.id == w or m.id.startswith(w) for m in mutants)]
        if missing:
            raise ConfigError(f"no mutant matches {', '.join(missing)}; list them with --list")
        if self.options.shard is not None:  # after the checks above: a name is known whatever shard holds it
            mutants = [m for m in mutants if self.options.shard.holds(m.id)]
        return mutants

    def check_verdicts(self) -> None:
        """Refuse verdicts that may name other edits than they were written for: written against another source
        of their module (ids are positions), without the source they were written against, or naming no mutant
        of the installed source. A verdict that landed on another edit could hide a live mutant."""
        config = self.config
        modules = {verdict.module for verdict in config.all_verdicts()}
        for module in sorted(modules):
            if module not in self.digests:
                raise ConfigError(f"{config.path}: a verdict names a mutant of {module}, which no [targets] table "
                                  "mutates; remove the verdict or add the module")
            expected, installed = config.sources.get(module), self.digests[module]
            if expected is None:
                raise ConfigError(f"{config.path}: [targets.\"{module}\"] has verdicts but no source = \"...\", the "
                                  f"source they were written against; after checking them, add source = \"{installed}\"")
            if expected != installed:
                raise ConfigError(
                    f"{config.path}: the verdicts on {module} were written against its source {expected}; the "
                    f"installed one is {installed}. A mutant id is a position, and there it may now name another "
                    "edit: check each verdict against --list, then set [targets.\"" + module + f"\"] source = "
                    f"\"{installed}\"; or run with --without-verdicts, which judges every mutant by its run")
        every = self.mutants_unfiltered()
        names = {mutant.id for mutant in every}
        stray = sorted(ident for ident in config.verdicts if ident not in names)
        if stray:
            raise ConfigError(f"{config.path}: verdicts name mutants the installed source does not have: "
                              f"{', '.join(stray)}; --list lists the mutants: fix or remove those verdicts")
        empty = [block.mutant for block in config.blocks if not any(block.covers(mutant) for mutant in every)]
        if empty:
            raise ConfigError(f"{config.path}: verdict blocks hold no mutant of the configured functions: "
                              f"{', '.join(empty)}; --list lists the mutants by line: fix or remove those blocks")

    def mutants_unfiltered(self) -> list[operators.Mutant]:
        """Every mutant of the configured functions, whatever --only, --function or the sample select."""
        return [mutant for module, functions in self.config.targets.items()
                for mutant in operators.compilable(self.sources[module], module, set(functions))]

    def _function_rank(self, mutant: operators.Mutant) -> int:
        """Where a mutant's function stands in the order asked for: --function's, else the configuration's
        ``first``; the rest keep their source order behind them."""
        order = self.options.functions or self.config.first
        for rank, name in enumerate(order):
            if _within(mutant, name):
                return rank
        return len(order)

    def _patterns(self) -> list[str]:
        return self.config.sample if self.options.sample else self.options.only

    def _wanted(self, mutant: operators.Mutant) -> bool:
        for name in self.config.excluded.get(mutant.module, []):
            if _within(mutant, name):
                return False
        if self.options.functions and not any(_within(mutant, name) for name in self.options.functions):
            return False
        patterns = self._patterns()
        return not patterns or any(mutant.id == p or mutant.id.startswith(p) for p in patterns)

    # -- coverage ------------------------------------------------------------
    def coverage(self) -> CoverageMap:
        """Which tests run each target function (coverage_pass.py), cached until sources, tests or options change."""
        return take_coverage(self.config, self.tests, self.sources, self.options.retake_coverage, self.progress)

    # -- running -------------------------------------------------------------
    def run(self, recorded: dict[str, MutantResult] | None = None,
            on_result: Callable[[list[MutantResult]], None] | None = None,
            ) -> tuple[list[MutantResult], CoverageMap, float]:
        """Run every mutant not already in ``recorded`` (those named by --only run again);
        ``on_result`` gets the results so far, in generation order, after each mutant."""
        started = time.monotonic()
        mutants = self.mutants()
        coverage = self.coverage_map = self.coverage()
        recorded = dict(recorded or {})
        rerun = set(self.options.only)
        # a recorded "not-run" is looked at again: a function no test ran may be run now, and a mutant recorded
        # under a verdict without a run, whose verdict is withdrawn, must be run
        todo = [m for m in mutants if m.id not in recorded or recorded[m.id].status == Status.NOT_RUN
                or any(m.id.startswith(p) for p in rerun)]
        todo.sort(key=self._function_rank)  # the most wanted first (a stable sort: source order otherwise)
        if recorded:
            self.progress(f"resuming: {len(mutants) - len(todo)} mutants recorded already, {len(todo)} to run")
        killers: dict[str, list[str]] = {}
        for result in recorded.values():
            if result.status == Status.CAUGHT:
                killers.setdefault(f"{result.mutant.module}:{result.mutant.target}", []).append(result.killed_by)
                self.catches[result.killed_by] = self.catches.get(result.killed_by, 0) + 1
        # every recorded result is kept, those outside this run's --only or --function too: a resumed record
        # only grows
        done = dict(recorded)
        for index, mutant in enumerate(todo, 1):
            result = self.run_one(mutant, coverage, killers)
            done[mutant.id] = result
            results = sorted(done.values(), key=self.source_order)
            if on_result:
                on_result(results)
            elapsed = time.monotonic() - started
            self.progress(f"[{index:>4}/{len(todo)}] {result.status:<11} {result.seconds:6.1f} s  {mutant.id}"
                          + (f"  by {result.killed_by}" if result.killed_by else "")
                          + f"   ({elapsed / 60:.1f} min)")
        return sorted(done.values(), key=self.source_order), coverage, time.monotonic() - started

    def source_order(self, result: MutantResult) -> tuple:
        """Module as configured, then line and column: the order the mutants are generated in."""
        modules = list(self.config.targets)
        mutant = result.mutant
        rank = modules.index(mutant.module) if mutant.module in modules else len(modules)
        return rank, mutant.line, mutant.col, mutant.id

    def run_one(self, mutant: operators.Mutant, coverage: CoverageMap, killers: dict[str, list[str]]) -> MutantResult:
        selected = coverage.tests_for(mutant.module, mutant.function)
        verdict = self.config.verdict_for(mutant)
        if verdict is not None and not self._patterns():
            # judged from the code in mutation.toml: a full pass records the verdict without a run that could
            # only end "survived" or at its limit; --only and --sample run it, to check the verdict still holds
            return self._judged(MutantResult(mutant, Status.NOT_RUN, message=JUDGED_WITHOUT_A_RUN), verdict)
        if not selected:
            return self._judged(MutantResult(mutant, Status.NOT_RUN, message="no test of the suite runs this function"),
                                verdict)
        key = f"{mutant.module}:{mutant.target}"
        ordered = self.test_order(selected, coverage.by_function.get(f"{mutant.module}:{mutant.function}", []),
                                  killers.get(key, []), self.catches, coverage.durations)
        args = ["-x"] if self.options.exitfirst else []
        if self.options.workers and len(ordered) > 2 * self.options.workers:
            args += ["-n", str(self.options.workers)]
        else:
            args += ["-p", "no:xdist"]
        # a hung test is killed at the test timeout and counts as caught; the whole run is bounded by what its
        # tests took unmutated, three times over, so a run that only crawls ends too (and does not count)
        wall = min(self.config.mutant_timeout,
                   60 + self.config.test_timeout + 3 * coverage.expected_seconds(ordered))
        run = run_suite(self.config, Plan("mutant", self.config.targets, mutant.id), ordered, args, wall=wall,
                        test_limits=self.test_limits(ordered, coverage.durations))
        result = self._classify(mutant, run, len(ordered))
        if result.status == Status.CAUGHT:
            self.catches[result.killed_by] = self.catches.get(result.killed_by, 0) + 1
            killers.setdefault(key, [])
            if result.killed_by in killers[key]:
                killers[key].remove(result.killed_by)
            killers[key].insert(0, result.killed_by)
        return self._judged(result, verdict)

    def test_limits(self, tests: list[str], durations: dict[str, float]) -> dict[str, float]:
        """Each test's limit under a mutant: a few times what it took unmutated, at least TEST_LIMIT_FLOOR
        seconds, at most the configured test timeout. A deadlocked set-up then costs seconds, not the timeout."""
        cap = self.config.test_timeout
        return {t: round(min(cap, max(TEST_LIMIT_FLOOR, TEST_LIMIT_FACTOR * durations[t])), 1)
                for t in tests if t in durations}

    @staticmethod
    def test_order(selected: list[str], covering: list[str], target_killers: list[str], catches: dict[str, int],
                   durations: dict[str, float]) -> list[str]:
        """The order a mutant's tests run in, under -x: most likely to fail first, then the cheapest.

        First the tests that caught an earlier mutant of the same function, latest first; then the other tests of
        their files (a guarantee file pins one mechanism); then those that caught any mutant, most catches first;
        then the tests that ran the function, then the rest (selected because the function also runs at import),
        each shortest first. A mutant of code that runs at import selects every test: in suite order a survivor's
        run would reach its limit before the tests that catch it.
        """
        chosen, ran_it = set(selected), set(covering)
        first = [t for t in target_killers if t in chosen]
        killer_files = {t.split("::")[0] for t in first}
        rest = [t for t in selected if t not in set(first)]
        rest.sort(key=lambda t: (t.split("::")[0] not in killer_files, -catches.get(t, 0), t not in ran_it,
                                 durations.get(t, 0.0)))
        return first + rest

    def _classify(self, mutant: operators.Mutant, run: SuiteRun, selected: int) -> MutantResult:
        failures = [f for f in run.failures if f.get("when") != "collect"]
        if failures:
            first = failures[0]
            return MutantResult(mutant, Status.CAUGHT, first["nodeid"], first.get("message", ""), selected,
                                round(run.seconds, 1))
        if run.returncode is None:
            finished = len({w["nodeid"] for w in run.windows})
            return MutantResult(mutant, Status.TIMEOUT, message=f"killed at the run's limit ({run.seconds:.0f} s) after "
                                f"{finished} of {selected} selected tests, none failed or timed out",
                                tests_selected=selected,
                                seconds=round(run.seconds, 1))
        if run.returncode in (0, 5):
            note = "" if run.applied_in else "the mutated module was never imported in the run"
            if run.unplaced:  # Triton's interpreter compiles a jit function's source: it ran the original
                note = "; ".join(filter(None, [note, "code that reads source saw the original text of "
                                               + ", ".join(run.unplaced) + " (its mutated text did not fit its lines)"]))
            return MutantResult(mutant, Status.SURVIVED, message=note, tests_selected=selected,
                                seconds=round(run.seconds, 1))
        return MutantResult(mutant, Status.ERROR, message=f"pytest exit {run.returncode} with no failed test: "
                            + run.output_tail[-300:], tests_selected=selected, seconds=round(run.seconds, 1))

    @staticmethod
    def _judged(result: MutantResult, verdict) -> MutantResult:
        """A verdict of the configuration turns a mutant no test caught into equivalent or device-only.

        A run stopped at its limit counts too: an equivalence is argued from the code, not from the tests.
        """
        if verdict is not None:
            result.verdict = verdict.why
            result.npu_test = verdict.npu_test
            if result.status in (Status.SURVIVED, Status.NOT_RUN, Status.TIMEOUT, *VERDICTS):  # a kind may change
                result.status = Status(verdict.kind)
        return result

    def rejudge(self, results: list[MutantResult]) -> list[MutantResult]:
        """Recorded results under the configuration's verdicts as they are now (added, changed or withdrawn)."""
        for result in results:
            verdict = self.config.verdict_for(result.mutant)
            if result.status in VERDICTS and verdict is None:
                # what the run said before the verdict, or, for a mutant never run, that it has not run yet
                unrun = result.message == JUDGED_WITHOUT_A_RUN
                result.status, result.verdict, result.npu_test = (Status.NOT_RUN if unrun else Status.SURVIVED), "", ""
            self._judged(result, verdict)
        return results


def _within(mutant: operators.Mutant, name: str) -> bool:
    """Whether the mutant lies in the function ``name`` (a qualified name), or in a function nested in it."""
    return mutant.function == name or mutant.function.startswith(name + ".")


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
