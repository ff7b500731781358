"""The isolation protocol: every message typed once, and an unknown one refused loudly, never dropped."""

from __future__ import annotations

import dataclasses
import os

import pytest

from pytest_npu_lazy.isolation import messages
from pytest_npu_lazy.isolation.protocol import Accepts, Channel, ProtocolError, send

ALL = [cls for cls in vars(messages).values()
       if isinstance(cls, type) and dataclasses.is_dataclass(cls) and hasattr(cls, "KIND")]
ACCEPTING = {name: value for name, value in vars(messages).items() if isinstance(value, Accepts)}


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
    accepted = {kind for accepts in ACCEPTING.values() for kind in accepts.types}
    assert accepted == set(kinds)


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
