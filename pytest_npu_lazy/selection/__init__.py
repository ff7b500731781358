"""Change-driven selection: a change of torch_npu runs the tests that can see it.

- :mod:`.sources`: the watched packages' files, their git blob ids and functions (no import of them);
- :mod:`.tracer`: in each process that runs tests, the lines each phase ran (coverage.py), inherited by forks;
- :mod:`.map`: the selection map, a versioned JSON file of every test's evidence;
- :mod:`.changes`: a change read from git, a diff or a file list, as old-side lines;
- :mod:`.rule`: which tests a change can affect, each with its reason; what it cannot rule out, it selects;
- :mod:`.pytest_side`: taking the map in a run, selecting in a run (xdist included);
- :mod:`.merge`: ``python -m pytest_npu_lazy.selection.merge``, the N maps of ``--npu-lazy-shard`` as one run's;
- :mod:`.__main__`: ``python -m pytest_npu_lazy.selection``, the selection printed for a CI that runs tests its way;
- :mod:`.recall`: the rule against the mutation pass's caught mutants (docs/selection.md).
"""
