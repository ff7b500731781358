"""The HTML view for a person: per test, a timeline of its phases and each phase's imports as a waterfall tree.

One self-contained page (inline CSS, no script, no network): ``<details>``
elements make every test, phase and module expandable in any browser. A
module's bar sits where its load began within the phase and is as long as
the load took, its children (the modules its code imported) nested under it,
like an import-time waterfall.

    pytest --npu-lazy-html=imports.html ...
    python -m pytest_npu_lazy.reports.html report.json -o imports.html   # a report written with --npu-lazy-json-modules
"""

from __future__ import annotations

import argparse
import sys
from html import escape

from ..probe.recorder import matches
from .schema import ReportError, environment_label, load_report, write_text

_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; margin: 0 0 .3em; }
.env { color: #555; margin-bottom: 1em; }
details { margin: 0; }
summary { cursor: pointer; list-style-position: inside; }
details.test { border: 1px solid #ccc; border-radius: 4px; margin: .4em 0; padding: .2em .5em; }
details.test > summary { font-weight: 600; }
.outcome { display: inline-block; min-width: 5.5em; font-family: monospace; }
.outcome.passed { color: #1a7f37; } .outcome.failed, .outcome.error { color: #cf222e; }
.outcome.skipped, .outcome.xfailed, .outcome.xpassed { color: #9a6700; }
.message { white-space: pre-wrap; font-family: monospace; font-size: 12px; color: #cf222e; margin: .3em 0; }
.row { display: grid; grid-template-columns: minmax(0, 3fr) 6em 5em minmax(8em, 2fr); align-items: center; gap: .5em; }
.row > .name { min-width: 0; overflow-wrap: anywhere; }
.module.violation > .row > .name, .module.violation > summary > .name { color: #cf222e; font-weight: 600; }
.num { text-align: right; font-family: monospace; font-size: 12px; }
.track { position: relative; height: 12px; background: #f3f3f3; }
.bar { position: absolute; top: 0; height: 12px; min-width: 1px; background: #8ab4f8; }
.phase > summary .bar { background: #3b7ddd; }
.violation > summary .bar, .module.violation > summary .bar { background: #cf222e; }
.watched > summary .name { font-weight: 600; }
.badge { font-size: 11px; padding: 0 .4em; border-radius: 3px; background: #ddf4ff; margin-left: .3em; }
.badge.bad { background: #ffebe9; color: #cf222e; }
.modules { margin-left: 0; }
.leaf { list-style: none; }
summary.row { list-style: none; }
summary.row::-webkit-details-marker { display: none; }
summary.row > .name::before { content: "\\25B8\\00A0"; color: #888; }
details[open] > summary.row > .name::before { content: "\\25BE\\00A0"; }
.leaf > .row > .name::before { content: "\\00A0\\00A0\\00A0"; }
.chain { font-family: monospace; font-size: 12px; color: #555; margin: .1em 0 .1em 2em; }
.calls { font-family: monospace; font-size: 12px; margin: .1em 0 .3em 2em; }
.calls li.violation { color: #cf222e; font-weight: 600; }
"""

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>{style}</style>
</head>
<body>
<h1>{title}</h1>
<div class="env">{environment}</div>
<div class="counts">{counts}</div>
{tests}
</body>
</html>
"""


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _bar(start: float, duration: float, origin: float, span: float) -> str:
    span = span or 1e-9
    left = min(max((start - origin) / span, 0.0), 1.0) * 100
    width = min(max(duration / span, 0.0), 1.0 - left / 100) * 100
    return f'<span class="track"><span class="bar" style="left:{left:.2f}%;width:{width:.2f}%"></span></span>'


def _tree(modules: list[dict]) -> tuple[list[dict], dict[str, list[dict]]]:
    """Roots (imported by code outside this phase's loads) and each module's children, in load order."""
    names = {m["name"] for m in modules}
    children: dict[str, list[dict]] = {}
    roots = []
    for module in modules:
        parent = module.get("parent")
        if parent in names and parent != module["name"]:
            children.setdefault(parent, []).append(module)
        else:
            roots.append(module)
    return roots, children


def _label(name: str) -> str:
    """A module name that wraps after its dots (anywhere, if a part alone is wider than its column)."""
    return escape(name).replace(".", ".<wbr>")


def _indent(depth: int) -> str:
    """Nesting as indentation, at most half the name's column, so a deep module keeps room for its name."""
    return f"padding-left:min({depth * 14}px,50%)"


def _path_to(bad: str | None, modules: list[dict]) -> set[str]:
    """The violating module and the modules it was imported under in its phase: open, so its row shows."""
    parents = {m["name"]: m.get("parent") for m in modules}
    path = set()
    name = bad
    while name in parents and name not in path:
        path.add(name)
        name = parents[name]
    return path


def _module(module: dict, children: dict[str, list[dict]], depth: int, phase: dict, watch: list[str],
            bad: str | None, expand: bool, path: set[str]) -> str:
    name = module["name"]
    classes = ["module"]
    if any(matches(name, pattern) for pattern in watch):
        classes.append("watched")
    if name == bad:
        classes.append("violation")
    kids = children.get(name, [])
    label = _label(name) + (' <span class="badge">untracked</span>' if module.get("untracked") else "")
    if kids:
        label += f' <span class="badge">{len(kids)}</span>'
    row = (f'<span class="name" style="{_indent(depth)}" title="{escape(name)}">{label}</span>'
           f'<span class="num">{_ms(module["duration"])}</span><span class="num"></span>'
           + _bar(module["start"], module["duration"], phase["start"], phase["duration"]))
    if not kids:
        return f'<div class="leaf {" ".join(classes)}" data-module="{escape(name)}"><div class="row">{row}</div></div>'
    inner = "".join(_module(kid, children, depth + 1, phase, watch, bad, expand, path) for kid in kids)
    return (f'<details class="{" ".join(classes)}"{_open(expand or name in path)} data-module="{escape(name)}">'
            f'<summary class="row">{row}</summary>{inner}</details>')


def _open(expand: bool) -> str:
    return " open" if expand else ""


def _phase(phase: dict, total: float, watch: list[str], violation: dict | None, expand: bool) -> str:
    bad = violation["module"] if violation and violation.get("phase") == phase["name"] else None
    classes = "phase violation" if bad else "phase"
    badges = "".join(f'<span class="badge">{escape(w["module"])} ({w["count"]})</span>'
                     for w in phase.get("watched", []))
    calls = phase.get("device_calls", [])
    if calls:
        badges += f'<span class="badge">{sum(c["count"] for c in calls)} device calls</span>'
    if bad:
        badges += f'<span class="badge bad">violation: {_label(bad)}</span>'
    row = (f'<span class="name">{escape(phase["name"])}{badges}</span>'
           f'<span class="num">{_ms(phase["duration"])}</span><span class="num">{"?" if phase["module_count"] is None else phase["module_count"]} mod</span>'
           + _bar(phase.get("start", 0.0), phase["duration"], 0.0, total))
    chains = "".join(f'<div class="chain">{escape(" <- ".join(w["chain"]))}'
                     + (f" &nbsp;[at {escape(w['trigger'])}]" if w.get("trigger") else "") + "</div>"
                     for w in phase.get("watched", []))
    roots, children = _tree(phase.get("modules", []))
    path = _path_to(bad, phase.get("modules", []))
    body = "".join(_module(m, children, 0, phase, watch, bad, expand, path) for m in roots)
    return (f'<details class="{classes}"{_open(expand or bool(bad))} data-phase="{escape(phase["name"])}">'
            f'<summary class="row">{row}</summary>{chains}{_device_calls(calls, bad)}'
            f'<div class="modules">{body}</div></details>')


def _device_calls(calls: list[dict], bad: str | None) -> str:
    """The phase's ACL / HCCL calls in order (runs of one call from one line counted), each with its line."""
    if not calls:
        return ""
    items = []
    for call in calls:
        times = f" x{call['count']}" if call["count"] > 1 else ""
        kind = "violation" if call["name"] == bad else "call"
        items.append(f'<li class="{kind}" data-call="{escape(call["name"])}">{escape(call["name"])}{times} &rarr; '
                     f'{call["result"]} &nbsp;<span class="where">{escape(call["where"])}</span></li>')
    return '<details class="calls"><summary>device calls</summary><ol>' + "".join(items) + "</ol></details>"


def _test(test: dict, watch: list[str], expand: bool) -> str:
    phases = test.get("phases", [])
    total = max((p.get("start", 0.0) + p["duration"] for p in phases), default=0.0)
    outcome = test["outcome"]
    head = (f'<span class="outcome {outcome}">{outcome.upper()}</span> {escape(test["nodeid"])} '
            f'<span class="num">({_ms(total)} in the {escape(str(test.get("isolation")))} child)</span>')
    message = ""
    if test.get("message") and outcome in ("failed", "error"):
        message = f'<div class="message">{escape(test["message"])}</div>'
    body = "".join(_phase(p, total, watch, test.get("violation"), expand) for p in phases)
    is_open = _open(expand or outcome in ("failed", "error"))
    return (f'<details class="test {outcome}"{is_open} data-nodeid="{escape(test["nodeid"])}"><summary>{head}</summary>'
            f"{message}{body}</details>")


def render(report: dict, title: str = "pytest-npu-lazy: imports per test and phase", expand: bool = False) -> str:
    """The page for a JSON report document (isolated tests only; module trees need per-module data).

    Failed tests start open, and so do a violation's phase and the modules it was imported under, so
    the violating module's row shows in full; ``expand`` opens everything (for printing and screenshots).
    """
    env = report.get("environment", {})
    environment = escape(f"{environment_label(env)}, Python {env.get('python')}, {env.get('platform')}, "
                         f"device {env.get('device')}")
    watch = report.get("run", {}).get("watch", [])
    tests = [t for t in report.get("tests", []) if t.get("isolation")]
    counts: dict[str, int] = {}
    for test in tests:
        counts[test["outcome"]] = counts.get(test["outcome"], 0) + 1
    count_text = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())) or "no isolated test"
    return _PAGE.format(title=escape(title), style=_STYLE, environment=environment, counts=escape(count_text),
                        tests="\n".join(_test(t, watch, expand) for t in tests))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_npu_lazy.reports.html",
                                     description="Draw a JSON report (written with --npu-lazy-json-modules) as HTML.")
    parser.add_argument("report", help="a JSON report")
    parser.add_argument("-o", "--output", required=True, help="the HTML file to write")
    parser.add_argument("--expand", action="store_true", help="open every test, phase and module")
    args = parser.parse_args(argv)
    try:
        report = load_report(args.report)
    except ReportError as exc:
        parser.error(str(exc))
    if any(t.get("phases") and "modules" not in t["phases"][0] for t in report["tests"]):
        parser.error(f"{args.report}: has no per-module data; write it with --npu-lazy-json-modules")
    write_text(args.output, render(report, expand=args.expand))
    return 0


if __name__ == "__main__":
    sys.exit(main())
