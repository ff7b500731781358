"""Reports: the terminal summary, JSON and JUnit, the import budget, HTML and the matrix.

:mod:`.reporter` collects results in the pytest process; :mod:`.schema`
owns the JSON document; :mod:`.budget`, :mod:`.html` and :mod:`.matrix`
read it back. :mod:`.environment` says what a run tested against.
"""
