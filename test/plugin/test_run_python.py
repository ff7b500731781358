"""run_python beyond output parity: which zygote serves a call, fallbacks, process lifetimes, misuse.

Most tests call run_python in this pytest process, where the plugin is
active; ``os.getppid()`` in the code names the zygote that forked it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from pytest_npu_lazy import run_python
from pytest_npu_lazy.python_c import call as pycall, pool as pypool
from pytest_npu_lazy.errors import NpuLazyWarning, RunPythonError

PARENT = "import os; print(os.getppid())"


def _parent(**kwargs) -> int:
    result = run_python(PARENT, **kwargs)
    assert result.returncode == 0, result.stderr
    return int(result.stdout)


def _gone(pid: int, within: float = 10.0) -> bool:
    """Whether a process (not ours to reap) has ended: no /proc entry, or a zombie."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def modules_dir(tmp_path):
    """A directory for preload modules, and an environment that puts it on PYTHONPATH."""
    folder = tmp_path / "mods"
    folder.mkdir()
    # no empty entry: an empty PYTHONPATH entry means the working directory, which makes the zygote per-directory
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])))
    return folder, env


def test_a_call_is_a_fork_of_a_zygote_not_of_pytest():
    zygote = _parent()
    assert zygote != os.getpid()
    assert zygote in [z.process.pid for z in pypool.active().zygotes]
    assert _parent() == zygote, "the second call must reuse the zygote"


def test_outside_a_pytest_session_it_is_subprocess_run(tmp_path):
    script = textwrap.dedent("""
        import os, sys
        from pytest_npu_lazy import run_python
        from pytest_npu_lazy.python_c import pool as pypool
        result = run_python("import os; print(os.getppid())", env=dict(os.environ))
        print(pypool.active() is None, int(result.stdout) == os.getpid(), result.returncode)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["True", "True", "0"], done.stderr


def test_the_preload_environment_picks_the_zygote(modules_dir):
    folder, env = modules_dir
    (folder / "reads_env.py").write_text("import os\nFLAVOUR = os.environ.get('NPU_LAZY_FLAVOUR')\n")
    code = "import os, reads_env; print(reads_env.FLAVOUR, os.environ.get('NPU_LAZY_UNREAD'), os.getppid())"

    def call(**changes):
        out = run_python(code, env=dict(env, **changes), preload=["reads_env"]).stdout.split()
        return out[0], out[1], int(out[2])

    sweet = call(NPU_LAZY_FLAVOUR="sweet", NPU_LAZY_UNREAD="1")
    sour = call(NPU_LAZY_FLAVOUR="sour", NPU_LAZY_UNREAD="1")
    sweet_again = call(NPU_LAZY_FLAVOUR="sweet", NPU_LAZY_UNREAD="2")
    assert (sweet[0], sour[0]) == ("sweet", "sour")
    assert sweet[2] != sour[2], "a variable the preload read must select another zygote"
    assert sweet_again == ("sweet", "2", sweet[2]), "a variable it never read is only set in the child"


@pytest.mark.needs("torch", "torch_npu")
def test_device_backend_autoload_selects_another_zygote():
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    code = "import os, sys, torch; print('torch_npu' in sys.modules, os.getppid())"
    off = run_python(code, env=env, preload=["torch"]).stdout.splitlines()[-1].split()
    on = run_python(code, env=dict(env, TORCH_DEVICE_BACKEND_AUTOLOAD="1"), preload=["torch"]).stdout.splitlines()[-1].split()
    assert off[0] == "False" and on[0] == "True"
    assert off[1] != on[1]


def test_pythonpath_selects_another_zygote(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "which.py").write_text(f"NAME = {name!r}\n")
    code = "import os, which; print(which.NAME, os.getppid())"
    seen = [run_python(code, env=dict(os.environ, PYTHONPATH=str(tmp_path / name)), preload=["which"]).stdout.split()
            for name in ("a", "b")]
    assert [s[0] for s in seen] == ["a", "b"]
    assert seen[0][1] != seen[1][1]


def test_relative_pythonpath_keys_on_the_working_directory(tmp_path):
    for name in ("one", "two"):
        (tmp_path / name / "lib").mkdir(parents=True)
        (tmp_path / name / "lib" / "where.py").write_text(f"NAME = {name!r}\n")
    env = dict(os.environ, PYTHONPATH="lib")
    code = "import where; print(where.NAME)"
    seen = [run_python(code, env=env, cwd=tmp_path / name, preload=["where"]).stdout.strip() for name in ("one", "two")]
    assert seen == ["one", "two"]


def test_a_preload_that_fails_to_import_falls_back_with_a_warning():
    code = "print('still runs')"
    with pytest.warns(NpuLazyWarning, match=r"(?s)could not import it.*No module named 'npu_lazy_missing'.*plain"):
        result = run_python(code, preload=["npu_lazy_missing"])
    assert (result.returncode, result.stdout) == (0, "still runs\n")


def test_what_the_preload_printed_is_replayed_in_each_call(modules_dir):
    folder, env = modules_dir
    (folder / "chatty.py").write_text("import sys\nprint('chatty: loading')\nprint('chatty: warn', file=sys.stderr)\n")
    code = "import chatty\nprint('code ran')"
    real = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    for _ in range(2):
        fast = run_python(code, env=env, preload=["chatty"])
        assert (fast.stdout, fast.stderr) == (real.stdout, real.stderr) == ("chatty: loading\ncode ran\n",
                                                                            "chatty: warn\n")


def test_a_device_runtime_in_the_preload_refuses_to_fork(modules_dir):
    folder, env = modules_dir
    (folder / "fake_gpu.py").write_text(
        "import sys, types\nsys.modules['torch.cuda'] = types.SimpleNamespace(is_initialized=lambda: True)\n")
    with pytest.warns(NpuLazyWarning, match="cannot fork: CUDA was initialised"):
        result = run_python("print('ran in a real subprocess')", env=env, preload=["fake_gpu"])
    assert result.stdout == "ran in a real subprocess\n"


def test_threads_left_by_the_preload_are_named(modules_dir):
    folder, env = modules_dir
    (folder / "spawns_thread.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(600,), name='uploader', daemon=True).start()\n")
    with pytest.warns(NpuLazyWarning, match=r"1 Python thread\(s\) besides the main one \(uploader\) after its preload"):
        assert run_python("print(1)", env=env, preload=["spawns_thread"]).stdout == "1\n"


def test_a_file_in_cwd_that_shadows_a_preloaded_module_falls_back(modules_dir, tmp_path):
    folder, env = modules_dir
    (folder / "shadowed.py").write_text("WHERE = 'PYTHONPATH'\n")
    here = tmp_path / "here"
    here.mkdir()
    (here / "shadowed.py").write_text("WHERE = 'cwd'\n")
    code = "import shadowed; print(shadowed.WHERE)"
    assert run_python(code, env=env, preload=["shadowed"]).stdout == "PYTHONPATH\n"  # starts the zygote
    with pytest.warns(NpuLazyWarning, match=r"shadowed\.py in .* would shadow modules the zygote preloaded"):
        result = run_python(code, env=env, cwd=here, preload=["shadowed"])
    assert result.stdout == "cwd\n"


def test_timeout_kills_the_whole_process_group(tmp_path):
    code = textwrap.dedent("""
        import subprocess, time
        sleeper = subprocess.Popen(["sleep", "600"])
        print(sleeper.pid, flush=True)
        time.sleep(600)
    """)
    with pytest.raises(subprocess.TimeoutExpired) as caught:
        run_python(code, timeout=5)
    assert _gone(int(caught.value.output))


def test_what_the_code_leaves_running_is_killed_when_it_exits():
    code = "import subprocess; print(subprocess.Popen(['sleep', '600']).pid)"
    started = time.monotonic()
    result = run_python(code, timeout=60)
    assert time.monotonic() - started < 30
    assert _gone(int(result.stdout))


def test_an_interrupted_caller_kills_the_code(tmp_path):
    pid_file = tmp_path / "pid"
    code = f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)"

    class Interrupted(Exception):
        pass

    def interrupt(signum, frame):
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.alarm(3)
        with pytest.raises(Interrupted):
            run_python(code)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert _gone(int(pid_file.read_text()))


def test_a_zygote_killed_under_a_call_is_an_error_and_is_replaced():
    code = "import os, signal, time; os.kill(os.getppid(), signal.SIGKILL); time.sleep(600)"
    with pytest.raises(RunPythonError, match=r"zygote \(pid \d+, preload \[\]\) stopped answering"):
        run_python(code, env=dict(os.environ, NPU_LAZY_KILL_ME="1"), timeout=120)
    assert run_python("print('fresh zygote')").stdout == "fresh zygote\n"


def test_a_zygote_that_died_between_calls_is_replaced():
    env = dict(os.environ, NPU_LAZY_BETWEEN_CALLS="1")
    first = _parent(env=env, preload=["json"])
    os.kill(first, signal.SIGKILL)
    assert _gone(first)
    second = _parent(env=env, preload=["json"])
    assert second != first


def test_concurrent_calls_from_threads():
    results: dict[int, str] = {}

    def work(index: int) -> None:
        for round_ in range(4):
            results[index * 10 + round_] = run_python(f"print({index} * 10 + {round_})").stdout

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert results == {k: f"{k}\n" for k in results} and len(results) == 16


@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"code": b"print(1)"}, TypeError, ["code must be a str", "code.decode()"]),
    ({"code": "print(1)\0"}, ValueError, ["NUL", "Remove it"]),
    ({"preload": "torch"}, TypeError, ["list of module names", "['torch']"]),
    ({"preload": ["torch", 3]}, ValueError, ["3 is not a module name"]),
    ({"preload": ["not a module"]}, ValueError, ["'not a module' is not a module name"]),
    ({"env": {"COUNT": 5}}, TypeError, ["env['COUNT'] is int", "env['COUNT'] = '5'"]),
    ({"env": {"A=B": "x"}}, ValueError, ["'A=B' is not a valid environment variable name"]),
    ({"env": ["A=1"]}, TypeError, ["env must be a mapping"]),
    ({"timeout": "10"}, TypeError, ["timeout must be a number of seconds"]),
    ({"cwd": 3}, TypeError, ["cwd must be a path"]),
    ({"input": b"data"}, TypeError, ["input must be a str", "input.decode()"]),
])
def test_bad_arguments_name_the_problem_and_the_fix(kwargs, error, words):
    kwargs = {"code": "print(1)", **kwargs}
    code = kwargs.pop("code")
    with pytest.raises(error) as caught:
        run_python(code, **kwargs)
    for word in words:
        assert word in str(caught.value)


PLUGIN_USERS = '''
import os, unittest
import pytest
from pytest_npu_lazy import run_python

CODE = "import os, sys; print(os.getppid(), 'pytest' in sys.modules)"

def forked(result):
    parent, has_pytest = result.stdout.split()
    return result.returncode == 0 and int(parent) != os.getpid() and has_pytest == "False"

def test_plain():
    assert forked(run_python(CODE))

@pytest.mark.npu_lazy(preload=[])
def test_marked():
    assert forked(run_python(CODE))

class TestCaseStyle(unittest.TestCase):
    def test_method(self):
        self.assertTrue(forked(run_python(CODE)))

def test_zygotes_are_recorded():
    from pytest_npu_lazy.python_c import pool as pypool
    run_python("pass")
    with open(os.environ["NPU_LAZY_ZYGOTE_PIDS"], "a") as f:
        f.write("".join(f"{z.process.pid}\\n" for z in pypool.active().zygotes))
'''


@pytest.mark.parametrize("workers", ["0", "2"])
@pytest.mark.needs("xdist")
def test_plain_marked_and_unittest_tests_under_xdist(run_pytest, pytester, monkeypatch, workers):
    pids = pytester.path / "zygote-pids"
    monkeypatch.setenv("NPU_LAZY_ZYGOTE_PIDS", str(pids))
    pytester.makepyfile(test_users=PLUGIN_USERS)
    run = run_pytest("-n", workers)
    assert set(run.outcomes.values()) == {"passed"} and len(run.outcomes) == 4, run.text()
    recorded = [int(line) for line in pids.read_text().split()]
    assert recorded and all(_gone(pid) for pid in recorded), "a zygote outlived its session"


def test_pythoninspect_runs_as_a_real_subprocess(monkeypatch):
    calls = []
    real = pycall._subprocess
    monkeypatch.setattr(pycall, "_subprocess", lambda *a: calls.append(a) or real(*a))
    result = run_python("print('then the REPL reads stdin')", env=dict(os.environ, PYTHONINSPECT="1"))
    assert calls and result.returncode == 0 and result.stdout.startswith("then the REPL reads stdin\n")
