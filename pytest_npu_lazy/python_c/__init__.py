"""``run_python``: ``python -c CODE`` at the cost of a fork.

:mod:`.call` is the caller's side, :mod:`.pool` the zygotes it keeps,
:mod:`.boot` and :mod:`.zygote` the zygote program, :mod:`.child` what a
fork becomes, :mod:`.messages` what they say to each other, :mod:`.env` the
environment a call runs with. The zygote's loop is the fork engine's
(:mod:`pytest_npu_lazy.forks.server`). The public name
is :func:`pytest_npu_lazy.run_python`.
"""
