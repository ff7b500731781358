"""A test module with one test of every kind of outcome, and the outcome each must have.

Shared by test_reports and test_modes (a test module imports this, never another test module).
"""

ALL_KINDS = """
import logging, sys, warnings
import pytest

pytestmark = pytest.mark.npu_lazy(preload=[])

def compute():
    return 4

@pytest.fixture(scope="session")
def session_value():
    return {"calls": 0}

@pytest.fixture(scope="module")
def module_value(session_value):
    session_value["calls"] += 1
    return session_value["calls"]

@pytest.fixture
def broken_setup():
    raise RuntimeError("setup went wrong")

@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown went wrong")

def test_pass(module_value):
    assert module_value == 1

def test_fail_rewritten():
    assert 3 == compute()

def test_skip_imperative():
    pytest.skip("not today")

@pytest.mark.skip(reason="marked skip")
def test_skip_marker():
    pass

@pytest.mark.skipif(sys.platform != "nowhere", reason="skipif true")
def test_skipif():
    pass

@pytest.mark.xfail(reason="known bug")
def test_xfail():
    assert False

@pytest.mark.xfail(reason="fixed already")
def test_xpass():
    pass

@pytest.mark.xfail(strict=True, reason="strict")
def test_xpass_strict():
    pass

def test_setup_error(broken_setup):
    pass

def test_teardown_error(broken_teardown):
    pass

def test_output():
    print("to stdout")
    sys.stderr.write("to stderr\\n")
    logging.getLogger("kinds").warning("to the log")
    assert False

def test_warning():
    warnings.warn("careful now", UserWarning)

class TestGroup:
    @pytest.mark.parametrize("n", [1, 2])
    def test_param(self, n):
        assert n in (1, 2)

def test_system_exit():
    raise SystemExit(3)

def test_memory_error():
    raise MemoryError()
"""

EXPECTED = {
    "test_pass": "passed",
    "test_fail_rewritten": "failed",
    "test_skip_imperative": "skipped",
    "test_skip_marker": "skipped",
    "test_skipif": "skipped",
    "test_xfail": "xfailed",
    "test_xpass": "xpassed",
    "test_xpass_strict": "failed",
    "test_setup_error": "error",
    "test_teardown_error": "error",
    "test_output": "failed",
    "test_warning": "passed",
    "TestGroup::test_param[1]": "passed",
    "TestGroup::test_param[2]": "passed",
    "test_system_exit": "failed",
    "test_memory_error": "failed",
}
