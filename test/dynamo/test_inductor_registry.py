"""NPU Inductor's registry: loaded once per backend chosen, switched when the choice changes, and switchable off.

``torch_npu.utils._dynamo`` keeps which NPU Inductor backend is loaded
(``TORCHINDUCTOR_NPU_BACKEND`` when it was registered). Registering again for
the same backend loads nothing; registering for another loads that one
through ``torch_npu._inductor._load_backend``; ``disable_register_inductor_npu``
makes registration a no-op until ``enable_register_inductor_npu``, and
``is_inductor_npu_initialized`` says whether any backend was loaded.

The first registration imports ``torch_npu._inductor`` for real (the default
backend); later loads are recorded instead of run, since the other backends
need their own compilers.
"""

from __future__ import annotations

import sys

import pytest
from facts import needs_deferred_setup

pytestmark = [needs_deferred_setup, pytest.mark.npu_lazy(preload=["torch", "torch_npu"])]

VAR = "TORCHINDUCTOR_NPU_BACKEND"


def test_registration_loads_npu_inductor_once_per_backend_chosen(npu_lazy, monkeypatch):
    from torch_npu.utils import _dynamo

    monkeypatch.delenv(VAR, raising=False)
    assert not _dynamo.is_inductor_npu_initialized()
    _dynamo.register_inductor_npu()
    assert "torch_npu._inductor" in sys.modules, "the first registration did not import torch_npu._inductor"
    assert _dynamo.is_inductor_npu_initialized(), "a backend was loaded, but the registry says none is"

    loads = []
    monkeypatch.setattr(sys.modules["torch_npu._inductor"], "_load_backend", lambda: loads.append(_env()))
    # unset and "default" are one choice: going from one to the other loads nothing
    steps = [(None, []), ("dvm", ["dvm"]), ("dvm", ["dvm"]), ("default", ["dvm", "default"]),
             ("default", ["dvm", "default"]), (None, ["dvm", "default"])]
    for value, expected in steps:
        if value is None:
            monkeypatch.delenv(VAR, raising=False)
        else:
            monkeypatch.setenv(VAR, value)
        _dynamo.register_inductor_npu()
        assert loads == expected, (
            f"after registering with {VAR}={value!r} the backends loaded since the first are {loads}, expected "
            f"{expected}: a backend is loaded when the choice changes and only then")


def test_disabled_registration_loads_nothing_until_enabled(npu_lazy, monkeypatch):
    from torch_npu.utils import _dynamo

    monkeypatch.delenv(VAR, raising=False)
    _dynamo.disable_register_inductor_npu()
    _dynamo.register_inductor_npu()
    npu_lazy.assert_not_loaded("torch_npu._inductor")
    assert not _dynamo.is_inductor_npu_initialized()
    _dynamo.enable_register_inductor_npu()
    _dynamo.register_inductor_npu()
    assert "torch_npu._inductor" in sys.modules and _dynamo.is_inductor_npu_initialized(), (
        "registration enabled again did not load NPU Inductor")


def _env():
    import os

    return os.environ.get(VAR)
