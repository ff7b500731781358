"""pytest-npu-lazy: prove what importing, compiling and first calls load, in isolated interpreters.

Importing this package imports nothing heavy (never torch, torch_npu or
triton: the plugin exists to watch those imports). Its public names,
:class:`NpuLazy` (the fixture's type), :func:`run_python` and
:func:`triton_imports` (does ``import triton`` succeed here, asked without
importing it), load on first use. The pytest hooks live in :mod:`.plugins`, one plugin per feature,
registered by :mod:`.plugin`. The parts, lowest layer first
(a module imports only its own layer and those below; test/plugin/test_layout.py
checks it):

- :mod:`.errors`, :mod:`.compat` (every pytest internal used), :mod:`.version`,
  :mod:`.torch_build` and :mod:`.torch_source` (torch's build, and where to get
  the CPU one), :mod:`.site_chain` (what this package's sitecustomize files do last), :mod:`.role` (which
  process of a run this is, decided once), :mod:`.shard` (``--shard K/N``: one of N machines' part of the
  mutation pass or of taking a selection map, by a stable hash): the foundation;
- :mod:`.cann`: the CANN host stub and the emulated NPU, active before torch loads;
- :mod:`.probe`: what a test loaded, when and why; the ``npu_lazy`` fixture;
- :mod:`.settings`: marker, command line, environment and ini, resolved once;
- :mod:`.forks`: the fork-server engine (channel, serve loop, reaping) both front ends run on;
- :mod:`.isolation` (a test in a clean interpreter), :mod:`.python_c`
  (``python -c`` at fork speed) and :mod:`.reports` (terminal, JSON, JUnit,
  budget, HTML, matrix), side by side;
- :mod:`.selection`: change-driven selection, a map of the torch_npu lines each test runs and the tests
  a change can affect (``--npu-lazy-changed``, ``python -m pytest_npu_lazy.selection``);
- :mod:`.plugin` and :mod:`.plugins`: the entry point, and the pytest hooks of each feature;
- :mod:`.mutate`: ``python -m pytest_npu_lazy.mutate``, the mutation pass that
  edits installed code in every process of a pytest run and asks which test notices.
"""

from __future__ import annotations

from .version import __version__
__all__ = ["NpuLazy", "__version__", "run_python", "triton_imports"]


def __getattr__(name: str):
    if name == "NpuLazy":  # the fixture's type, for annotations in tests
        from .probe.fixture import NpuLazy

        return NpuLazy
    if name == "run_python":  # python -c at fork speed; subprocess.run outside a pytest session
        from .python_c.call import run_python

        return run_python
    if name == "triton_imports":  # does `import triton` succeed here? Asked of a fresh interpreter, cached
        from .cann.triton_import import triton_imports

        return triton_imports
    raise AttributeError(name)
