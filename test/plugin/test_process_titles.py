"""Zygotes and children say in ps what they are, and a child which test it runs."""

from __future__ import annotations

import json
from importlib.util import find_spec

import pytest

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
    chain, pid = [], os.getpid()
    while "npu-lazy" in read(pid, "comm"):  # up to the pytest process
        chain.append({"comm": read(pid, "comm"), "cmdline": read(pid, "cmdline")})
        pid = parent(pid)
    print(json.dumps({"chain": chain, "environ": read(os.getpid(), "environ")}))
"""


@pytest.mark.parametrize("module_zygotes", ["4", "0"])
def test_zygotes_and_children_have_titles(run_pytest, pytester, module_zygotes):
    pytester.makepyfile(test_titles=TITLES)
    run = run_pytest(f"--npu-lazy-module-zygotes={module_zygotes}")
    assert run.outcomes == {"test_titles.py::test_names": "passed"}, run.text()
    seen = json.loads(dict(map(tuple, run.report("test_names", "call")["sections"]))["Captured stdout call"])
    roles = ["child", "module", "zygote", "root"] if module_zygotes != "0" else ["child", "zygote", "root"]
    assert [process["comm"] for process in seen["chain"]] == [f"npu-lazy {role}" for role in roles], seen
    assert "NPU_LAZY_TEST_REPORTS=" in seen["environ"]  # the title did not take the environment's place
    if find_spec("setproctitle") is None:  # an optional dependency (CI installs it): only the short names
        return
    titles = dict(zip(roles, (process["cmdline"] for process in seen["chain"])))
    assert titles["child"].startswith("pytest-npu-lazy child: test_titles.py::test_names"), seen
    if "module" in titles:
        assert titles["module"].startswith("pytest-npu-lazy module zygote: test_titles.py"), seen
    assert titles["zygote"].startswith("pytest-npu-lazy zygote: preload []"), seen
    assert titles["root"].startswith("pytest-npu-lazy root: forks a zygote per preload baseline"), seen
