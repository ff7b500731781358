"""Reports: the terminal summary, JSON and JUnit, the import budget, HTML and the matrix.

They read each isolated test's :class:`~pytest_npu_lazy.probe.summary.Summary`
as report data; nothing here imports isolation or the plugin.

- :mod:`.reporter`: collects every test's results in the pytest process (or xdist's controller),
  writes the JSON, JUnit properties and HTML, runs the budget gate, says whether module lists are needed;
- :mod:`.schema`: the JSON report's versioned schema, written relative to the rootdir, read back with checks;
- :mod:`.terminal`: the end-of-run section, fitted to the terminal's width;
- :mod:`.budget`: the import budget gate against a saved baseline;
- :mod:`.html`: ``python -m pytest_npu_lazy.reports.html``, phases and import trees per test;
- :mod:`.matrix`: ``python -m pytest_npu_lazy.reports.matrix``, guarantees by environment;
- :mod:`.environment`: versions, Triton flavour and device (the header), and the ``requires_npu`` gate;
- :mod:`.known_warnings`: warnings no test can act on, explained in the header and filtered.
"""
