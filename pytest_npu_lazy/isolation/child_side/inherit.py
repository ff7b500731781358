"""What a test child inherits from the pytest process, made to look as it does to an in-process test.

A forked child is a copy of the pytest process at session start, passed
through a zygote that runs as a server: it holds the pytest process's
capture files, the servers' signal handlers, a temporary-path factory that
has not chosen its directory yet, and a coverage collector that saves at
interpreter exit (which ``os._exit`` skips). Left alone, each of these makes
an isolated test behave differently from the same test in-process, so each
is adjusted here, once, where the child starts or ends.

The pytest internals this needs (the capture manager's global capture, the
temporary-path factory's base directory) are reached through
``pytest_npu_lazy.compat``; coverage.py's private ``_data_suffix_specified``
is used here and nowhere else.
"""

from __future__ import annotations

import os
import signal
import sys
import warnings
from typing import TYPE_CHECKING

import pytest

from ... import compat
from ...forks.processes import die_with_parent, kill_group

if TYPE_CHECKING:
    from types import FrameType
    from typing import Any, Callable, Union

    _Handler = Union[Callable[[int, "FrameType | None"], Any], int, signal.Handlers]  # signal.getsignal's, less None

#: Signals the zygote servers handle themselves; a child gets the pytest process's handlers back.
_SERVER_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: Sent by Linux to a child when its zygote (or, for a spawned child, pytest) dies. A signal no
#: test expects to own: its handler ends the child's whole process group, so nothing it started
#: outlives it.
PARENT_DEATH_SIGNAL = getattr(signal, "SIGRTMAX", signal.SIGTERM)

_pytest_handlers: dict[int, _Handler] = {}


def remember_pytest_process() -> None:
    """In the pytest process, just before the root zygote forks: what its tests would see."""
    _pytest_handlers.clear()
    for sig in _SERVER_SIGNALS:
        handler = signal.getsignal(sig)
        if handler is not None:  # None: installed outside Python, cannot be put back from here
            _pytest_handlers[sig] = handler


def _end_group(signum, frame) -> None:  # pragma: no cover - runs when the zygote dies
    kill_group(os.getpid(), signal.SIGKILL)
    os._exit(128 + signum)


def reset_signals() -> None:
    """Give the child the SIGINT and SIGTERM handlers an in-process test has.

    A forked child gets those the pytest process had at session start (the
    zygotes replaced them with their own); a spawned child keeps a fresh
    interpreter's. Only the parent-death signal is the plugin's.
    """
    for sig, handler in _pytest_handlers.items():
        signal.signal(sig, handler)
    signal.signal(PARENT_DEATH_SIGNAL, _end_group)
    die_with_parent(PARENT_DEATH_SIGNAL)


def private_capture(config: pytest.Config) -> list[int]:
    """Give the child its own capture files, closing its copies of the inherited ones.

    The inherited capture writes into the pytest process's files; it is
    stopped (which closes only this process's descriptors and restores the
    terminal's) before the new one starts, so no file is left for the garbage
    collector to warn about under ``-W error``. The new files' descriptors go
    to the pytest process, which can read what a test printed even when the
    child dies before reporting it.
    """
    return compat.restart_global_capture(config)


def session_basetemp(config: pytest.Config) -> str | None:
    """In the pytest process: the session's base temporary directory, created on first use as in-process.

    Isolated tests share it, so ``tmp_path`` numbering, ``--basetemp`` and
    the retention policy work as they do for in-process tests.
    """
    return compat.session_basetemp(config)


def adopt_basetemp(config: pytest.Config, basetemp: str | None) -> None:
    """In the child: use the session's base temporary directory instead of choosing (and clearing) one."""
    compat.adopt_basetemp(config, basetemp)


def save_coverage() -> str | None:
    """Before the child leaves through ``os._exit``: save what coverage.py measured in it.

    The measuring ``Coverage`` object (pytest-cov's, or one started by
    ``coverage run``) was inherited with the fork. When its data file name
    carries a per-process suffix (``data_suffix=True``, as pytest-cov uses,
    or ``parallel = true``), coverage.py notices the fork and saves into a
    new file of this process, which pytest-cov (or ``coverage combine``)
    combines with the others. Otherwise saving would erase the pytest
    process's own file, so nothing is saved and the reason is returned.
    """
    coverage = sys.modules.get("coverage")
    current = getattr(getattr(coverage, "Coverage", None), "current", None)
    cov = current() if current is not None else None
    if cov is None or getattr(cov, "npu_lazy_in_memory", False):  # a selection map's: its data travels by report
        return None
    # coverage.py keeps the constructor's data_suffix only privately; its meaning is documented.
    suffix = getattr(cov, "_data_suffix_specified", None)
    if not (suffix is True or (not suffix and cov.config.parallel)):
        return ("coverage measured in isolated tests is not saved: the coverage data file has no "
                "per-process suffix. Use pytest-cov (--cov), or set `parallel = true` in the [run] "
                "section of the coverage configuration and run `coverage combine` afterwards.")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no data collected" and the like belong to the pytest process
        try:
            cov.stop()
            cov.save()
        except Exception as exc:  # a broken data directory must not turn into a crashed test
            return f"coverage data of an isolated test could not be saved: {type(exc).__name__}: {exc}"
    return None
