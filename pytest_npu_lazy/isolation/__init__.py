"""Isolation: run one test in a clean interpreter and bring every report home.

The pytest process keeps a pool of zygotes (:mod:`.pool`, :mod:`.module_zygotes`)
and a controller per isolated test (:mod:`.controller`, :mod:`.progress`,
:mod:`.outputs`); a spawned child is a fresh ``python -m pytest``
(:mod:`.spawn`). Zygotes (:mod:`.server`, on :mod:`pytest_npu_lazy.forks`'s
engine) import a baseline (:mod:`.preload`) and fork test children
(:mod:`.child`, :mod:`.inherit`), or collect one module first
(:mod:`.collected`); a child finds its item from :mod:`.target`'s
description and runs pytest's own protocol for it. They speak the typed
messages of :mod:`.messages`; :mod:`.logs` is pytest's own logging in a child.
Nothing here imports torch.
"""
