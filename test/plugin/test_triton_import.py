"""``triton_imports()``: does ``import triton`` succeed here, asked of a fresh interpreter and cached per environment.

``find_spec("triton")`` is the wrong question where triton-ascend is installed and pybind11 missing: it finds the
package, ``import triton`` fails, and torch's Dynamo loads no Triton. The answer must come without importing Triton
in the asking process (a zygote forked from it would carry Triton into every test).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.needs("triton")

NO_PYBIND11 = "raise ModuleNotFoundError(\"No module named 'pybind11'\", name='pybind11')\n"

#: asks in a process of its own, and says whether it started an interpreter to answer (``asked``) or read the cache
ASK = """
import json, subprocess, sys
started = []
run = subprocess.run
subprocess.run = lambda *args, **kwargs: started.append(args) or run(*args, **kwargs)
from pytest_npu_lazy import triton_imports
from pytest_npu_lazy.cann.triton_import import triton_import
answer = triton_import()
print(json.dumps({"imports": triton_imports(), "error": answer.error, "missing": answer.missing,
                  "loaded": sorted(m for m in sys.modules if m.split(".")[0] in ("triton", "torch", "pybind11")),
                  "asked": len(started)}))
"""


def _ask(env: dict, asked: int | None = None) -> dict:
    """The answer of a new process; ``asked``: how many interpreters it must have started for it (0: cached)."""
    done = subprocess.run([sys.executable, "-c", ASK], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    if asked is not None:
        assert answer["asked"] == asked, answer
    del answer["asked"]
    return answer


@pytest.fixture
def env(tmp_path):
    return dict(os.environ, PYTEST_NPU_LAZY_CACHE=str(tmp_path / "cache"))


def test_triton_imports_here_and_is_never_imported_by_the_asker(env):
    first = _ask(env, asked=1)
    assert first == {"imports": True, "error": None, "missing": None, "loaded": []}, first
    assert _ask(env, asked=0) == first, "the cached answer serves a new process"


def test_a_triton_that_is_found_but_does_not_import_says_so_and_why(env, tmp_path):
    """triton-ascend installed, pybind11 shadowed by a package that raises: find_spec finds Triton, the helper says
    it does not import, naming the error; the environment without the shadow keeps its own answer."""
    shadow = tmp_path / "no_pybind11"
    (shadow / "pybind11").mkdir(parents=True)
    (shadow / "pybind11" / "__init__.py").write_text(NO_PYBIND11)
    broken = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(shadow), env.get("PYTHONPATH")]))}
    found = subprocess.run([sys.executable, "-c", "import importlib.util; print(importlib.util.find_spec('triton') "
                            "is not None)"], capture_output=True, text=True, env=broken, check=True)
    assert found.stdout.strip() == "True", "the state this helper exists for: find_spec finds Triton"
    answer = _ask(broken, asked=1)
    assert answer == {"imports": False, "error": "ModuleNotFoundError: No module named 'pybind11'",
                      "missing": "pybind11", "loaded": []}, answer
    assert _ask(env, asked=1)["imports"] is True  # the shadow gone: asked again, and both answers kept
    assert _ask(broken, asked=0)["imports"] is False
    assert _ask(env, asked=0)["imports"] is True


def test_a_changed_file_behind_the_answer_asks_again(env, tmp_path):
    """The record holds each top-level module the import touched with its file and modification time: a package
    installed, removed or replaced there is noticed."""
    shadow = tmp_path / "no_pybind11"
    (shadow / "pybind11").mkdir(parents=True)
    init = shadow / "pybind11" / "__init__.py"
    init.write_text(NO_PYBIND11)
    broken = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(shadow), env.get("PYTHONPATH")]))}
    assert _ask(broken, asked=1)["imports"] is False
    init.unlink()  # the shadowing package gone from PYTHONPATH: pybind11 resolves to the installed one again
    (shadow / "pybind11").rmdir()
    assert _ask(broken, asked=1)["imports"] is True
    assert _ask(broken, asked=0)["imports"] is True
    (shadow / "pybind11").mkdir()
    init.write_text(NO_PYBIND11)
    stamp = os.stat(init).st_mtime_ns + 10**9
    os.utime(init, ns=(stamp, stamp))  # a file written anew, whatever the file system's clock granularity
    assert _ask(broken, asked=1)["imports"] is False


def test_no_triton_is_answered_without_an_interpreter(env, tmp_path):
    """Where no triton is found at all, nothing is started."""
    code = ("import importlib.util, subprocess\n"
            "from pytest_npu_lazy.cann import triton_import as helper\n"
            "subprocess.run = None\n"
            "found = importlib.util.find_spec\n"
            "importlib.util.find_spec = lambda name, *a: None if name == 'triton' else found(name, *a)\n"
            "helper._path_spec = lambda name: None\n"
            "print(helper.triton_import())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "imports=False, error='Triton is not installed'" in done.stdout
