"""Isolation in the zygotes: forked servers that fork test children, never the pytest process itself.

:mod:`.server` holds the root, the baseline zygotes and the module zygotes,
each a :class:`pytest_npu_lazy.forks.server.ForkServer` with one handler per
message; :mod:`.module_collection` is what a module zygote does once: import
and collect its test module.
"""
