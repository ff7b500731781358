"""The compile_trigger benchmark rewrites only its helper's call, and times both variants side by side.

torch_npu's own file is not in this repository; these tests use a small file
written the same way (a unittest class whose helper runs ``python -c``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from packaging.version import Version

from benchmarks.compile_trigger import RewriteError, rewrite

REPO = Path(__file__).resolve().parents[2]

#: the helper's call, as torch_npu's helper writes it, and what the benchmark turns it into
CALL = """result = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            capture_output=True,
            env=env,
            text=True,
            timeout=timeout,
        )"""
REWRITTEN = "result = run_python(textwrap.dedent(code), env=env, timeout=timeout, preload=['torch'])"

HELPER_FILE = textwrap.dedent('''
    import os
    import subprocess
    import sys
    import textwrap
    import unittest


    class Checks(unittest.TestCase):
        def run_in_subprocess(self, code, timeout=60):
            env = os.environ.copy()
            env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
            {call}
            self.assertEqual(result.returncode, 0, result.stderr)

        def test_passes(self):
            self.run_in_subprocess("import sys\\nassert 'torch._dynamo' not in sys.modules")

        def test_fails(self):
            self.run_in_subprocess("raise SystemExit(3)")

        def test_matrix(self):
            for value in (0, 1):
                with self.subTest(value=value):
                    self.run_in_subprocess(f"assert {{value}} == 0")
''').format(call=CALL)


def test_rewrite_changes_only_the_helpers_call():
    expected = HELPER_FILE.replace(CALL, REWRITTEN).replace(
        "import unittest\n", "import unittest\nfrom pytest_npu_lazy import run_python\n", 1)
    assert CALL in HELPER_FILE and expected != HELPER_FILE
    assert rewrite(HELPER_FILE) == expected


@pytest.mark.parametrize(("source", "words"), [
    ("import unittest\n", "no function run_in_subprocess()"),
    (HELPER_FILE.replace("text=True,", "text=True, shell=False,"), "passes ['shell']"),
    (HELPER_FILE.replace("text=True,", ""), "lacks text=True"),
    (HELPER_FILE.replace('[sys.executable, "-c", textwrap.dedent(code)]', '["python", code]'),
     "does not run [sys.executable, '-c', CODE]"),
])
def test_rewrite_refuses_what_it_cannot_translate(source, words):
    with pytest.raises(RewriteError, match=words.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        rewrite(source)


def test_quick_run_compares_per_test_outcomes(tmp_path):
    source = tmp_path / "test_compile_trigger.py"
    source.write_text(HELPER_FILE)
    results = tmp_path / "results.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST"))}
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--only", "compile_trigger",
                           "--compile-trigger", str(source), "--json", str(results)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(results.read_text())["compile_trigger"]
    assert data["same_outcomes"] is True
    for variant in ("unchanged", "run_python"):
        entry = data["variants"][variant]
        if Version(pytest.__version__) >= Version("9"):  # pytest 9 reports unittest's subTests one by one
            assert entry["outcomes"] == {"failed": 2, "passed": 3}, entry
            assert ["call", "value=1", "failed"] in entry["per_test"]["Checks::test_matrix"], entry["per_test"]
        else:  # pytest 8 reports the test that holds them
            assert entry["outcomes"] == {"failed": 2, "passed": 1}, entry
        assert set(entry["spans_s"]) == {"Checks::test_passes", "Checks::test_fails", "Checks::test_matrix"}
    assert "| `Checks::test_fails` | failed | failed |" in done.stdout
    assert data["calls"] == 4  # one per plain test, one per subtest
    assert data["cold_import_s"] > data["fork_s"] > 0
