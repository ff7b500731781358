"""Captured logs of isolated tests as in-process: loggers a zygote's preload set up do not flood them.

When a test phase starts, pytest attaches its capture handlers to the root
logger and, directly, to every logger that exists then and does not
propagate. In-process, a test that imports torch itself creates torch's
non-propagating ``torch.__trace`` logger (always at DEBUG, meant for
TORCH_TRACE files) after that moment, so none of its records is captured.
In a child forked from a zygote that preloaded torch the logger already
exists, pytest attaches to it, and one compiled call puts a hundred DEBUG
lines into the captured log of a failing test.

So records of non-propagating loggers that the preload created reach
pytest's capture only at or above pytest's log level: ``log_level`` /
``--log-level`` when set, else the root logger's level (WARNING unless a
test or ``caplog.set_level`` lowers it). ``--log-level=DEBUG`` shows them.
"""

from __future__ import annotations

import logging

import pytest


def existing_loggers() -> frozenset[str]:
    """Names of the loggers that exist now: taken before a preload, to tell which ones it created."""
    return frozenset(logging.root.manager.loggerDict)


class PreloadLoggerFilter(logging.Filter):
    """Drops a record below pytest's level when it reached the handler through a preload's non-propagating logger."""

    def __init__(self, preload_loggers: frozenset[str], level: int | None) -> None:
        super().__init__()
        self.preload_loggers = preload_loggers
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= (self.level if self.level is not None else logging.getLogger().getEffectiveLevel()):
            return True
        return _stopping_logger(record.name) not in self.preload_loggers


def _stopping_logger(name: str) -> str | None:
    """The logger at which a record from ``name`` stops propagating (None: it reaches the root)."""
    logger: logging.Logger | None = logging.getLogger(name)
    while logger is not None and logger is not logging.root:
        if not logger.propagate:
            return logger.name
        logger = logger.parent
    return None


def quiet_preload_loggers(config: pytest.Config, before: frozenset[str]) -> None:
    """After a preload: filter pytest's capture handlers (inherited by every child) as described above."""
    created = frozenset(name for name in existing_loggers() - before
                        if isinstance(logging.root.manager.loggerDict[name], logging.Logger))
    plugin = config.pluginmanager.get_plugin("logging-plugin")
    if not created or plugin is None:
        return
    quiet = PreloadLoggerFilter(created, plugin.log_level)
    for handler in (plugin.caplog_handler, plugin.report_handler):
        handler.addFilter(quiet)
