"""pytest-npu-lazy's entry point (``pytest -p npu_lazy``): it registers one plugin per feature, and nothing else.

Each feature's options, hooks and session state live in its own module under
``plugins/``; which process of the run this is, ``role`` decides once. Importing
this module, or any plugin it names, must stay cheap and must never import torch,
torch_npu or triton: the plugin exists to watch those imports.

The order is the order of their ``pytest_configure``, reversed: pluggy calls the
plugin registered last first. So the recorder starts and the CANN is active
(``cann``, its ``pytest_load_initial_conftests`` also before the selection map's
tracer starts) before run_python's zygotes, the selection map's plugins, the
reporter and, last, the isolation controller are registered, in that order as
before the split; the header prints the reports' lines before the selection's.
"""

pytest_plugins = [
    "pytest_npu_lazy.role",
    "pytest_npu_lazy.plugins.isolation",
    "pytest_npu_lazy.plugins.reports",
    "pytest_npu_lazy.plugins.selection",
    "pytest_npu_lazy.plugins.python_c",
    "pytest_npu_lazy.plugins.cann",
    "pytest_npu_lazy.plugins.probe",
]
