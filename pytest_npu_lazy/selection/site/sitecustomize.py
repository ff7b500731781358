"""Measures a Python process that a map-taking test started (see pytest_npu_lazy.selection.tracer).

This folder is first on PYTHONPATH only while a test runs under --npu-lazy-take-map. A
``sitecustomize`` that the environment had before (or a mutation run's) is still imported after.
"""

import os
import sys


def _chain_to_the_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    this = sys.modules.pop("sitecustomize", None)
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        import sitecustomize  # noqa: F401 - the environment's own, if any
    except ImportError:
        pass
    finally:
        sys.path[:] = saved
        if this is not None:
            sys.modules.setdefault("sitecustomize", this)


try:
    from pytest_npu_lazy.selection.tracer import measure_this_process

    measure_this_process()
except Exception:  # a process that cannot measure itself sends nothing home: its test stays opaque
    pass
finally:
    _chain_to_the_next_sitecustomize()
