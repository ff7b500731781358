"""The HTML view for a person: per test, a timeline of its phases and each phase's imports as a waterfall tree.

One self-contained page (inline CSS and script, no network). Tests, phases,
watched chains, device calls and a violation are plain HTML in ``<details>``
elements. The module trees are data, drawn by a small inline script when a
phase opens: the tests of a suite load much the same modules (most of
test/dynamo's import phases the same thousand), so the page stores each
module name once and each distinct tree (names and who imported whom) once,
and per phase only the times. As HTML the trees made test/dynamo's page
tens of MB.
A module's bar sits where its load began within the phase and is as long as
the load took, its children (the modules its code imported) nested under it,
like an import-time waterfall.

    pytest --npu-lazy-html=imports.html ...
    python -m pytest_npu_lazy.reports.html report.json -o imports.html   # a report written with --npu-lazy-json-modules
"""

from __future__ import annotations

import argparse
import json
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
.watched > summary > .name, .watched > .row > .name { font-weight: 600; }
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
<body{body}>
<h1>{title}</h1>
<div class="env">{environment}</div>
<div class="counts">{counts}</div>
<noscript><p class="message">Module trees are drawn by this page's script; without it, phases, watched chains,
device calls and violations still show.</p></noscript>
{tests}
<script type="application/json" id="npu-lazy-data">{data}</script>
<script>{script}</script>
</body>
</html>
"""


#: Draws a phase's module tree from the page's data (``_Data``) into its ``.modules`` box: at load for a
#: phase that starts open, else when the phase is first opened, so a page of a thousand tests stays quick.
#: The markup is what a static page would have: rows, bars, badges, classes, open ancestors of a violation.
_SCRIPT = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("npu-lazy-data").textContent);
  var expand = document.body.hasAttribute("data-expand"), watched = {};
  data.watched.forEach(function (index) { watched[index] = true; });

  function esc(text) {
    return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
  }
  function ms(units) {
    var seconds = units * data.unit;
    return seconds < 1 ? (seconds * 1000).toFixed(1) + " ms" : seconds.toFixed(2) + " s";
  }
  function bar(start, length, span) {
    span = span || 1e-9;
    var left = Math.min(Math.max(start / span, 0), 1), width = Math.min(Math.max(length / span, 0), 1 - left);
    return '<span class="track"><span class="bar" style="left:' + (left * 100).toFixed(2) + "%;width:"
      + (width * 100).toFixed(2) + '%"></span></span>';
  }

  function draw(box) {
    var phase = data.phases[+box.getAttribute("data-m")], tree = data.trees[phase[0]], span = phase[1];
    var bad = box.getAttribute("data-bad"), count = tree.length / 2;
    var starts = [], kids = [], roots = [], open = {}, at = 0, i, up;
    for (i = 0; i < count; i++) {
      at += phase[2 + 2 * i];
      starts.push(at);
      kids.push([]);
    }
    for (i = 0; i < count; i++) {
      up = tree[2 * i + 1];
      (up ? kids[i - up] : roots).push(i);
    }
    function index(i) { return tree[2 * i] < 0 ? ~tree[2 * i] : tree[2 * i]; }
    for (i = 0; i < count; i++) {  // a violation's importers start open, so its row shows
      if (data.names[index(i)] !== bad) continue;
      for (up = i; !open[up]; up -= tree[2 * up + 1]) {
        open[up] = true;
        if (!tree[2 * up + 1]) break;
      }
    }
    function module(i, depth) {
      var name = data.names[index(i)], children = kids[i], length = phase[3 + 2 * i];
      var classes = "module" + (watched[index(i)] ? " watched" : "") + (name === bad ? " violation" : "");
      var label = esc(name).replace(/\./g, ".<wbr>") + (tree[2 * i] < 0 ? ' <span class="badge">untracked</span>' : "")
        + (children.length ? ' <span class="badge">' + children.length + "</span>" : "");
      var row = '<span class="name" style="padding-left:min(' + depth * 14 + 'px,50%)" title="' + esc(name) + '">'
        + label + '</span><span class="num">' + ms(length) + '</span><span class="num"></span>'
        + bar(starts[i], length, span);
      if (!children.length) {
        return '<div class="leaf ' + classes + '" data-module="' + esc(name) + '"><div class="row">' + row + "</div></div>";
      }
      return '<details class="' + classes + '"' + (expand || open[i] ? " open" : "") + ' data-module="' + esc(name)
        + '"><summary class="row">' + row + "</summary>"
        + children.map(function (kid) { return module(kid, depth + 1); }).join("") + "</details>";
    }
    box.innerHTML = roots.map(function (i) { return module(i, 0); }).join("");
  }

  Array.prototype.forEach.call(document.querySelectorAll(".modules[data-m]"), function (box) {
    var phase = box.parentNode;
    if (phase.open) {
      draw(box);
      return;
    }
    phase.addEventListener("toggle", function first() {
      if (!phase.open) return;
      phase.removeEventListener("toggle", first);
      draw(box);
    });
  });
})();
"""


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _bar(start: float, duration: float, origin: float, span: float) -> str:
    span = span or 1e-9
    left = min(max((start - origin) / span, 0.0), 1.0) * 100
    width = min(max(duration / span, 0.0), 1.0 - left / 100) * 100
    return f'<span class="track"><span class="bar" style="left:{left:.2f}%;width:{width:.2f}%"></span></span>'


#: Seconds per time unit in the page's data: 10 µs, finer than the 0.1 ms a row prints.
UNIT = 1e-5


class _Data:
    """What the page's script draws module trees from: each name once, each distinct tree once, times per phase.

    A tree is flat, two numbers per module in load order: the name's index
    (``~index`` when the module was loaded untracked) and how many places back
    its importer is (0: a root, imported by code outside this phase's loads).
    A phase is ``[tree, duration, start, length, start, length, ...]`` in
    units: each start counted from the previous one (the first from the
    phase's start), so that the numbers stay short.
    """

    def __init__(self, watch: list[str]) -> None:
        self.watch = watch
        self.names: dict[str, int] = {}
        self.trees: dict[tuple[int, ...], int] = {}
        self.phases: list[list[int]] = []

    def add(self, phase: dict) -> int:
        """Store a phase's modules; the index its ``.modules`` box names."""
        modules = phase["modules"]
        first: dict[str, int] = {}
        for position, module in enumerate(modules):
            first.setdefault(module["name"], position)
        tree: list[int] = []
        times = [self._units(phase["duration"])]
        previous = 0
        for position, module in enumerate(modules):
            index = self.names.setdefault(module["name"], len(self.names))
            parent = first.get(module.get("parent")) if module.get("parent") != module["name"] else None
            tree += [~index if module.get("untracked") else index, 0 if parent is None else position - parent]
            start = self._units(module["start"] - phase.get("start", 0.0))
            times += [start - previous, self._units(module["duration"])]
            previous = start
        self.phases.append([self.trees.setdefault(tuple(tree), len(self.trees))] + times)
        return len(self.phases) - 1

    @staticmethod
    def _units(seconds: float) -> int:
        return round(seconds / UNIT)

    def text(self) -> str:
        """The data as the page's JSON script element holds it."""
        watched = [i for name, i in self.names.items() if any(matches(name, pattern) for pattern in self.watch)]
        text = json.dumps({"unit": UNIT, "names": list(self.names), "watched": watched,
                           "trees": [list(tree) for tree in self.trees], "phases": self.phases},
                          separators=(",", ":"))
        return text.replace("<", "\\u003c")  # no "</script>" inside the script element


def _label(name: str) -> str:
    """A module name that wraps after its dots (anywhere, if a part alone is wider than its column)."""
    return escape(name).replace(".", ".<wbr>")


def _open(expand: bool) -> str:
    return " open" if expand else ""


def _phase(phase: dict, total: float, data: _Data, violation: dict | None, expand: bool) -> str:
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
    box = ""
    if phase.get("modules"):
        marked = f' data-bad="{escape(bad)}"' if bad else ""
        box = f'<div class="modules" data-m="{data.add(phase)}"{marked}></div>'
    return (f'<details class="{classes}"{_open(expand or bool(bad))} data-phase="{escape(phase["name"])}">'
            f'<summary class="row">{row}</summary>{chains}{_device_calls(calls, bad)}{box}</details>')


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


def _test(test: dict, data: _Data, expand: bool) -> str:
    phases = test.get("phases", [])
    total = max((p.get("start", 0.0) + p["duration"] for p in phases), default=0.0)
    outcome = test["outcome"]
    head = (f'<span class="outcome {outcome}">{outcome.upper()}</span> {escape(test["nodeid"])} '
            f'<span class="num">({_ms(total)} in the {escape(str(test.get("isolation")))} child)</span>')
    message = ""
    if test.get("message") and outcome in ("failed", "error"):
        message = f'<div class="message">{escape(test["message"])}</div>'
    body = "".join(_phase(p, total, data, test.get("violation"), expand) for p in phases)
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
    data = _Data(watch)
    body = "\n".join(_test(t, data, expand) for t in tests)
    return _PAGE.format(title=escape(title), style=_STYLE, environment=environment, counts=escape(count_text),
                        body=" data-expand" if expand else "", tests=body, data=data.text(), script=_SCRIPT)


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
