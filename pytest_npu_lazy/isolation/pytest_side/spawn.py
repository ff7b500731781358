"""Spawn isolation: a fresh ``python -m pytest`` per test, for exact cold-process semantics.

Slow (an interpreter, pytest and the preload per test) but needs no fork
and starts from nothing at all. The child speaks the same protocol as a
forked one over a socket it inherits.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass

import pytest

from ...forks.channel import Channel, send
from ...forks.processes import wait_or_kill_group, wait_status
from ...role import CHILD_FD_ENV
from ...settings import TestSettings
from ..target import Target, prepare_message


@dataclass
class SpawnedChild:
    process: subprocess.Popen
    channel: Channel

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def pgid(self) -> int:
        return self.process.pid  # start_new_session makes it a group leader

    def exit_status(self, timeout: float = 10.0) -> int | None:
        """The wait status, encoded as os.waitpid would give it."""
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        return wait_status(code)

    def lost_parent(self) -> str | None:
        return None  # a spawned child has no zygote to lose

    def close(self) -> None:
        self.channel.close()
        if self.process.poll() is None:
            wait_or_kill_group(self.process, 10, self.pgid)


class SpawnLauncher:
    def __init__(self, config: pytest.Config, extra_env: dict[str, str] | None = None) -> None:
        self.config = config
        self.extra_env = extra_env or {}

    def prepare(self, item: pytest.Item, settings: TestSettings) -> None:
        """Nothing to do ahead of time: a spawned child starts from scratch by design."""

    def plan(self, upcoming: list[tuple[pytest.Item, TestSettings]]) -> None:
        """Nothing starts ahead for spawned children."""

    def release(self, item: pytest.Item, settings: TestSettings) -> None:
        """Nothing is kept for a spawned child."""

    def keep(self, item: pytest.Item, settings: TestSettings, child) -> None:
        """A spawned child runs one test (share_process is a module zygote's children's): it is closed."""
        child.close()

    def child(self, item: pytest.Item, settings: TestSettings) -> SpawnedChild:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(os.environ, **self.extra_env)
        env[CHILD_FD_ENV] = str(theirs.fileno())
        env.update(settings.baseline.environment())
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "pytest", *child_arguments(self.config, item)],
                cwd=self.config.invocation_params.dir, env=env, pass_fds=[theirs.fileno()],
                start_new_session=True)
        finally:
            theirs.close()
        child = SpawnedChild(process, Channel(ours))
        send(child.channel, prepare_message(item, settings))  # read at its session start
        return child


def child_arguments(config: pytest.Config, item: pytest.Item) -> list[str]:
    """The user's own command line, aimed at one test, without distribution or forking."""
    positional = set(config.args)
    args = [a for a in config.invocation_params.args if a not in positional]
    args.append(Target.of(item).argument)
    if config.pluginmanager.hasplugin("xdist"):
        args += ["-n", "0"]
    if getattr(config.option, "cov_source", None) and not getattr(config.option, "cov_append", False):
        args.append("--cov-append")  # pytest-cov in the child must not erase the data other tests saved
    return args
