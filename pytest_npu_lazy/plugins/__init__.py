"""One pytest plugin per feature, each owning its options, its configure and its stash key.

``pytest_npu_lazy.plugin`` (the ``npu_lazy`` entry point) registers them and
holds nothing else, the way pytest registers ``junitxml`` or pytest-xdist its
``dsession``: a newcomer changing one feature reads one module. Which process
of a run this is (xdist controller or worker, test child ...) none of them
asks for itself: ``pytest_npu_lazy.role`` decides it once.

- `probe`: the ``npu_lazy`` marker and fixture, the import recorder, the runner phases, the
  report attributes of a test that could not be judged;
- `cann`: the CANN torch_npu gets (stub, emulation, compute), activated before any conftest;
- `python_c`: run_python's zygotes for the session;
- `selection`: taking a selection map, and selecting by a change with one;
- `reports`: the header, the JSON / JUnit / HTML reports, the budget gate, the requires_npu gate;
- `isolation`: the zygotes and the controller that runs marked tests in them.
"""
