"""``npu_lazy(share_process=True)``: after a clean pass, the next such test of its module runs in the same child.

The guarantee: only tests that both ask for it share, only after a pass (a failure, an xfail, a skip, a
crash or a timeout ends the child, and the next test starts in a fresh one), only within one module and
one set of settings; each test still gets its own reports, output, stack dump and Inductor cache key; its
report says which earlier tests its process ran; and no child outlives the run.
"""

from __future__ import annotations

import json
import os
import re

import pytest


CHAIN = """
import os, signal, sys, time, pytest
pytestmark = pytest.mark.npu_lazy(preload=[], share_process=True, timeout=5)
SEEN = []

def record(name):
    SEEN.append(name)
    print(f"{name} ran in {os.getpid()} after {SEEN[:-1]}")
    with open(os.environ["CHAIN_LOG"], "a") as log:
        log.write(f"{name} {os.getpid()} {','.join(SEEN)} {os.environ.get('TORCH_COMPILE_CACHE_KEY_TAG', '')}\\n")

def test_a():
    record("a")

def test_b():
    record("b")

def test_c_fails():
    record("c")
    assert False, "c fails"

def test_d():
    record("d")

@pytest.mark.npu_lazy(share_process=False)
def test_e_alone():
    record("e")

def test_f():
    record("f")

@pytest.mark.xfail(reason="an expected failure", strict=True)
def test_g_xfails():
    record("g")
    assert False

def test_h():
    record("h")

def test_i_crashes():
    record("i")
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGSEGV)

def test_j():
    record("j")

def test_k_hangs():
    record("k")
    time.sleep(60)

def test_l():
    record("l")

@pytest.mark.npu_lazy(preload=["json"])
def test_m_other_preload():
    record("m")

def test_n():
    record("n")
"""

OTHER_MODULE = """
import os, pytest
pytestmark = pytest.mark.npu_lazy(preload=[], share_process=True)

def test_o():
    with open(os.environ["CHAIN_LOG"], "a") as log:
        log.write(f"o {os.getpid()} o {os.environ.get('TORCH_COMPILE_CACHE_KEY_TAG', '')}\\n")
"""


def _log(pytester) -> dict[str, tuple[str, str, str]]:
    """test letter -> (pid, what its process ran so far, its Inductor cache key tag)."""
    runs = {}
    for line in (pytester.path / "chain.log").read_text().splitlines():
        name, pid, seen, *tag = line.split(" ")
        runs[name] = (pid, seen, tag[0] if tag else "")
    return runs


def test_passing_tests_share_a_child_and_anything_else_starts_a_fresh_one(pytester, run_pytest, monkeypatch):
    pytester.makepyfile(test_chain=CHAIN, test_other=OTHER_MODULE)
    monkeypatch.setenv("CHAIN_LOG", str(pytester.path / "chain.log"))
    run = run_pytest("--npu-lazy-json=out.json", "-p", "no:randomly")
    outcomes = {nodeid.split("::")[1]: outcome for nodeid, outcome in run.outcomes.items()}
    assert outcomes == {"test_a": "passed", "test_b": "passed", "test_c_fails": "failed", "test_d": "passed",
                        "test_e_alone": "passed", "test_f": "passed", "test_g_xfails": "xfailed", "test_h": "passed",
                        "test_i_crashes": "failed", "test_j": "passed", "test_k_hangs": "failed", "test_l": "passed",
                        "test_m_other_preload": "passed", "test_n": "passed", "test_o": "passed"}, run.text()
    runs = _log(pytester)
    # a, b and the failing c share one child; d starts again after the failure; e asks for a child of its own,
    # f gets a fresh one after it; g's xfail, i's crash and k's timeout each end theirs; m's settings differ
    assert runs["a"][0] == runs["b"][0] == runs["c"][0], runs
    assert [runs[name][1] for name in "abc"] == ["a", "a,b", "a,b,c"], runs
    for name in "defhjlmno":
        assert runs[name][1] == name, f"test {name} should have started in a fresh child: {runs}"
    assert runs["f"][0] == runs["g"][0] and runs["g"][1] == "f,g"
    assert runs["h"][0] == runs["i"][0] and runs["j"][0] == runs["k"][0] and runs["l"][0] != runs["m"][0]
    assert len({tag for _, _, tag in runs.values()}) == len(runs), f"each test must key its own cache: {runs}"
    text = run.text()
    assert "CRASHED with signal 11 (SIGSEGV)" in text and "TIMEOUT: the isolated test ran longer than 5 s" in text
    report = {test["nodeid"].split("::")[1]: test for test in json.loads((pytester.path / "out.json").read_text())["tests"]}
    assert report["test_b"]["baseline"].endswith("; its process ran 1 earlier test of its module first (share_process)")
    assert report["test_c_fails"]["baseline"].endswith("ran 2 earlier tests of its module first (share_process)")
    assert "share_process" not in report["test_a"]["baseline"] + report["test_d"]["baseline"]


def test_a_shared_childs_crash_report_holds_only_its_own_output(pytester, run_pytest, monkeypatch):
    pytester.makepyfile(test_chain=CHAIN)
    monkeypatch.setenv("CHAIN_LOG", str(pytester.path / "chain.log"))
    run = run_pytest("-p", "no:randomly", "-k", "test_h or test_i_crashes")
    text = run.text()
    assert "i ran in" in text and "h ran in" not in text.split("test_i_crashes")[1].split("short test summary")[0], text
    stacks = text.split("Python stacks of the child when it ended")[1]
    assert "in test_i_crashes" in stacks and "in test_h" not in stacks, text


def test_no_kept_child_outlives_the_run(pytester, run_pytest, monkeypatch):
    pytester.makepyfile(test_chain=CHAIN.replace('time.sleep(60)', 'pass'))
    monkeypatch.setenv("CHAIN_LOG", str(pytester.path / "chain.log"))
    run_pytest("-p", "no:randomly")
    pids = {int(pid) for pid, _, _ in _log(pytester).values()}
    alive = [pid for pid in pids if os.path.exists(f"/proc/{pid}") and
             not open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"]
    assert not alive, f"children of the chain still running after the run: {alive}"


LOSES_THE_DEVICE = """
import os, pytest
pytestmark = [pytest.mark.requires_npu(emulated=True), pytest.mark.npu_lazy(preload=["torch"], share_process=True)]

def test_a_passes_after_a_refused_kernel_lost_the_device():
    import torch, torch_npu
    print("PID a", os.getpid())
    with pytest.raises(RuntimeError, match="emulated NPU"):
        (torch.tensor([1., 2.]).to("npu") * 2).cpu()

def test_b_the_next_test_starts_on_a_working_device():
    import torch, torch_npu
    print("PID b", os.getpid())
    host = torch.tensor([1., 2.])
    assert torch.equal(host.to("npu").cpu(), host)
    torch.npu.synchronize()
"""


@pytest.mark.needs("torch", "torch_npu")
def test_a_child_whose_emulated_npu_is_lost_is_not_kept_though_its_test_passed(run_pytest, pytester,
                                                                                  without_inherited_stub):
    pytester.makepyfile(test_kernels=LOSES_THE_DEVICE)
    run = run_pytest("--npu-lazy-cann=emulate", "-s")
    assert set(run.outcomes.values()) == {"passed"} and len(run.outcomes) == 2, run.text()
    pids = dict(re.findall(r"PID (\w) (\d+)", run.result.stdout.str()))
    assert pids["a"] != pids["b"], f"b ran in the process whose device a lost: {run.text()}"


UNMARKED = """
import os, pytest

@pytest.mark.npu_lazy(preload=[])
def test_a():
    print("PID a", os.getpid())

@pytest.mark.npu_lazy(preload=[])
def test_b():
    print("PID b", os.getpid())

@pytest.mark.npu_lazy(preload=[], share_process=False)
def test_c():
    print("PID c", os.getpid())
"""


@pytest.mark.parametrize("ini", [None, "true"])
def test_the_ini_shares_every_test_whose_marker_does_not_say(pytester, run_pytest, ini):
    pytester.makepyfile(test_unmarked=UNMARKED)
    run = run_pytest("-s", *(["-o", f"npu_lazy_share_process={ini}"] if ini else []))
    assert set(run.outcomes.values()) == {"passed"}, run.text()
    pids = dict(re.findall(r"PID (\w) (\d+)", run.result.stdout.str()))
    assert (pids["a"] == pids["b"]) == (ini == "true"), pids
    assert pids["c"] not in (pids["a"], pids["b"]), pids


def test_a_share_process_that_is_not_a_bool_is_refused(pytester, run_pytest):
    pytester.makepyfile(test_bad="import pytest\n\n@pytest.mark.npu_lazy(share_process='yes')\ndef test_x():\n    pass\n")
    run = run_pytest()
    assert run.outcomes == {"test_bad.py::test_x": "error"}, run.text()
    assert "npu_lazy marker: share_process must be True or False, got 'yes'." in run.text()


def test_a_change_that_selects_a_test_selects_the_tests_its_shared_child_ran_after_it(pytester, run_pytest):
    """The selection map gives the tests of one kept child one process and a rising order, as an in-process run's:
    a change in what only the first test ran selects the tests after it in that process too (they ran on its state)."""
    import subprocess

    pytester.mkpydir("pkg").joinpath("__init__.py").write_text("def f():\n    return 1\n\n\ndef g():\n    return 2\n")
    pytester.makepyfile(test_m=("import pytest, pkg\npytestmark = pytest.mark.npu_lazy(preload=[], share_process=True)\n"
                                "def test_a(): assert pkg.f() == 1\ndef test_b(): assert pkg.g() == 2\n"
                                "def test_c(): pass\n"))
    pytester.makeini("[pytest]\nnpu_lazy_map_packages = pkg\n")
    for command in (["init", "-q"], ["add", "-A"], ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"]):
        subprocess.run(["git", *command], cwd=pytester.path, check=True, capture_output=True)
    taken = run_pytest("-p", "npu_lazy", "--npu-lazy-take-map")
    assert set(taken.outcomes.values()) == {"passed"}, taken.text()
    tests = json.loads((pytester.path / ".npu-lazy-map.json").read_text())["tests"]
    assert len({tests[f"test_m.py::test_{name}"]["process"] for name in "abc"}) == 1, tests
    assert [tests[f"test_m.py::test_{name}"]["order"] for name in "abc"] == sorted(
        tests[f"test_m.py::test_{name}"]["order"] for name in "abc"), tests
    pkg = pytester.path / "pkg" / "__init__.py"
    pkg.write_text(pkg.read_text().replace("return 1", "return 1  # changed"))
    selected = run_pytest("-p", "npu_lazy", "--npu-lazy-changed=HEAD")
    assert sorted(selected.outcomes) == ["test_m.py::test_a", "test_m.py::test_b", "test_m.py::test_c"], selected.text()
    pkg.write_text(pkg.read_text().replace("return 1  # changed", "return 1").replace("return 2", "return 2  # changed"))
    selected = run_pytest("-p", "npu_lazy", "--npu-lazy-changed=HEAD")
    assert sorted(selected.outcomes) == ["test_m.py::test_b", "test_m.py::test_c"], selected.text()
