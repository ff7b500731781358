"""Root conftest: pytester for the plugin's own tests, the warning gate, and nothing heavy.

This file is imported before the zygote forks, so whatever it imports is in
every isolated test's baseline: torch, torch_npu and triton must never be
imported here.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "test"))  # test/warning_gate.py

pytest_plugins = ("pytester", "warning_gate")
