"""The fork engine's channel: every message typed once, and an unknown one refused loudly, never dropped."""

from __future__ import annotations

import dataclasses
import os

import pytest

from pytest_npu_lazy.isolation import messages
from pytest_npu_lazy.forks.channel import Accepts, Channel, ProtocolError, send

ALL = [cls for cls in vars(messages).values()
       if isinstance(cls, type) and dataclasses.is_dataclass(cls) and hasattr(cls, "KIND")]
#: the readers that wait for a fixed order instead of dispatching
FIXED_ORDER = {name: value for name, value in vars(messages).items() if isinstance(value, Accepts)}


def _endpoints():
    """Every endpoint that dispatches isolation's messages by kind, with what it must accept (messages.py's
    docstring, by direction)."""
    from pytest_npu_lazy.isolation.pytest_side.controller import ChildRun
    from pytest_npu_lazy.isolation.pytest_side.handles import ZygoteHandle
    from pytest_npu_lazy.isolation.zygote_side.server import IsolationZygoteServer, ModuleZygoteServer, RootServer

    return {RootServer: {"start_zygote", "shutdown"},
            IsolationZygoteServer: {"fork_child", "start_module_zygote", "shutdown"},
            ModuleZygoteServer: {"fork_child", "shutdown"},
            ZygoteHandle: {"ready", "child_exited", "zygote_started", "child_forked", "fork_refused"},
            ChildRun: {"files", "phase", "report", "warning", "terminal", "junit", "not_run", "internal_error",
                       "interrupted", "finished"}}


def _example(cls):
    values = {"str": "x", "int": 3, "float": 0.5, "dict": {"a": [1]}, "list": ["a"], "bool": True}
    kwargs = {}
    for field in dataclasses.fields(cls):
        kind = str(field.type).replace("Optional[", "").rstrip("]")
        kwargs[field.name] = values.get(kind, None)
    return cls(**kwargs)


@pytest.fixture
def pair():
    ours, theirs = Channel.pair()
    yield ours, theirs
    ours.close()
    theirs.close()


@pytest.mark.parametrize("cls", ALL, ids=lambda cls: cls.KIND)
def test_every_message_round_trips(pair, cls):
    ours, theirs = pair
    message = _example(cls)
    send(ours, message)
    received, fds = Accepts(cls).receive(theirs, timeout=5)
    assert received == message and fds == []


def test_kinds_are_unique_and_every_kind_is_accepted_somewhere():
    kinds = [cls.KIND for cls in ALL]
    assert len(kinds) == len(set(kinds))
    assert set(messages.ALL) == set(ALL), "messages.ALL is every message of the module"
    accepted = {kind for accepts in FIXED_ORDER.values() for kind in accepts.types}
    accepted |= {kind for endpoint in _endpoints() for kind in Accepts.handled_by(endpoint, *_direction(endpoint)).types}
    assert accepted == set(kinds)


def _direction(endpoint) -> tuple:
    """The messages that may travel to an endpoint: one list per direction (messages.py)."""
    from pytest_npu_lazy.isolation.pytest_side.controller import ChildRun
    from pytest_npu_lazy.isolation.pytest_side.handles import ZygoteHandle
    from pytest_npu_lazy.isolation.zygote_side.server import RootServer

    return (messages.TO_ROOT if endpoint is RootServer else messages.FROM_ZYGOTE if endpoint is ZygoteHandle
            else messages.FROM_CHILD if endpoint is ChildRun else messages.TO_ZYGOTE)


@pytest.mark.parametrize("endpoint", list(_endpoints()), ids=lambda cls: cls.__name__)
def test_each_endpoint_accepts_exactly_the_kinds_it_has_handlers_for(endpoint):
    assert set(Accepts.handled_by(endpoint, *_direction(endpoint)).types) == _endpoints()[endpoint]
    assert endpoint.MESSAGES == _direction(endpoint) if hasattr(endpoint, "MESSAGES") else True


def test_a_handler_for_a_message_of_the_other_direction_is_refused():
    """A zygote server with a handler for TestZygoteReady, which only ever travels from a zygote to the pytest process:
    checked against all messages it would pass; against its direction's list it is refused when set up."""
    from pytest_npu_lazy.isolation.zygote_side.server import IsolationZygoteServer

    class Confused(IsolationZygoteServer):
        def on_ready(self, message, fds): ...

    Accepts.handled_by(Confused, *messages.ALL)  # what one list for both directions let through
    with pytest.raises(TypeError, match=r"Confused has handlers for no message it may receive: \['on_ready'\]"):
        Accepts.handled_by(Confused, *Confused.MESSAGES)


def test_run_pythons_zygote_accepts_run_and_shutdown_and_nothing_else():
    from pytest_npu_lazy.python_c import messages as python_c_messages
    from pytest_npu_lazy.python_c.zygote import PythonCZygoteServer

    assert set(Accepts.handled_by(PythonCZygoteServer, *python_c_messages.TO_ZYGOTE).types) == {"run", "shutdown"}
    assert PythonCZygoteServer.MESSAGES == python_c_messages.TO_ZYGOTE


def test_a_handler_for_no_known_message_is_refused_by_name():
    """A renamed message, or a typo, leaves a handler that nothing would call: deriving the set says so."""
    class Endpoint:
        def on_ready(self, message, fds): ...

        def on_raedy(self, message, fds): ...

    with pytest.raises(TypeError, match=r"Endpoint has handlers for no message it may receive: \['on_raedy'\]"):
        Accepts.handled_by(Endpoint, *messages.ALL)


def test_a_message_without_a_handler_is_refused_as_unexpected(pair):
    """A module zygote has no on_start_module_zygote: the message is a ProtocolError, never dropped."""
    from pytest_npu_lazy.isolation.zygote_side.server import ModuleZygoteServer

    ours, theirs = pair
    send(ours, messages.StartModuleZygote("key", {}, {}))
    with pytest.raises(ProtocolError, match="unexpected message 'start_module_zygote'; this end accepts"):
        Accepts.handled_by(ModuleZygoteServer, *messages.TO_ZYGOTE).receive(theirs, timeout=5)


def test_the_docstring_names_every_message():
    named = {cls.__name__ for cls in ALL}
    missing = sorted(name for name in named if f":class:`{name}`" not in messages.__doc__)
    assert missing == []


def test_an_unknown_kind_is_refused_and_its_descriptors_closed(pair):
    ours, theirs = pair
    read_end, write_end = os.pipe()
    try:
        ours.send("bogus", fds=[write_end], anything=1)
        with pytest.raises(ProtocolError, match="unexpected message 'bogus'; this end accepts prepare, run"):
            messages.CHILD_ACCEPTS.receive(theirs, timeout=5)
    finally:
        os.close(write_end)
    assert os.read(read_end, 1) == b""  # every write end is closed: the received copy was not leaked
    os.close(read_end)


def test_a_payload_that_does_not_fit_is_refused(pair):
    ours, theirs = pair
    ours.send("run", nodeid="t.py::t", extra=True)
    with pytest.raises(ProtocolError, match="message 'run' with payload keys"):
        messages.CHILD_ACCEPTS.receive(theirs, timeout=5)


def test_settings_survive_the_trip(pair):
    from pytest_npu_lazy.settings import Baseline, TestSettings

    settings = TestSettings(True, "spawn", Baseline(("torch",), False), 12.0, ("triton",),
                            ("torch_npu.utils._dynamo:_lazy_dynamo_setup",), "marker", ("torch._dynamo",))
    assert TestSettings.from_dict(settings.to_dict()) == settings


def test_a_child_that_sends_an_unknown_message_fails_its_test_naming_it(run_pytest, pytester):
    """The controller used to drop unknown kinds: now the test ends in an error that names the message."""
    pytester.makepyfile(test_bogus="""
        import pytest

        @pytest.mark.npu_lazy(preload=[])
        def test_sends_nonsense(request):
            relay = request.config.pluginmanager.get_plugin("npu_lazy_child_relay")
            relay.channel.send("bogus", what="no such message")
            import time
            time.sleep(30)  # the pytest process must not wait for this

        @pytest.mark.npu_lazy(preload=[])
        def test_after():
            pass
    """)
    run = run_pytest("-p", "no:randomly")
    assert run.outcomes == {"test_bogus.py::test_sends_nonsense": "error",
                            "test_bogus.py::test_after": "passed"}, run.text()
    text = run.report("test_sends_nonsense", "call")["longrepr"]
    assert "unexpected message 'bogus'" in text, text
    assert run.result.duration < 25, "the child was waited for instead of being killed"


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b'{"no_kind": 1}'], ids=["not-json", "not-an-object",
                                                                                      "no-kind"])
def test_a_malformed_message_is_a_protocol_error_and_its_descriptors_are_closed(pair, body):
    import socket
    import struct

    ours, theirs = pair
    read_end, write_end = os.pipe()
    try:
        frame = struct.pack("!II", len(body), 1) + body
        socket.send_fds(ours.sock, [frame], [write_end])
        with pytest.raises(ProtocolError, match="a malformed message"):
            messages.CHILD_ACCEPTS.receive(theirs, timeout=5)
    finally:
        os.close(write_end)
    assert os.read(read_end, 1) == b""  # the received copy of the descriptor was closed
    os.close(read_end)


#: a fork server whose one side channel, when read, raises the error named by the format field
FAILING_SERVER = '''
import os
from pytest_npu_lazy.forks.channel import Channel
from pytest_npu_lazy.forks.server import ForkServer
from pytest_npu_lazy.isolation.messages import Shutdown

class Failing(ForkServer):
    NAME = "test server"
    MESSAGES = (Shutdown,)

    def side_channels(self):
        return {{self.probe: "probe"}}

    def side_readable(self, key):
        raise {error}

ours, theirs = Channel.pair()
server = Failing(theirs)
read_end, write_end = os.pipe()
os.write(write_end, b"x")
server.probe = read_end
server.serve()
'''


def _serve_until(error: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", FAILING_SERVER.format(error=error)], capture_output=True,
                          text=True, timeout=60)


def test_a_fork_server_that_fails_exits_non_zero_saying_what_happened():
    """A failed fork (EAGAIN, ENOMEM) used to end the server with exit status 0, as a normal shutdown does."""
    from pytest_npu_lazy.forks.server import EXIT_OS_ERROR

    done = _serve_until('BlockingIOError(11, "Resource temporarily unavailable (fork)")')
    assert done.returncode == EXIT_OS_ERROR, (done.returncode, done.stderr)
    assert "a test server failed: BlockingIOError" in done.stderr


def test_a_fork_server_whose_caller_is_gone_ends_quietly_with_status_0():
    """A broken pipe to the caller (it closed its end while the server reported a child's exit) is the caller
    gone: the normal end of a fork server, with nothing on stderr (a terminal-parity run caught the noise)."""
    done = _serve_until('BrokenPipeError(32, "Broken pipe")')
    assert (done.returncode, done.stderr) == (0, "")