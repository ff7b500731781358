"""Importing a baseline's preload, as a zygote and a spawned child both do it.

What the preload prints belongs in a report, not scattered over the
terminal; loggers it creates must not flood the tests' captured logs
(:mod:`.logs`); a module that fails to import becomes an error text that
every test of that baseline shows.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import tempfile
import traceback
from typing import Iterator

from .. import compat
from ..probe.recorder import RECORDER
from .logs import existing_loggers, quiet_preload_loggers


def import_preload(preload, config, capture: bool) -> tuple[str | None, str]:
    """Import the modules in order, in the recorder's ``preload`` phase: ``(error text or None, output)``.

    ``capture`` takes what the imports write to descriptors 1 and 2 (a
    zygote's output would land between test results); a spawned child's
    output is already its own.
    """
    RECORDER.set_phase("preload")
    loggers = existing_loggers()
    with (_captured_output() if capture else contextlib.nullcontext(None)) as output, \
            compat.warning_filters_of(config):
        error = None
        for module in preload:
            try:
                importlib.import_module(module)
            except BaseException:  # report any failure, even SystemExit from a module
                error = f"importing preload module {module!r} failed:\n{traceback.format_exc()}"
                break
    quiet_preload_loggers(config, loggers)
    return error, (output.read() if output is not None else "")


class _Output:
    def __init__(self) -> None:
        self.file = tempfile.TemporaryFile()

    def read(self) -> str:
        """Everything written, once: the file is closed after (a file left to the garbage collector is a
        ResourceWarning, an error under ``-W error``, in every test forked later)."""
        with self.file:
            self.file.seek(0)
            return self.file.read().decode("utf-8", "replace")


@contextlib.contextmanager
def _captured_output() -> Iterator[_Output]:
    output = _Output()
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    os.dup2(output.file.fileno(), 1)
    os.dup2(output.file.fileno(), 2)
    try:
        yield output
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, original in zip((1, 2), saved):
            os.dup2(original, fd)
            os.close(original)
