"""The HTML view: structure of the page from a hand-made report, the pytest option, the CLI, a real browser."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import zlib
from html.parser import HTMLParser

import pytest

from pytest_npu_lazy.reports.html import render
from pytest_npu_lazy.probe.summary import Summary
from pytest_npu_lazy.reports.schema import SCHEMA, SCHEMA_VERSION, result_entry


class Node:
    def __init__(self, tag: str, attrs: dict, parent: "Node | None") -> None:
        self.tag, self.attrs, self.parent, self.children, self.text = tag, attrs, parent, [], ""

    def find_all(self, predicate) -> list["Node"]:
        found = [self] if predicate(self) else []
        for child in self.children:
            found += child.find_all(predicate)
        return found

    def classes(self) -> set[str]:
        return set((self.attrs.get("class") or "").split())

    def all_text(self) -> str:
        return self.text + "".join(child.all_text() for child in self.children)

    def ancestors(self):
        node = self.parent
        while node is not None:
            yield node
            node = node.parent


class TreeBuilder(HTMLParser):
    VOID = {"meta", "br", "wbr", "img", "input", "link", "hr"}

    def __init__(self) -> None:
        super().__init__()
        self.root = self.current = Node("#root", {}, None)

    def handle_starttag(self, tag, attrs):
        node = Node(tag, dict(attrs), self.current)
        self.current.children.append(node)
        if tag not in self.VOID:
            self.current = node

    def handle_endtag(self, tag):
        node = self.current
        while node is not None and node.tag != tag:
            node = node.parent
        assert node is not None, f"</{tag}> closes nothing"
        self.current = node.parent

    def handle_data(self, data):
        self.current.text += data


def parse(page: str) -> Node:
    builder = TreeBuilder()
    builder.feed(page)
    builder.close()
    assert builder.current is builder.root, "unclosed elements"
    return builder.root


def _module(name, parent, start, duration):
    return {"name": name, "parent": parent, "start": start, "duration": duration, "untracked": False}


def _report() -> dict:
    import_phase = {
        "name": "import", "parent": "test", "start": 1.0, "duration": 2.0, "module_count": 4,
        "watched": [{"pattern": "heavy.helpers", "module": "heavy.helpers", "count": 1, "duration": 0.5,
                     "chain": ["heavy.helpers", "heavy.core", "test_x (test_x.py:5 in test_a)"],
                     "trigger": "heavy/core.py:1 in <module>"}],
        "modules": [_module("heavy", None, 1.0, 1.5), _module("heavy.core", "heavy", 1.5, 1.0),
                    _module("heavy.helpers", "heavy.core", 2.0, 0.5), _module("other", None, 2.5, 0.25)],
    }
    summary = Summary.from_dict({"isolation": "fork", "phases": [
        {"name": "collect", "parent": None, "start": 0.0, "duration": 0.5, "module_count": 0, "watched": [], "modules": []},
        {"name": "test", "parent": None, "start": 0.5, "duration": 3.5, "module_count": 0, "watched": [], "modules": []},
        import_phase,
    ]})
    violation = {"kind": "loaded", "module": "heavy.helpers", "phase": "import", "chain": ["heavy.helpers", "heavy.core"]}
    tests = [
        result_entry("test_x.py::test_a", "passed", 4.0, summary=summary, with_modules=True),
        result_entry("test_x.py::test_<b>", "failed", 4.0, summary=summary, with_modules=True,
                     violation=violation, message="AssertionError: npu_lazy: 'heavy.helpers' must not be loaded"),
        result_entry("test_x.py::test_plain", "passed", 0.1),
    ]
    env = {"torch": "2.13.0+cpu", "torch_npu": "2.13.0", "cann_mode": "stub", "cann_version": None,
           "triton_flavour": "absent", "triton": None, "device": "cpu", "python": "3.11", "platform": "linux-x86_64"}
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "environment": env,
            "run": {"watch": ["heavy.helpers"]}, "tests": tests}


def _data(root: Node) -> dict:
    (script,) = root.find_all(lambda n: n.attrs.get("id") == "npu-lazy-data")
    return json.loads(script.text)


def _stored_modules(root: Node, phase: Node) -> list[dict]:
    """A phase's modules as the page stores them for its script (html._Data's format, read independently)."""
    (box,) = [n for n in phase.children if "modules" in n.classes()]
    data = _data(root)
    entry = data["phases"][int(box.attrs["data-m"])]
    tree = data["trees"][entry[0]]
    modules, at = [], 0
    for i in range(len(tree) // 2):
        index, up = tree[2 * i], tree[2 * i + 1]
        at += entry[2 + 2 * i]
        modules.append({"name": data["names"][~index if index < 0 else index], "untracked": index < 0,
                        "parent": modules[i - up]["name"] if up else None,
                        "start": round(at * data["unit"], 6), "duration": round(entry[3 + 2 * i] * data["unit"], 6)})
    return modules


def test_page_structure():
    root = parse(render(_report()))
    tests = root.find_all(lambda n: n.tag == "details" and "test" in n.classes())
    assert [t.attrs["data-nodeid"] for t in tests] == ["test_x.py::test_a", "test_x.py::test_<b>"]  # isolated only
    assert "open" not in tests[0].attrs and "open" in tests[1].attrs  # failures start open
    assert "no triton" in root.find_all(lambda n: "env" in n.classes())[0].text

    phases = tests[0].find_all(lambda n: n.tag == "details" and "phase" in n.classes())
    assert [p.attrs["data-phase"] for p in phases] == ["collect", "test", "import"]
    import_phase = phases[2]
    # the phase's bar: from 1.0 s for 2.0 s of a 4.0 s test
    (bar,) = [n for n in import_phase.children[0].find_all(lambda n: "bar" in n.classes())]
    assert bar.attrs["style"] == "left:25.00%;width:50.00%"
    assert not [n for p in phases[:2] for n in p.children if "modules" in n.classes()]  # phases that loaded nothing
    # the modules, stored for the script in load order with their importer; times from the phase's start
    assert _stored_modules(root, import_phase) == [
        {"name": "heavy", "parent": None, "start": 0.0, "duration": 1.5, "untracked": False},
        {"name": "heavy.core", "parent": "heavy", "start": 0.5, "duration": 1.0, "untracked": False},
        {"name": "heavy.helpers", "parent": "heavy.core", "start": 1.0, "duration": 0.5, "untracked": False},
        {"name": "other", "parent": None, "start": 1.5, "duration": 0.25, "untracked": False}]
    data = _data(root)
    assert [data["names"][i] for i in data["watched"]] == ["heavy.helpers"]
    chains = [n.text for n in import_phase.find_all(lambda n: "chain" in n.classes())]
    assert chains == ["heavy.helpers <- heavy.core <- test_x (test_x.py:5 in test_a) \xa0[at heavy/core.py:1 in <module>]"]

    failed = tests[1]
    (failed_import,) = failed.find_all(lambda n: n.attrs.get("data-phase") == "import")
    assert "violation" in failed_import.classes() and "open" in failed_import.attrs  # the violation's phase shows
    (box,) = [n for n in failed_import.children if "modules" in n.classes()]
    assert box.attrs["data-bad"] == "heavy.helpers"  # the script marks it and opens its importers
    assert "data-bad" not in [n for n in import_phase.children if "modules" in n.classes()][0].attrs
    assert "must not be loaded" in failed.find_all(lambda n: "message" in n.classes())[0].text
    # one tree for both tests' import phases; the names once, whatever the number of tests
    assert len(data["trees"]) == 1 and len(data["phases"]) == 2
    assert data["names"] == ["heavy", "heavy.core", "heavy.helpers", "other"]


def test_device_calls_are_listed_per_phase_with_their_line():
    report = _report()
    phase = report["tests"][1]["phases"][2]
    phase["device_calls"] = [
        {"name": "aclrtGetDeviceCount", "result": 0, "where": "test_x.py:9 in test_b", "count": 2},
        {"name": "aclrtSetDevice", "result": 0, "where": "no Python line (made on native thread 7)", "count": 1}]
    report["tests"][1]["violation"] = {"kind": "device_call", "module": "aclrtSetDevice", "phase": "import",
                                       "chain": ["aclrtSetDevice"]}
    root = parse(render(report))
    (failed,) = root.find_all(lambda n: n.attrs.get("data-nodeid") == "test_x.py::test_<b>")
    calls = failed.find_all(lambda n: "data-call" in n.attrs)
    assert [c.attrs["data-call"] for c in calls] == ["aclrtGetDeviceCount", "aclrtSetDevice"]
    assert "x2" in calls[0].text and "violation" in calls[1].classes() and "violation" not in calls[0].classes()
    assert "3 device calls" in "".join(n.text for n in failed.find_all(lambda n: "badge" in n.classes()))
    (passed,) = root.find_all(lambda n: n.attrs.get("data-nodeid") == "test_x.py::test_a")
    assert not passed.find_all(lambda n: "data-call" in n.attrs)  # a phase without calls lists none


def test_expand_opens_everything():
    root = parse(render(_report(), expand=True))
    details = root.find_all(lambda n: n.tag == "details")
    assert details and all("open" in d.attrs for d in details)
    (body,) = root.find_all(lambda n: n.tag == "body")
    assert "data-expand" in body.attrs  # the script opens every module it draws (a browser test checks it)
    assert "data-expand" not in parse(render(_report())).find_all(lambda n: n.tag == "body")[0].attrs


def _suite(tests: int) -> dict:
    """A big suite's report: every test loads the same 1000 modules at collection and the same 300 in its
    import phase (a tree of packages, each test with its own times), as test/dynamo's tests load torch's."""
    def phase(name: str, first: int, count: int, start: float, shift: float) -> dict:
        names = [f"pkg{k // 100}.sub{k // 10 % 10}.mod{k}" for k in range(first, first + count)]
        modules = [_module(names[k], names[(k - 1) // 4] if k else None, start + k * 1e-3 + shift,
                           (k % 7 + 1) * 1e-4 + shift) for k in range(count)]
        return {"name": name, "parent": None, "start": start, "duration": count * 1e-3 + 0.01, "module_count": count,
                "watched": [], "modules": modules}

    report = _report()
    report["tests"] = [result_entry(f"test_suite.py::test_{i}", "passed", 2.0, with_modules=True, summary=Summary.from_dict({
        "isolation": "fork",
        "phases": [phase("collect", 0, 1000, 0.0, i * 1.3e-5), phase("import", 1000, 300, 1.1, i * 2.9e-5)],
    })) for i in range(tests)]
    return report


def test_shared_module_lists_are_stored_once():
    """Each module name and each tree once, whatever the number of tests: only the times grow with them.

    200 tests that load the same 1300 modules drew 90 MB of rows as HTML; now well under 4 MB, the names
    are written once each, and a test more costs about the digits of its times (a few bytes a module).
    """
    page_100, page_200 = render(_suite(100)), render(_suite(200))
    assert len(page_200) < 4_000_000, len(page_200)
    for name in ("pkg0.sub0.mod0", "pkg5.sub3.mod537", "pkg12.sub9.mod1299"):
        assert page_200.count(f'"{name}"') == 1
    per_module = (len(page_200) - len(page_100)) / (100 * 1300)
    assert per_module < 12, per_module  # bytes a test adds per module it loads
    data = _data(parse(page_200))
    assert len(data["names"]) == 1300 and len(data["trees"]) == 2 and len(data["phases"]) == 400


def test_pytest_option_writes_the_page(pytester, run_pytest, fake_heavy_package):
    pytester.makepyfile(test_page="""
        import pytest

        @pytest.mark.npu_lazy(preload=[])
        def test_imports(npu_lazy):
            with npu_lazy.phase("import"):
                import heavy.core
    """)
    run = run_pytest("--npu-lazy-html=out/page.html")
    assert run.result.ret == 0, run.text()
    root = parse((pytester.path / "out" / "page.html").read_text())
    (test,) = root.find_all(lambda n: n.attrs.get("data-nodeid") == "test_page.py::test_imports")
    (phase,) = test.find_all(lambda n: n.attrs.get("data-phase") == "import")
    modules = {m["name"]: m for m in _stored_modules(root, phase)}
    assert set(modules) == {"heavy", "heavy.core", "heavy.helpers"}
    # `import heavy.core` loads heavy.core first, which loads its package and heavy.helpers
    assert modules["heavy.core"]["parent"] is None
    assert modules["heavy"]["parent"] == modules["heavy.helpers"]["parent"] == "heavy.core"
    assert "npu_lazy: wrote the HTML view: out/page.html" in run.text()


def test_cli_needs_module_data(tmp_path):
    report = _report()
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report))
    done = subprocess.run([sys.executable, "-m", "pytest_npu_lazy.reports.html", str(path), "-o", str(tmp_path / "p.html")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert 'data-nodeid="test_x.py::test_a"' in (tmp_path / "p.html").read_text()
    for test in report["tests"]:
        for phase in test["phases"]:
            del phase["modules"]
    path.write_text(json.dumps(report))
    done = subprocess.run([sys.executable, "-m", "pytest_npu_lazy.reports.html", str(path), "-o", str(tmp_path / "p.html")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "has no per-module data; write it with --npu-lazy-json-modules" in done.stderr


def _chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.fixture
def chromium() -> str:
    """A headless browser; CI installs Debian's chromium (.ci/run), so there a missing one fails the test."""
    found = _chromium_path()
    if found is None:
        why = "needs chromium, which is not installed (apt-get install chromium)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(why)
        pytest.skip(why)
    return found


WINDOW = (1000, 900)


def _browser(chromium: str, tmp_path, *args: str) -> subprocess.CompletedProcess:
    """One headless run; the screenshot and the DOM dump use the same window, scale and flags, so one layout."""
    return subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                           "--no-first-run", "--hide-scrollbars", "--force-device-scale-factor=1",
                           f"--window-size={WINDOW[0]},{WINDOW[1]}", f"--user-data-dir={tmp_path / 'profile'}", *args],
                          capture_output=True, text=True, timeout=120)


def test_a_real_browser_draws_the_module_trees(chromium, tmp_path):
    """The page's script, run by chromium: the trees it draws, with every module open under ``expand``."""
    page = tmp_path / "page.html"
    page.write_text(render(_report(), expand=True))
    dom = _browser(chromium, tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr
    root = parse(dom.stdout)
    tests = root.find_all(lambda n: n.tag == "details" and "test" in n.classes())
    assert len(tests) == 2 and all("open" in d.attrs for d in root.find_all(lambda n: n.tag == "details"))
    (import_phase,) = tests[0].find_all(lambda n: n.attrs.get("data-phase") == "import")
    modules = {n.attrs["data-module"]: n for n in import_phase.find_all(lambda n: "data-module" in n.attrs)}
    assert set(modules) == {"heavy", "heavy.core", "heavy.helpers", "other"}
    parent_module = lambda name: next(a.attrs.get("data-module") for a in modules[name].ancestors()  # noqa: E731
                                      if "data-module" in a.attrs or "phase" in a.classes())
    assert parent_module("heavy.helpers") == "heavy.core"
    assert parent_module("heavy.core") == "heavy"
    assert parent_module("heavy") is None and parent_module("other") is None  # roots of the phase's tree
    assert modules["heavy"].tag == "details" and modules["other"].tag == "div"  # leaves cannot expand
    assert "watched" in modules["heavy.helpers"].classes()
    assert "violation" not in modules["heavy.helpers"].classes()  # test_a broke nothing
    # a module's bar within its phase: heavy.core from 1.5 s for 1.0 s of the phase's 1.0..3.0 s
    (core_bar,) = [n for n in modules["heavy.core"].children[0].find_all(lambda n: "bar" in n.classes())]
    assert core_bar.attrs["style"] == "left:25.00%;width:50.00%"
    (core_time,) = [n for n in modules["heavy.core"].children[0].children if "num" in n.classes() and n.text]
    assert core_time.text == "1.00 s"
    (name,) = [n for n in modules["heavy.core"].children[0].children if "name" in n.classes()]
    assert name.attrs["title"] == "heavy.core" and name.all_text().replace(" ", "") == "heavy.core1"  # one child badge
    (failed_helpers,) = tests[1].find_all(lambda n: n.attrs.get("data-module") == "heavy.helpers")
    assert "violation" in failed_helpers.classes()

    shot = tmp_path / "shot.png"
    done = _browser(chromium, tmp_path, f"--screenshot={shot}", page.as_uri())
    assert done.returncode == 0 and shot.exists(), done.stderr
    width, height, pixels = _png_pixels(shot.read_bytes())
    assert (width, height) == WINDOW
    assert len({pixel for row in pixels for pixel in row}) > 16  # something was drawn, not a blank page


#: Opens test_a and its import phase once the page has loaded, and says what was drawn before and after.
_OPEN_LATER = """<script>
addEventListener("load", function () {
  var test = document.querySelector('details.test[data-nodeid="test_x.py::test_a"]');
  var phase = test.querySelector('details.phase[data-phase="import"]');
  var before = phase.querySelectorAll("[data-module]").length;
  phase.addEventListener("toggle", function () {
    setTimeout(function () {
      document.body.setAttribute("data-drawn", before + " " + phase.querySelectorAll("[data-module]").length);
    });
  });
  test.open = true;
  phase.open = true;
});
</script>"""


def test_a_real_browser_draws_a_phase_when_it_opens(chromium, tmp_path):
    """Closed phases cost no DOM until opened; a failed test's violating phase is drawn at once, path open."""
    page = tmp_path / "page.html"
    page.write_text(render(_report()).replace("</body>", _OPEN_LATER + "</body>"))
    dom = _browser(chromium, tmp_path, "--virtual-time-budget=5000", "--dump-dom", page.as_uri())  # runs the timer
    assert dom.returncode == 0, dom.stderr
    root = parse(dom.stdout)
    (body,) = root.find_all(lambda n: n.tag == "body")
    assert body.attrs.get("data-drawn") == "0 4", body.attrs
    (failed,) = root.find_all(lambda n: n.attrs.get("data-nodeid") == "test_x.py::test_<b>")
    modules = {n.attrs["data-module"]: n for n in failed.find_all(lambda n: "data-module" in n.attrs)}
    assert set(modules) == {"heavy", "heavy.core", "heavy.helpers", "other"}
    assert "open" in modules["heavy"].attrs and "open" in modules["heavy.core"].attrs  # the violation's importers
    assert not failed.find_all(lambda n: n.attrs.get("data-phase") == "collect" and n.find_all(
        lambda m: "data-module" in m.attrs))


#: A violating module deep in its phase's tree, with a name far wider than a name column of 1000 pixels.
LONG = ("torch_npu._inductor.codegen.npu_combined_scheduling_of_a_rather_long_module_path"
        ".kernel_heuristics_for_the_emulated_device_and_its_triton_driver")

#: Measures, once the page has loaded, where the browser drew the violating module's name (its text only,
#: no badge) and writes it into the DOM for --dump-dom to carry out.
_MEASURE = """<script>
addEventListener("load", function () {
  var rows = document.querySelectorAll("details.test.failed .module.violation");
  var out = {rows: rows.length, vw: innerWidth, vh: innerHeight};
  if (rows.length === 1) {
    var name = rows[0].querySelector(":scope > .row > .name, :scope > summary > .name");
    var texts = Array.prototype.filter.call(name.childNodes, function (n) { return n.nodeType === 3 && n.data.trim(); });
    var last = texts[texts.length - 1], range = document.createRange();
    range.setStart(texts[0], 0);
    range.setEnd(last, last.data.replace(/\\s+$/, "").length);
    var box = name.getBoundingClientRect();
    out.text = range.toString();
    out.scroll = name.scrollWidth;
    out.client = name.clientWidth;
    out.box = [box.left, box.top, box.right, box.bottom];
    out.lines = Array.prototype.map.call(range.getClientRects(), function (r) { return [r.left, r.top, r.right, r.bottom]; })
      .filter(function (r) { return r[2] - r[0] > 1; });
  }
  document.body.setAttribute("data-measured", JSON.stringify(out));
});
</script>"""


def _long_violation() -> dict:
    report = _report()
    for test in report["tests"]:
        for phase in test["phases"]:
            for module in phase.get("modules", []):
                if module["name"] == "heavy.helpers":
                    module["name"] = LONG
    report["tests"][1]["violation"] = {"kind": "loaded", "module": LONG, "phase": "import", "chain": [LONG, "heavy.core"]}
    return report


def test_a_real_browser_shows_a_long_violating_module_name_in_full(chromium, tmp_path):
    """The page as it opens (nothing expanded by hand): the violating module's whole name is drawn in its row.

    The browser says where each line of the name lies (none cut by its box, none off the first screen);
    the screenshot, taken in the same window, has the name's red ink at both ends of every line.
    """
    page = tmp_path / "page.html"
    page.write_text(render(_long_violation()).replace("</body>", _MEASURE + "</body>"))
    dom = _browser(chromium, tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr
    (body,) = parse(dom.stdout).find_all(lambda n: n.tag == "body")
    measured = json.loads(body.attrs["data-measured"])
    assert measured["rows"] == 1, measured  # the violating module has a row of its own, drawn on opening
    assert measured["text"] == LONG
    assert measured["scroll"] <= measured["client"], measured  # nothing of the name hidden in an overflow
    left, top, right, bottom = measured["box"]
    assert measured["lines"], measured
    for line in measured["lines"]:  # every line inside the name's box and on the first screen
        assert left - 1 <= line[0] and line[2] <= right + 1 and top - 1 <= line[1] and line[3] <= bottom + 1, measured
        assert 0 <= line[0] and line[2] <= measured["vw"] and 0 <= line[1] and line[3] <= measured["vh"], measured

    shot = tmp_path / "shot.png"
    done = _browser(chromium, tmp_path, f"--screenshot={shot}", page.as_uri())
    assert done.returncode == 0 and shot.exists(), done.stderr
    width, height, pixels = _png_pixels(shot.read_bytes())
    assert (width, height) == WINDOW
    for line in measured["lines"]:
        x0, y0, x1, y1 = (int(line[0]), int(line[1]), int(line[2] + 0.999), int(line[3] + 0.999))
        ink = [x for y in range(max(y0, 0), min(y1, height)) for x in range(max(x0, 0), min(x1, width))
               if _red(pixels[y][x])]
        assert ink, f"no red ink where the line {line} of the name should be"
        # the first and the last glyph of the line are drawn: ink within a glyph's width of both ends
        assert min(ink) <= x0 + 8 and max(ink) >= x1 - 8, (line, min(ink), max(ink))


def _red(pixel: tuple[int, ...]) -> bool:
    """The violation's red text (#cf222e), anti-aliased onto white: red well above green and blue."""
    r, g, b = pixel[:3]
    return r >= 120 and r - g >= 50 and r - b >= 40


def _png_pixels(data: bytes) -> tuple[int, int, list[list[tuple[int, ...]]]]:
    """Width, height and rows of pixels of an 8-bit RGB or RGBA PNG (what chromium writes), undoing each row's filter."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height, depth, colour = struct.unpack(">IIBB", data[16:26])
    assert depth == 8 and colour in (2, 6), (depth, colour)
    channels = 3 if colour == 2 else 4
    raw = zlib.decompress(b"".join(data[i + 8:i + 8 + struct.unpack(">I", data[i:i + 4])[0]]
                                   for i in _chunks(data, b"IDAT")))
    stride = width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = previous[i]
            c = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append([tuple(line[x:x + channels]) for x in range(0, stride, channels)])
        previous = line
    return width, height, rows


def _chunks(data: bytes, kind: bytes):
    offset = 8
    while offset < len(data):
        length = struct.unpack(">I", data[offset:offset + 4])[0]
        if data[offset + 4:offset + 8] == kind:
            yield offset  # where the chunk's length field starts
        offset += 12 + length
