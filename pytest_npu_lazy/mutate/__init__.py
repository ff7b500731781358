"""Mutation pass over installed code: proof that the suite can fail, measured.

``python -m pytest_npu_lazy.mutate`` edits one function of an installed
module at a time, in memory, in every process of a pytest run, and asks
whether a test notices. Its parts, one role each:

- :mod:`.operators`: the edits (AST rewrites), the mutant ids, the coverage probes;
- :mod:`.hook`: applies a plan at import in every process (``site/sitecustomize.py`` installs it);
- :mod:`.trace`: the coverage probe's writer (which target function ran, when);
- :mod:`.pytest_plugin`: inside each run, the test windows and report outcomes;
- :mod:`.runs`: one bounded pytest run under a plan, in its own process group;
- :mod:`.selection`: coverage per test, taken once, and the tests each mutant runs;
- :mod:`.config`: the ``mutation.toml`` (targets, verdicts, the CI sample);
- :mod:`.session`: the pass (baseline, mutants, -x, outcomes);
- :mod:`.report`: score, provenance, JSON and markdown.

No mutation library fits: mutmut and cosmic-ray rewrite the files on disk,
which here are the installed torch_npu that every other process shares.
"""
