"""Waiting for torch_npu's task queue on the emulated NPU (``pytest_npu_lazy.cann.task_queue``).

The emulation's own state (which thread set the device) is checked call by call in test_cann_emulation.py; here
the wait around it: when it waits, for how long, and torch_npu's switches that start no queue.
"""

from __future__ import annotations

import time

import pytest

from pytest_npu_lazy.cann import task_queue
from pytest_npu_lazy.cann.task_queue import BOUND, NO_STREAM, UNBOUND


class _Emulation:
    """Stands in for ``npu_lazy_emulation_queue_state``: answers each state in turn, the last one forever."""

    def __init__(self, *states: int) -> None:
        self.states, self.asked = list(states), 0

    def __call__(self) -> int:
        self.asked += 1
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]


@pytest.fixture
def emulation(monkeypatch):
    monkeypatch.delenv("TASK_QUEUE_ENABLE", raising=False)
    monkeypatch.delenv("ASCEND_LAUNCH_BLOCKING", raising=False)

    def install(*states: int) -> _Emulation:
        fake = _Emulation(*states)
        monkeypatch.setattr(task_queue, "_state", fake)
        monkeypatch.setattr(task_queue, "_settled", False)
        return fake

    return install


def test_waits_while_the_default_stream_exists_and_its_queue_has_not_set_the_device(emulation):
    fake = emulation(UNBOUND, UNBOUND, UNBOUND, BOUND)
    task_queue.wait_until_bound()
    assert fake.asked == 4
    task_queue.wait_until_bound()
    assert fake.asked == 4  # bound: no later call asks


def test_nothing_to_wait_for_before_the_device_starts_and_the_start_is_still_waited_for(emulation):
    fake = emulation(NO_STREAM, NO_STREAM, UNBOUND, BOUND)
    task_queue.wait_until_bound()
    task_queue.wait_until_bound()
    assert fake.asked == 2  # no stream yet: nothing waited, nothing settled
    task_queue.wait_until_bound()
    assert fake.asked == 4


def test_a_queue_that_never_binds_is_waited_for_once_and_bounded(emulation):
    fake = emulation(UNBOUND)
    started = time.monotonic()
    task_queue.wait_until_bound(seconds=0.05)
    assert 0.05 <= time.monotonic() - started < 5 and fake.asked > 1
    asked = fake.asked
    task_queue.wait_until_bound(seconds=0.05)
    assert fake.asked == asked


@pytest.mark.parametrize("variable, value", [("TASK_QUEUE_ENABLE", "0"), ("TASK_QUEUE_ENABLE", " 00"),
                                             ("ASCEND_LAUNCH_BLOCKING", "1")])
def test_torch_npus_switches_that_start_no_queue_wait_for_nothing(emulation, monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)
    fake = emulation(UNBOUND)
    started = time.monotonic()
    task_queue.wait_until_bound(seconds=30)
    assert time.monotonic() - started < 5 and fake.asked == 1


@pytest.mark.parametrize("environ, off", [
    ({}, False), ({"TASK_QUEUE_ENABLE": "1"}, False), ({"TASK_QUEUE_ENABLE": "2"}, False),
    ({"TASK_QUEUE_ENABLE": "0"}, True), ({"TASK_QUEUE_ENABLE": "+0"}, True), ({"TASK_QUEUE_ENABLE": "0x1"}, True),
    ({"TASK_QUEUE_ENABLE": ""}, True),  # strtol of "" is 0, as torch_npu reads it
    ({"TASK_QUEUE_ENABLE": "\u00b2"}, True),  # a superscript two is no digit to strtol (str.isdigit says it is)
    ({"ASCEND_LAUNCH_BLOCKING": "0"}, False), ({"ASCEND_LAUNCH_BLOCKING": "1", "TASK_QUEUE_ENABLE": "2"}, True)])
def test_queue_off_reads_the_switches_as_torch_npu_does(environ, off):
    assert task_queue.queue_off(environ) is off


def test_without_an_emulated_npu_nothing_waits_and_a_later_one_is_still_found(monkeypatch):
    monkeypatch.setattr(task_queue, "_state", None)
    monkeypatch.setattr(task_queue, "_settled", False)
    task_queue.wait_until_bound()  # this process has no emulation: nothing to read, nothing settled
    assert task_queue._settled is False
