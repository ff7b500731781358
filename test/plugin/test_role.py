"""The process role, decided once in pytest_npu_lazy/role.py: each kind of process is told apart as xdist's own
``is_xdist_worker`` / ``is_xdist_controller`` tell them, and the answer does not change behind a feature's back."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_npu_lazy import role


class FakeConfig:
    """What the role reads of a config: its stash, xdist's options and, in a worker, ``workerinput``."""

    def __init__(self, dist: str = "no", tx: tuple = (), workerinput: dict | None = None) -> None:
        self.stash = pytest.Stash()
        self.option = SimpleNamespace(dist=dist, tx=list(tx))
        if workerinput is not None:
            self.workerinput = workerinput


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    monkeypatch.delenv(role.CHILD_FD_ENV, raising=False)
    monkeypatch.delenv(role.MUTATION_RESULTS_ENV, raising=False)


def test_a_plain_run_is_in_process_and_reports():
    this = role.of(FakeConfig())
    assert this.process is role.Process.IN_PROCESS
    assert this.reports and this.runs_tests and not this.child and this.mutation_results is None


def test_xdist_controller_reports_but_runs_no_test():
    this = role.of(FakeConfig(dist="load", tx=("popen", "popen")))
    assert this.controller and this.reports and not this.runs_tests


def test_dist_without_workers_runs_in_process():
    """``--dist load`` with no ``-n`` or ``--tx``: xdist starts no worker (no dsession), the tests run here."""
    assert role.of(FakeConfig(dist="load")).process is role.Process.IN_PROCESS


def test_xdist_worker_runs_tests_and_does_not_report():
    this = role.of(FakeConfig(dist="no", workerinput={"workerid": "gw0"}))
    assert this.worker and this.runs_tests and not this.reports
    assert role.xdist_worker_input(FakeConfig(workerinput={"k": 1})) == {"k": 1}
    assert role.xdist_worker_input(FakeConfig()) is None


def test_spawned_child_takes_its_descriptor_out_of_the_environment(monkeypatch):
    monkeypatch.setenv(role.CHILD_FD_ENV, "7")
    this = role.of(FakeConfig())
    assert this.process is role.Process.SPAWNED_CHILD and this.child_fd == 7
    assert this.child and not this.reports
    import os

    assert role.CHILD_FD_ENV not in os.environ  # a pytest the test starts is not a spawned child


def test_decided_once_and_a_forked_child_becomes_one(monkeypatch):
    config = FakeConfig()
    assert role.of(config).reports
    monkeypatch.setenv(role.CHILD_FD_ENV, "7")
    assert role.of(config).process is role.Process.IN_PROCESS  # the first answer stands
    role.become_isolated_child(config)
    assert role.of(config).process is role.Process.ISOLATED_CHILD and not role.of(config).reports


def test_a_mutation_run_names_its_results_file(monkeypatch):
    monkeypatch.setenv(role.MUTATION_RESULTS_ENV, "/tmp/results.jsonl")
    assert role.of(FakeConfig(workerinput={})).mutation_results == "/tmp/results.jsonl"
