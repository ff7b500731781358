"""Measures a Python process that a map-taking test started (see pytest_npu_lazy.selection.tracer).

This folder is first on PYTHONPATH only while a test runs under --npu-lazy-take-map. A
``sitecustomize`` that the environment had before (or a mutation run's) is still imported after.
"""

import os

from pytest_npu_lazy.site_chain import chain_to_the_next_sitecustomize

try:
    from pytest_npu_lazy.selection.tracer import measure_this_process

    measure_this_process()
except Exception:  # a process that cannot measure itself sends nothing home: its test stays opaque
    pass
finally:
    chain_to_the_next_sitecustomize(os.path.dirname(os.path.abspath(__file__)))
