"""run_python's plugin: while this session lasts, ``run_python`` forks its calls from zygotes kept for the session.

Outside a session (a plain script) each call is a ``subprocess.run``; nested
sessions (pytester in-process) share the outer session's zygotes.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    from ..python_c import pool

    pool.activate(config)
    config.add_cleanup(lambda: pool.deactivate(config))
