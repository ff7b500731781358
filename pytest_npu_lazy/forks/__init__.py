"""The fork-server engine both front ends run on.

:mod:`.channel` frames typed messages (and passed descriptors) on a socket
and dispatches them to ``on_<kind>`` handlers; :mod:`.server` is the serve
loop of every process that forks children on request (reap, kill, end with
its caller, freeze the heap before forking); :mod:`.processes` reaps,
signals and names processes. Test isolation
(:mod:`pytest_npu_lazy.isolation`) and run_python
(:mod:`pytest_npu_lazy.python_c`) are front ends on it and share nothing
else. Nothing here imports pytest or torch.
"""
