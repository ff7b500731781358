"""test/upstream: the guarantees of stock PyTorch that torch_npu relies on, checked with plain torch.

Imported in the pytest process before zygotes fork: it imports neither torch
nor triton (nor torch_npu, which this suite never needs).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))  # releases.py, for the tests

# As in test/dynamo: Inductor compiles in the test's own process, not in a pool of compile workers
# (which would cost every first call a fresh interpreter importing torch, outside the process checked).
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
