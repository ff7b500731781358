"""The end-of-run section "npu_lazy: phases and watched modules", written the way pytest's own are.

pytest's summaries show what needs a look and leave the rest out unless
asked: failures always, passes with ``-rA``, a line per test with ``-v``.
A section with two lines for every isolated test buries the warnings summary
and the failures of a large run (281 lines for test/dynamo), and lines of
300 characters wrap into noise in a terminal and in CI logs. So, by default,
only tests that failed, errored, broke a guarantee, went over their import
budget or could not be judged against it are shown, with their phases, the
violating module's import chain and the budget verdict; ``-v`` (or
``--npu-lazy-summary=all``) shows every isolated test; every line fits the
terminal's width. The data behind it is the JSON report's (``result_entry``).
"""

from __future__ import annotations

import textwrap
from collections import Counter
from typing import Mapping

SECTION = "npu_lazy: phases and watched modules"
#: ``--npu-lazy-summary``: auto (failed and not judged; everything with -v), failed, all, none
SUMMARY_CHOICES = ("auto", "failed", "all", "none")

_MARKUP = {"passed": {"green": True}, "failed": {"red": True}, "error": {"red": True},
           "xpassed": {"yellow": True}, "xfailed": {"yellow": True}, "skipped": {"yellow": True}}
#: joins the parts that may be broken between, inside a text that is wrapped
_KEEP = "\x00"


def needs_attention(entry: dict) -> bool:
    """Failed or errored, broke a guarantee, over budget, or not comparable with the budget's baseline."""
    return (bool(entry["violation"] or entry["budget"] or entry.get("budget_not_judged"))
            or entry["outcome"] in ("failed", "error"))


def shown(entries: list[dict], choice: str, verbosity: int) -> list[dict]:
    """The entries the section lists for ``--npu-lazy-summary=choice`` at this verbosity."""
    if choice == "none":
        return []
    if choice == "all" or (choice == "auto" and verbosity > 0):
        return list(entries)
    return [entry for entry in entries if needs_attention(entry)]


def fit(units: list[str], indent: str, width: int, deeper: str = "  ") -> list[str]:
    """``units`` joined by spaces, in lines of at most ``width`` characters, broken between units.

    A unit is kept whole where it fits a line (a chain's link, a phase's
    time, a watched module list, a violation mark), and the spaces it starts
    with separate it from the one before on the same line; one wider than a line is
    broken between its words, and a word wider than a line is cut across
    lines: no line is wider than ``width`` (at least 40 characters beyond
    the indent, as narrow terminals still need room). Continuation lines are
    indented ``deeper``.
    """
    width = max(width, len(indent) + len(deeper) + 40)
    room = width - len(indent) - len(deeper)
    pieces: list[str] = []
    for unit in filter(None, units):
        pad = len(unit) - len(unit.lstrip(" "))  # more space before a unit on the same line; none after a break
        unit = unit.lstrip(" ")
        if pieces and pad > 1:
            pieces[-1] += _KEEP * (pad - 1)
        pieces.append(unit if len(unit) > room else unit.replace(" ", _KEEP))
    lines = textwrap.wrap(" ".join(pieces), width=width, initial_indent=indent, subsequent_indent=indent + deeper,
                          break_long_words=True, break_on_hyphens=False)
    return [line.replace(_KEEP, " ").rstrip() for line in lines]


def joined(groups: list[list[str]], separator: str) -> list[str]:
    """The units of several groups, ``separator`` ending each group but the last (``|``, ``<-``, ``,``)."""
    units: list[str] = []
    for i, group in enumerate(groups):
        group = [unit for unit in group if unit]
        if i < len(groups) - 1 and group:
            group[-1] += separator
        units += group
    return units


def entry_lines(entry: dict, verbosity: int = 0, width: int = 80,
                verdict: str | None = None) -> list[tuple[str, dict]]:
    """The section's lines for one isolated test, each with its terminal markup.

    Verbosity 0 (and ``-q``), and a test that passed without a remark at
    ``-v``: the phases on one line (wrapped), each with its watched first
    loads. ``-v`` for a test that needs attention (failed, broke a guarantee,
    over budget), and ``-vv`` for every test: a line per phase with module
    counts and each watched module's import chain with the line that asked
    for it (a passing test's 60 lines of chains drowned the failures).
    ``-vv``: every module per phase too (a phase can load 1,500 modules:
    the JSON report, ``--npu-lazy-json-modules``, has them as data). Then
    the violating module's import chain, and ``verdict``, the budget gate's
    word on the test when a baseline is checked.
    """
    violation = entry.get("violation") or {}
    over = {p["phase"] for p in entry.get("budget") or []}
    markup = _MARKUP.get(entry["outcome"], {})
    head = [entry["outcome"].upper(), entry["nodeid"], f"  ({entry['isolation']}, {own_time(entry):.2f} s)"]
    lines = [(text, markup) for text in _head(head, width)]

    def marks(phase: dict) -> list[str]:
        found = []
        if violation.get("phase") == phase["name"]:
            verb = {"loaded": "must not be loaded", "device_call": "must not be called"}.get(violation["kind"],
                                                                                             "was not loaded")
            found.append(f"  << VIOLATION: {violation['module']} {verb}")
        if phase["name"] in over:
            found.append("  << OVER BUDGET")
        return found

    def watched(phase: dict) -> str:
        """``torch._dynamo (101)``; ``torch._dynamo.* (8)`` where only submodules of a pattern loaded here."""
        return ", ".join(f"{w['pattern'] if w['module'] == w['pattern'] else w['pattern'] + '.*'} ({w['count']})"
                         for w in phase["watched"])

    if verbosity <= 0 or (verbosity == 1 and not needs_attention(entry)):
        groups = []
        for phase in entry["phases"]:
            part = f"{phase['name']} {phase['duration']:.3f}s" + (" (died here)" if phase.get("unfinished") else "")
            if phase["module_count"]:
                part += f" +{phase['module_count']}"
            groups.append([part, f"[{watched(phase)}]" if phase["watched"] else "", *marks(phase)])
        lines += [(text, {}) for text in fit(joined(groups, " |"), "    ", width)]
    else:
        depth: dict[str, int] = {}
        for phase in entry["phases"]:
            depth[phase["name"]] = depth.get(phase.get("parent"), -1) + 1 if phase.get("parent") in depth else 0
            indent = "    " + "  " * depth[phase["name"]]
            name_width = max(16 - 2 * depth[phase["name"]], len(phase["name"]))
            text = f"{indent}{phase['name']:<{name_width}} {phase['duration']:8.3f} s {phase_modules(phase):>14}"
            mark = marks(phase)
            units = [text.strip(), f"   {watched(phase)}" if phase["watched"] else "", *mark]
            lines += [(line, {"red": True} if mark else {}) for line in fit(units, indent, width, deeper="    ")]
            for w in phase["watched"]:
                links = joined([[link] for link in w["chain"]], " <-") + ([f"[at {w['trigger']}]"]
                                                                          if w.get("trigger") else [])
                lines += [(line, {}) for line in fit(links, indent + "    ", width)]
            if verbosity > 1 and phase.get("modules"):
                names = [m["name"] for m in phase["modules"]]
                lines += [(line, {}) for line in fit(joined([["modules:", names[0]], *[[n] for n in names[1:]]], ","),
                                                     indent + "    ", width)]
    for phase in entry["phases"]:  # under --npu-lazy-cann=compute: what computed, per phase
        said = computed_by(phase.get("computed") or [])
        if said:
            lines += [(line, {}) for line in fit([f"computed in {phase['name']}:", *said], "    ", width)]
    for check in entry.get("checks") or []:  # what produced each value compared with eager
        lines += [(line, {} if kernel_checked(check) or not _on_emulated_npu(check) else {"yellow": True})
                  for line in fit(check_units(check), "    ", width)]
    if len(violation.get("chain") or ()) > 1:  # a loaded module's import chain, a device call's Python line
        links = joined([["violation:", violation["chain"][0]], *[[link] for link in violation["chain"][1:]]], " <-")
        lines += [(line, {"red": True}) for line in fit(links, "    ", width)]
    if verdict:
        lines += [(line, {}) for line in fit(["budget:", verdict], "    ", width)]
    return lines


#: the phases pytest's own times cover (its setup, call and teardown reports); collect is the module's import
RUN_PHASES = ("setup", "test", "teardown")


def own_time(entry: dict) -> float:
    """The test's time as its phases below say it (setup, test, teardown: they add up to it); pytest's reported
    durations where the child sent no phases. pytest times its call a little shorter than the phase the child
    measures around it, so a header computed from those would not add up with the lines under it."""
    phases = [p["duration"] for p in entry.get("phases") or [] if p["name"] in RUN_PHASES
              and p.get("parent") is None and p.get("duration") is not None]
    return sum(phases) if phases else entry["duration"]


#: what produced a compared value, in words: the ledger's ``by`` (and the reference module's own kinds)
PRODUCED_BY = {"Triton interpreter": "Triton kernel(s) in Triton's interpreter", "host ATen kernel": "the host's ATen",
               "unchanged input": "unchanged (an input or buffer as it was)", "device": "the device"}


def kernel_checked(check: dict) -> bool:
    """A check compared at least one value a Triton kernel produced."""
    return any(row.get("by") == "Triton interpreter" for row in (*check.get("outputs", ()), *check.get("gradients", ())))


def _on_emulated_npu(check: dict) -> bool:
    return any(row.get("by") in ("Triton interpreter", "host ATen kernel", "unchanged input")
               for row in (*check.get("outputs", ()), *check.get("gradients", ())))


def _producer(by: str, name: str) -> str:
    """Who produced a compared value: where the compiled code ran (``device`` rows name the device type), or
    :data:`PRODUCED_BY`'s words for the emulated NPU's producers."""
    if by == "device":
        return f"the compiled code on {name or 'its device'}"
    return PRODUCED_BY.get(by, by)


def check_units(check: dict) -> list[str]:
    """``checked first_call against eager: 2 outputs by Triton kernel(s) in Triton's interpreter (k);`` ... with a
    warning first where no Triton kernel produced any of the compared values on the emulated NPU."""
    units = [f"checked {check['phase']} against eager:"]
    if _on_emulated_npu(check) and not kernel_checked(check):
        units.insert(0, "NO TRITON KERNEL wrote a compared value last;")
    for kind, rows in (("output", check.get("outputs", [])), ("gradient", check.get("gradients", []))):
        by: dict[str, list[str]] = {}
        for row in rows:
            by.setdefault(row["by"], []).append(row.get("name", ""))
        for source, names in by.items():
            named = ", ".join(dict.fromkeys(n for n in names if n))
            producer = _producer(source, named)
            if source == "device":  # the row's name (the device type) is in the producer already
                named = ""
            units.append(f"{len(names)} {kind}{'s' if len(names) != 1 else ''} by {producer}"
                         + (f" ({named});" if named else ";"))
    units[-1] = units[-1].rstrip(";")
    if not check.get("passed", True):
        units.append("[FAILED]")
    return units


def check_tally(entries: list[dict]) -> list[str]:
    """The end-of-run lines of a run that compared compiled values with eager: under the emulated NPU that computes,
    how many compared values each kind of computation produced and which tests compared no Triton kernel's value;
    elsewhere (the host stub, a real device) how many values where the compiled code ran. Empty if none."""
    return _device_tally(entries) + _compute_tally(entries)


def _device_tally(entries: list[dict]) -> list[str]:
    """``4 compiled value(s) compared with eager in 2 test(s): 4 computed by the compiled code on cpu``."""
    counts: dict[str, int] = {}
    tests = 0
    for entry in entries:
        checks = [c for c in entry.get("checks") or [] if not _on_emulated_npu(c)]
        rows = [row for c in checks for row in (*c.get("outputs", ()), *c.get("gradients", ()))]
        if not rows:
            continue
        tests += 1
        for row in rows:
            key = _producer(row["by"], row.get("name") or "")
            counts[key] = counts.get(key, 0) + 1
    if not tests:
        return []
    parts = ", ".join(f"{n} computed by {key}" for key, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    return [f"{sum(counts.values())} compiled value(s) compared with eager in {tests} test(s): {parts}"]


def _compute_tally(entries: list[dict]) -> list[str]:
    counts: dict[str, int] = {}
    tests, without_kernel = 0, []
    for entry in entries:
        checks = [c for c in entry.get("checks") or [] if _on_emulated_npu(c)]
        if not checks:
            continue
        tests += 1
        for check in checks:
            for row in (*check.get("outputs", ()), *check.get("gradients", ())):
                counts[row["by"]] = counts.get(row["by"], 0) + 1
        if not any(kernel_checked(c) for c in checks):
            without_kernel.append(entry["nodeid"])
    if not tests:
        return []
    total = sum(counts.values())
    parts = ", ".join(f"{n} by {PRODUCED_BY.get(by, by)}" for by, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    lines = [f"compute mode (the emulated NPU: Triton's interpreter and the host's ATen, not a device): {total} "
             f"compiled value(s) compared with eager in {tests} test(s): {parts}"]
    if without_kernel:
        lines.append(f"{len(without_kernel)} test(s) compared no value a Triton kernel wrote last:")
        lines += [f"  {nodeid}" for nodeid in without_kernel[:5]]
        if len(without_kernel) > 5:
            lines.append(f"  and {len(without_kernel) - 5} more (-v lists each)")
    return lines


def computed_by(rows: list[dict]) -> list[str]:
    """``Triton interpreter: k1, k2;`` ``host ATen kernel: 3 operators;`` ``refused: aclopCompileAndExecute``."""
    by: dict[str, list[str]] = {}
    for row in rows:
        by.setdefault(row["by"], []).append(row["name"])
    said = []
    for kind, names in by.items():
        if kind == "host ATen kernel":
            said.append(f"{kind}: {len(names)} operator{'s' if len(names) != 1 else ''};")
        else:
            said.append(f"{kind}: {', '.join(dict.fromkeys(names))};")
    if said:
        said[-1] = said[-1].rstrip(";")
    return said


def _head(parts: list[str], width: int) -> list[str]:
    """``OUTCOME nodeid (fork, 1.00 s)``: the node id is never broken (pytest does not break it either)."""
    outcome, nodeid, tail = parts
    first = f"{outcome} {nodeid}"
    if len(first) + len(tail) <= width:
        return [first + tail]
    return [first, "    " + tail.strip()]


def phase_modules(phase: Mapping[str, object]) -> str:
    """'12 modules', or why the count is unknown (the child died before it could report it)."""
    if phase.get("module_count") is None:
        return "modules unknown: the child died" if phase.get("unfinished") else "modules unknown"
    return f"{phase['module_count']} modules"


def skip_tally(reasons: list[str], width: int = 80, most: int = 5) -> list[str]:
    """Skips grouped by reason (as ``-rs`` words it, its first line), most frequent first, fitted to ``width``: on a
    runner without a device most of a suite's skips say which ``--npu-lazy-cann`` mode would run them, and pytest
    shows no reason without ``-rs``."""
    def said(reason: str) -> str:
        first = reason.strip().removeprefix("Skipped: ").strip().splitlines()
        return first[0] if first else "(no reason given)"

    counted = Counter(said(reason) for reason in reasons).most_common()
    lines = [f"{len(reasons)} test(s) skipped (-rs lists each):"]
    for reason, count in counted[:most]:
        lines += fit([f"{count} x", *reason.split(" ")], "  ", width, deeper="    ")
    if len(counted) > most:
        rest = counted[most:]
        lines.append(f"  {sum(count for _, count in rest)} x {len(rest)} other reason(s)")
    return lines
