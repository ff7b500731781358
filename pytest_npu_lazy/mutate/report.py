"""The pass's record: a score, provenance, and one row per mutant, as JSON and as markdown.

The score counts what a missing test could explain: caught out of the
mutants that are neither equivalent nor device-only. Survivors, timeouts
and harness errors all count against it until a test or a verdict says
otherwise.
"""

from __future__ import annotations

import json
import platform
import re
import subprocess
from collections import Counter
from importlib import metadata
from pathlib import Path

from .session import MutantResult
from .operators import OPERATORS
from .runs import GRAPH_CACHES
from .selection import CoverageMap
from .status import NOT_CAUGHT, VERDICTS, Status

EXCUSED = VERDICTS

INTRO = """# Mutation pass over {subject}

Written by `python -m pytest_npu_lazy.mutate` ({config} names the functions, the verdicts
and the CI sample; `--help` lists the options). Each mutant is one edit of one installed torch_npu module,
applied in memory at import in every process of a `{run}` run (pytest, zygotes,
children, `python -c`); the files on disk are never touched. A mutant runs only the tests that ran its
function in the coverage pass (every test, where the function also runs at import, in a zygote), the tests
that caught its neighbours first, with `-x`. It is *caught* when a test fails or is killed at its timeout;
a run killed at its own limit, or a pytest that breaks with no test failed, catches nothing.{caches}

*Equivalent*: no observable difference (argued in the row). *Device-only*: the difference shows only on an
Ascend NPU; the row names the test that would catch it on an NPU runner. The score counts caught mutants
out of all the others.
"""


GRAPH_CACHES_SAID: dict[str | None, str] = {  # by the provenance's inductor_graph_caches, which may be missing
    "off": (" Every run had\nInductor's graph caches off (docs/inductor-cache.md): their key omits torch_npu's "
            "sources, so a mutant of its\nlowerings or codegen was compiled, never served a graph compiled before it."),
    "cold": (" Every run missed\nInductor's graph caches (a cache-key tag of its own; docs/inductor-cache.md): "
             "their key omits torch_npu's\nsources, so a mutant of its lowerings or codegen was compiled, never "
             "served a graph compiled before it."),
}


def score(results: list[MutantResult]) -> dict:
    counts = Counter(r.status for r in results)
    judged = len(results) - sum(counts[k] for k in EXCUSED)
    caught = counts[Status.CAUGHT]
    return {"generated": len(results), "caught": caught, "survived": counts[Status.SURVIVED],
            "not_run": counts[Status.NOT_RUN], "timeout": counts[Status.TIMEOUT], "error": counts[Status.ERROR],
            "equivalent": counts[Status.EQUIVALENT], "device_only": counts[Status.DEVICE_ONLY],
            "judged": judged, "score_pct": round(100.0 * caught / judged, 1) if judged else None}


def installed_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _commit(root: Path) -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def provenance(command: str, root: Path, seconds: float, coverage: CoverageMap, earlier: dict | None = None,
               sources: dict[str, str] | None = None, shard: str | None = None) -> dict:
    """Where a record comes from. A resumed record keeps the command that began it; the commands that went on
    with it (a resume, some mutants run again) are listed after it, once each. ``shard``: the ``K/N`` of a
    shard's record (:func:`combine_shards` merges the N)."""
    first, then = command, []
    if earlier and earlier.get("command"):
        first, then = earlier["command"], list(earlier.get("then", []))
        if command != first and command not in then:
            then.append(command)
    return {"command": first, "then": then, "commit": _commit(root), "torch_npu": installed_version("torch-npu"),
            "torch": installed_version("torch"), "python": platform.python_version(),
            "wall_seconds": round(seconds),
            "coverage_seconds": coverage.seconds, "tests": len(coverage.tests),
            "inductor_graph_caches": GRAPH_CACHES,  # in every run since it was recorded
            "sources": dict(sources or (earlier or {}).get("sources", {})),  # config.digest of each mutated module
            **({"shard": shard} if shard else {})}


def merge(recorded: dict[str, MutantResult], prov: dict, other: list[MutantResult], other_prov: dict) -> dict:
    """Add another record's results to ``recorded`` (in place) and return the provenance of the two.

    Shards of one pass (``--function`` side by side, from copies of one record) share what they resumed from:
    a mutant keeps the result it has, unless that is "not-run" and the other record ran it, or the other record
    caught what this one did not (a run of tests written since, ``--only`` against the files that hold them: the
    test that failed is named). The provenance lists each merged record's commands and wall time apart; wall
    times are not added up, since shards overlap.
    """
    for result in other:
        mine = recorded.get(result.mutant.id)
        if (mine is None or (mine.status == Status.NOT_RUN and result.status != Status.NOT_RUN)
                or (mine.status in (Status.SURVIVED, Status.TIMEOUT, Status.ERROR) and result.status == Status.CAUGHT)):
            recorded[result.mutant.id] = result
    merged = [dict(m) for m in prov.get("merged", [])]
    entry = {"command": other_prov.get("command", "not recorded"), "then": list(other_prov.get("then", [])),
             "wall_seconds": other_prov.get("wall_seconds")}
    if entry not in merged:
        merged.append(entry)
    return {**prov, "merged": merged}


#: provenance that one run and its N shards record alike (each shard ran on the same checkout and versions)
_SHARED = ("commit", "torch_npu", "torch", "python", "tests", "inductor_graph_caches", "sources")


def combine_shards(records: list[tuple[Path, list[MutantResult], dict]]) -> tuple[dict[str, MutantResult], dict]:
    """The N records of ``--shard 1/N`` ... ``--shard N/N`` as the one record a single run writes.

    The results are the shards' results together (a stable hash gave each mutant to one shard; a mutant in two
    records, after a ``--resume`` from another shard's copy, keeps the result :func:`merge` prefers). The
    provenance is one run's, with what necessarily differs combined: ``command`` is shard 1's without
    ``--shard K/N``; ``wall_seconds`` and ``coverage_seconds`` the longest shard's (the shards run side by
    side; each takes the coverage pass); ``commit``, versions and sources must agree (else the records are
    refused); and ``shards`` lists each shard's own command and times, after the keys one run writes.
    """
    from ..shard import ShardError, check_complete, parse, without_shard

    parsed = []
    for path, _results, prov in records:
        if not prov.get("shard"):
            raise ShardError(f"{path} is not a shard's record (no --shard in its provenance): merge the N records "
                             "written with --shard K/N, or merge a --function record on its own")
        parsed.append(parse(prov["shard"], option=f"{path}: shard"))
    check_complete(parsed, "records")
    ordered = sorted(zip(parsed, records), key=lambda pair: pair[0].index)
    firstprov = ordered[0][1][2]
    for key in _SHARED:
        differ = {str(prov.get(key)) for _shard, (_path, _results, prov) in ordered}
        if len(differ) > 1:
            raise ShardError(f"the shards' records differ in {key} ({'; '.join(sorted(differ))}): run every shard on "
                             "the same checkout and versions, then merge")
    recorded: dict[str, MutantResult] = {}
    for _shard, (_path, results, prov) in ordered:
        merge(recorded, {}, results, prov)
    then: list[str] = []
    for _shard, (_path, _results, prov) in ordered:
        then += [c for c in (without_shard(c) for c in prov.get("then", [])) if c not in then]
    combined = {"command": without_shard(firstprov.get("command", "not recorded")), "then": then,
                **{key: firstprov.get(key) for key in _SHARED[:4]},
                "wall_seconds": max(prov.get("wall_seconds") or 0 for _s, (_p, _r, prov) in ordered),
                "coverage_seconds": max(prov.get("coverage_seconds") or 0 for _s, (_p, _r, prov) in ordered),
                **{key: firstprov.get(key) for key in _SHARED[4:]}}
    if any(prov.get("partial") for _s, (_p, _r, prov) in ordered):
        combined["partial"] = True
    combined["shards"] = [{"shard": str(s), "command": prov.get("command", "not recorded"),
                           "then": list(prov.get("then", [])), "wall_seconds": prov.get("wall_seconds"),
                           "coverage_seconds": prov.get("coverage_seconds")} for s, (_p, _r, prov) in ordered]
    return recorded, combined


def write_json(path: Path, results: list[MutantResult], prov: dict) -> None:
    data = {"provenance": prov, "score": score(results), "mutants": [r.to_dict() for r in results]}
    write_text(path, portable(json.dumps(data, indent=1)) + "\n")


def write_text(path: Path, text: str) -> None:
    """Atomically: the record is rewritten after every mutant, and a SIGTERM or a full disk mid-write must leave
    the last whole record (the one the exit message says to resume from), never half of one."""
    from ..reports.schema import write_text as write_atomically

    write_atomically(path, text)



def portable(text: str) -> str:
    """The record names no machine's paths: it is committed, and read on other machines.

    An installed file is named from its site-packages, this project's files from its root, an interpreter by
    its name.
    """
    text = re.sub(r"/[^\s\"']*/site-packages/", "site-packages/", text)
    text = re.sub(r"/[^\s\"']*/bin/(python[0-9.]*)", r"\1", text)
    root = str(Path.cwd())
    text = text.replace(root + "/", "").replace(root, ".")
    # what is left in a home folder (a Python installed there) is named from the home folder
    return re.sub(r"(?<![\w.~])/(?:root|home/[^/\s\"']+)/", "~/", text)


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def markdown(results: list[MutantResult], prov: dict, not_run: list | None = None, config=None) -> str:
    """The report; ``config`` (a Config) names what the pass is over and how each mutant ran."""
    s = score(results)
    intro = INTRO.format(
        subject=config.subject if config is not None else "torch_npu's deferred-loading code",
        config=_relative(config.path, config.root) if config is not None else "test/dynamo/mutation.toml",
        run=config.describe_run() if config is not None else "pytest -p npu_lazy test/dynamo",
        caches=GRAPH_CACHES_SAID.get(prov.get("inductor_graph_caches"), ""))
    out = [intro,
           "## Score\n",
           f"**{s['caught']} of {s['judged']} caught ({s['score_pct']} %)**: mutants generated "
           f"{s['generated'] + len(not_run or [])}, run {s['generated']}, caught {s['caught']}, survived {s['survived']}, run by no test {s['not_run']}, "
           f"timed out {s['timeout']}, harness errors {s['error']}, equivalent {s['equivalent']}, "
           f"device-only {s['device_only']}.\n",
           "| provenance | |", "| --- | --- |"]
    for key, label in (("command", "command"), ("commit", "commit"), ("torch_npu", "torch_npu"), ("torch", "torch"),
                       ("python", "Python"), ("wall_seconds", "wall time (s)"),
                       ("coverage_seconds", "coverage pass (s)"), ("tests", "tests in the coverage pass")):
        value = prov.get(key, "not recorded")
        value = f"`{value}`" if key == "command" else value
        out.append(f"| {label} | {value} |")
        if key == "command":
            out += [f"| then | `{command}` |" for command in prov.get("then", [])]
    for each in prov.get("shards", []):
        out.append(f"| shard {each['shard']} | `{each['command']}` ({each.get('wall_seconds', 'not recorded')} s "
                   "of wall time) |")
    for other in prov.get("merged", []):
        commands = [other["command"], *other.get("then", [])]
        new = [c for c in commands if c != prov.get("command") and c not in prov.get("then", [])]
        out.append(f"| merged from a record of | {'; '.join(f'`{c}`' for c in new) or '(the same commands)'} "
                   f"({other.get('wall_seconds', 'not recorded')} s of wall time in all) |")
    made = Counter(r.mutant.operator for r in results)
    out += ["", "## Operators\n", "| operator | the edit | mutants |", "| --- | --- | --- |"]
    out += [f"| {name} | {_cell(edit)} | {made.get(name, 0)} |" for name, edit in OPERATORS.items()]
    for title, statuses in (("Not caught, and why", NOT_CAUGHT),
                            ("Equivalent and device-only", EXCUSED)):
        rows = [r for r in results if r.status in statuses]
        out += ["", f"## {title}\n"]
        if not rows:
            out.append("None.")
            continue
        out += ["| mutant | function | line | edit | status | why / the test on an NPU runner |",
                "| --- | --- | --- | --- | --- | --- |"]
        for r in rows:
            why = r.verdict + (f" (on an NPU runner: `{r.npu_test}`)" if r.npu_test else "") if r.verdict else r.message
            out.append(f"| `{r.mutant.id}` | `{r.mutant.function}` | {r.mutant.line} | {_cell(r.mutant.description)} "
                       f"| {r.status} | {_cell(why)} |")
    if not_run:
        functions = sorted({m.function for m in not_run})
        out += ["", "## Generated but not run yet\n",
                f"{len(not_run)} mutants of the configured functions have no result here yet (the run above was "
                "limited with `--function`); `--resume` with the same `--json` runs them. Their functions: "
                + ", ".join(f"`{f}`" for f in functions) + "."]
    out += ["", "## Every mutant\n", "| mutant | function | line | operator | edit | result |",
            "| --- | --- | --- | --- | --- | --- |"]
    for r in results:
        result = f"caught by `{r.killed_by}`" if r.status == Status.CAUGHT else str(r.status)
        out.append(f"| `{r.mutant.id}` | `{r.mutant.function}` | {r.mutant.line} | {r.mutant.operator} "
                   f"| {_cell(r.mutant.description)} | {result} |")
    return portable("\n".join(out)) + "\n"


def _relative(path, root) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return path.name
