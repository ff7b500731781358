"""Isolation in the pytest process: where an isolated test's child comes from, and what its reports become.

:mod:`.controller` drives one child per test and relays its messages,
:mod:`.progress` keeps the phases it reached (what a dead child's reports
still say), :mod:`.outputs` writes its terminal lines, JUnit extras and
warnings, :mod:`.pool` keeps the zygotes and hands out prepared children,
:mod:`.handles` is one zygote as the pool holds it (its channel, its
readiness, the child it forked ahead), :mod:`.module_zygotes` decides which
tests share a module zygote and how many live, and :mod:`.spawn` starts a
fresh interpreter per test instead. :mod:`.skip_marks` finds the tests their
own skip marks skip, which need no child.
"""
