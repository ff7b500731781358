"""The probe: what a test's phases loaded, why, and whether it ran what it promised.

:mod:`.recorder` sees every first import; :mod:`.fixture` is the
``npu_lazy`` fixture built on it, with :mod:`.tracking` (did a function run),
:mod:`.blocking` (make a module look absent) and :mod:`.modules` (questions
about names, answered without importing).
"""
