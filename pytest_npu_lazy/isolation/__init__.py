"""Isolation: run one test in a clean interpreter and bring every report home.

Each folder holds the code of one process, as pytest-xdist keeps
``workermanage.py`` (the controller's side) apart from ``remote.py`` (the
worker's):

- :mod:`.pytest_side`: the pytest process. A controller per isolated test
  relays its child's messages and writes what a dead child could not; the
  pool of zygotes, the module-zygote bookkeeping, spawned children, and the
  pytest half of a child's terminal, JUnit and warning output.
- :mod:`.zygote_side`: the fork servers (root, zygotes, module zygotes) on
  :mod:`pytest_npu_lazy.forks`'s engine, and a module zygote's one collection.
- :mod:`.child_side`: a test child: what it inherits, finding its test,
  running pytest's protocol for it and streaming the reports home.

Shared by all three: the typed messages (:mod:`.messages`), the description
of a test (:mod:`.target`), and importing a preload baseline
(:mod:`.preload`, with :mod:`.logs`, pytest's logging as in-process), which a
zygote and a spawned child both do. Nothing here imports torch.
"""
