"""Field failures of re-entry: device-backend autoload that comes back into torch or torch_npu.

Seen in the field: a backend whose ``__init__`` imports torch is re-entered by
torch's device-backend autoload while it is half imported, a circular import
(torch-spyre#2925: "partially initialized module ... has no attribute
'_autoload'"); PyTorch is reworking autoload so that backends stop importing
Dynamo at ``import torch`` (pytorch#180712, #191314). The guarantee:

- ``import torch_npu`` first, in a bare interpreter with autoload on, does not
  re-enter itself (torch_npu holds autoload off around its own ``import
  torch``) and leaves the variable as it found it;
- another autoloaded backend that imports ``torch._dynamo`` or ``torch_npu``
  from its entry point, before or after torch_npu's own, leaves torch_npu set
  up once: the Dynamo set-up runs exactly when Dynamo loads, once, its trigger
  is gone after, and the first compiled call registers the backends and loads
  NPU Inductor once.
"""

from __future__ import annotations

import os
import sys

import pytest
import regressions
from breakage import caught
from facts import DEFERRED, INDUCTOR_SETUP, needs_deferred_setup

pytestmark = needs_deferred_setup

REGISTER_BACKENDS = "torch_npu.dynamo:_register_backends"
BACKEND_LOAD = "torch_npu._inductor.lowering_patch:restore_inductor_baseline"
AUTOLOAD = "TORCH_DEVICE_BACKEND_AUTOLOAD"

BACKEND = '''
import sys

SEEN = []


def _autoload():
    import torch
    import {imports}
    SEEN.append(sorted(name for name in ("torch_npu", "torch._dynamo") if name in sys.modules))
'''


def install_backend(directory, monkeypatch, imports: str, position: str) -> str:
    """A distribution with a ``torch.backends`` entry point whose function imports ``imports``, found before or
    after torch_npu's (entry points come in sys.path order). Returns its module name."""
    name = "other_backend_" + imports.replace(".", "_")
    (directory / f"{name}.py").write_text(BACKEND.format(imports=imports))
    info = directory / f"{name}-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text(f"[torch.backends]\n{name} = {name}:_autoload\n")
    path = [str(directory), *sys.path] if position == "before" else [*sys.path, str(directory)]
    monkeypatch.setattr(sys, "path", path)
    return name


@pytest.mark.npu_lazy(preload=[], autoload=True)
def test_import_torch_npu_first_with_autoload_does_not_reenter_itself(npu_lazy):
    assert os.environ.get(AUTOLOAD, "1") == "1" and "torch" not in sys.modules
    with npu_lazy.phase("import"):
        import torch_npu
    assert callable(getattr(torch_npu, "_autoload", None))
    npu_lazy.assert_not_loaded(*DEFERRED)
    assert os.environ.get(AUTOLOAD) == "1", f"import torch_npu left {AUTOLOAD}={os.environ.get(AUTOLOAD)!r}, not '1'"


@pytest.mark.npu_lazy(preload=[], autoload=True, track=[REGISTER_BACKENDS, BACKEND_LOAD])
@pytest.mark.parametrize("position", ["before", "after"], ids=["found-before-torch_npu", "found-after-torch_npu"])
@pytest.mark.parametrize("imports", ["torch._dynamo", "torch_npu"])
def test_another_autoloaded_backend_importing_dynamo_or_torch_npu_leaves_one_setup(
        npu_lazy, tmp_path, monkeypatch, imports, position):
    name = install_backend(tmp_path, monkeypatch, imports, position)
    with npu_lazy.phase("import"):
        import torch  # autoload: torch_npu's entry point and the other backend's, in sys.path order
    import torch_npu  # noqa: F401
    from torch_npu.utils import _dynamo

    seen = sys.modules[name].SEEN
    assert len(seen) == 1, f"the other backend's entry point ran {len(seen)} times"
    assert npu_lazy.first_loaded("torch_npu") == "import"
    dynamo = imports == "torch._dynamo"
    # what `import torch._dynamo` itself brings (stock torch): part of torch._inductor, and Triton where installed
    npu_lazy.assert_not_loaded(*[stack for stack in DEFERRED
                                 if not (dynamo and stack in ("torch._dynamo", "torch._inductor", "triton"))])
    assert _dynamo._lazy_dynamo_setup.has_run == dynamo, (
        f"with a backend {position} torch_npu importing {imports}, the Dynamo set-up "
        f"{'has' if _dynamo._lazy_dynamo_setup.has_run else 'has not'} run after `import torch`")
    trigger = [f for f in sys.meta_path if isinstance(f, _dynamo._DynamoPostImportFinder)]
    assert bool(trigger) != dynamo, f"the Dynamo trigger on sys.meta_path: {trigger}; Dynamo loaded: {dynamo}"
    assert os.environ.get(AUTOLOAD) == "1"
    compiled = npu_lazy.compile(lambda x: torch.cos(x) + 1, backend="inductor")
    compiled(torch.randn(8, device=npu_lazy.device))
    assert npu_lazy.ran(INDUCTOR_SETUP)
    assert (npu_lazy.calls(REGISTER_BACKENDS), npu_lazy.calls(BACKEND_LOAD)) == (1, 1), (
        f"torch_npu registered its Dynamo backends {npu_lazy.calls(REGISTER_BACKENDS)} times and loaded NPU Inductor "
        f"{npu_lazy.calls(BACKEND_LOAD)} times, not once each")


# -- the regression zoo for this group ------------------------------------------------------------------------


@pytest.mark.npu_lazy(preload=[], autoload=True)
def test_torch_npu_without_its_autoload_guard_is_caught(npu_lazy):
    """torch-spyre#2925's bug, re-created in torch_npu: its ``__init__`` no longer holds autoload off around its
    own ``import torch``."""
    regressions.autoload_guard_removed()
    caught(test_import_torch_npu_first_with_autoload_does_not_reenter_itself, npu_lazy,
           says=["Failed to load the backend extension: torch_npu",
                 "partially initialized module 'torch_npu' has no attribute '_autoload'"])
