"""Root conftest: pytester for the plugin's own tests, and nothing heavy.

This file is imported before the zygote forks, so whatever it imports is in
every isolated test's baseline: torch, torch_npu and triton must never be
imported here.
"""

pytest_plugins = ("pytester",)
