"""pytest-npu-lazy: prove what importing, compiling and first calls load, in isolated interpreters.

The plugin lives in :mod:`pytest_npu_lazy.plugin`; importing this package
imports nothing heavy.
"""

from __future__ import annotations

from .version import __version__
__all__ = ["NpuLazy", "__version__", "run_python"]


def __getattr__(name: str):
    if name == "NpuLazy":  # the fixture's type, for annotations in tests
        from .probe.fixture import NpuLazy

        return NpuLazy
    if name == "run_python":  # python -c at fork speed; subprocess.run outside a pytest session
        from .python_c.call import run_python

        return run_python
    raise AttributeError(name)
