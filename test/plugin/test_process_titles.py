"""Zygotes and children say in ps what they are, and a child which test it runs."""

from __future__ import annotations

import json
from importlib.util import find_spec

TITLES = """
import json, os
import pytest

def read(pid, name):
    with open(f"/proc/{pid}/{name}", "rb") as f:
        return f.read().replace(b"\\0", b" ").decode().strip()

def parent(pid):
    return int(read(pid, "stat").rsplit(")", 1)[1].split()[1])

@pytest.mark.npu_lazy(preload=[])
def test_names():
    zygote = os.getppid()
    root = parent(zygote)
    print(json.dumps({role: {"comm": read(pid, "comm"), "cmdline": read(pid, "cmdline")}
                      for role, pid in (("child", os.getpid()), ("zygote", zygote), ("root", root))}
                     | {"environ": read(os.getpid(), "environ")}))
"""


def test_zygotes_and_children_have_titles(run_pytest, pytester):
    pytester.makepyfile(test_titles=TITLES)
    run = run_pytest()
    assert run.outcomes == {"test_titles.py::test_names": "passed"}, run.text()
    seen = json.loads(dict(map(tuple, run.report("test_names", "call")["sections"]))["Captured stdout call"])
    assert [seen[role]["comm"] for role in ("child", "zygote", "root")] == \
        ["npu-lazy child", "npu-lazy zygote", "npu-lazy root"], seen
    assert "NPU_LAZY_TEST_REPORTS=" in seen["environ"]  # the title did not take the environment's place
    if find_spec("setproctitle") is None:  # an optional dependency (CI installs it): only the short names
        return
    assert seen["child"]["cmdline"].startswith("pytest-npu-lazy child: test_titles.py::test_names"), seen
    assert seen["zygote"]["cmdline"].startswith("pytest-npu-lazy zygote: preload []"), seen
    assert seen["root"]["cmdline"].startswith("pytest-npu-lazy root: forks a zygote per preload baseline"), seen
