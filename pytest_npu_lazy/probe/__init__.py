"""The probe: what a test's phases loaded, why, and whether it ran what it promised.

It runs in whatever process runs the test (an isolated child, or the pytest
process for an unmarked test) and imports nothing of isolation or reports.

- :mod:`.recorder`: sees every first import, with its phase, importer and triggering line;
- :mod:`.state`: one test's phases, made from its settings in one step (``ProbeState.for_settings``);
- :mod:`.summary`: the typed :class:`~.summary.Summary` the reports read, and the default watch list;
- :mod:`.fixture`: the ``npu_lazy`` fixture, its assertions and violations as data;
- :mod:`.tracking`: did a function run (``ran()``), without importing its module early;
- :mod:`.blocking`: make a module look absent;
- :mod:`.modules`: questions about module names, answered without importing;
- :mod:`.device_calls`: the ACL / HCCL calls the CANN stub or emulation recorded, per phase;
- :mod:`.inductor_cache`: the Inductor cache each isolated test starts with, and the one its compilations met;
- :mod:`.reference`: the eager reference a first compiled call is compared with, what computed each side, gradients;
- :mod:`.host_copy`: CPU copies of what a compiled function reaches, for a reference apart from the emulation.
"""
