"""Isolation in a test child: one test, in a process of its own, reported home.

:mod:`.child` is the child's life (prepare, collect or find its test, run
pytest's protocol, stream reports) for a forked and a spawned child alike;
:mod:`.collected` is a child forked from a module zygote; :mod:`.find` finds
the pytest process's test again; :mod:`.inherit` makes what a child inherits
look as it does in-process; :mod:`.headroom` runs the test with headroom on
CPython's frame stack; :mod:`.outputs` sends its terminal writes and JUnit
extras home.
"""
