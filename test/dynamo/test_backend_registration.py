"""Guarantee 11: torch_npu's Dynamo backends are registered once, whichever way in, and before any lookup.

Ways in: the ``torch_dynamo_backends`` entry points of the wheel (loaded by
Dynamo's registry without torch_npu imported), the post-import trigger
(``import torch._dynamo``), and a retry after a set-up that failed half-way.
"""

from __future__ import annotations

import sys
from importlib import metadata

import pytest
from facts import DYNAMO_SETUP, INDUCTOR_SETUP, needs_deferred_setup
from breakage import caught
from regressions import duplicate_entry_point_registration

pytestmark = [needs_deferred_setup, pytest.mark.npu_lazy(preload=["torch", "torch_npu"])]

#: the wheel's entry points: name -> "module:attribute"
ENTRY_POINTS = {
    "npu": "torch_npu.dynamo:_npu_backend_entrypoint",
    "npugraph_ex": "torch_npu.dynamo:_npugraph_ex_backend_entrypoint",
    "npugraphs": "torch_npu.dynamo:_npugraphs_backend_entrypoint",
}


def _torch_npu_entry_points() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group="torch_dynamo_backends")
            if ep.dist is not None and ep.dist.name.replace("_", "-") == "torch-npu"}


@pytest.mark.npu_lazy(preload=["torch"])
def test_entry_points_name_the_lazy_entries_and_load_cold(npu_lazy):
    """The metadata names exactly the three lazy entry functions, and loading them (which imports
    torch_npu, as Dynamo's registry would) loads neither Dynamo nor Inductor."""
    entry_points = _torch_npu_entry_points()
    assert {name: ep.value for name, ep in entry_points.items()} == ENTRY_POINTS
    npu_lazy.assert_not_loaded("torch_npu", "torch._dynamo", "torch._inductor")
    with npu_lazy.phase("load"):
        loaded = {name: ep.load() for name, ep in entry_points.items()}
    assert all(callable(backend) for backend in loaded.values())
    assert npu_lazy.first_loaded("torch_npu") == "load"
    npu_lazy.assert_not_loaded("torch._dynamo", "torch._inductor", "torch_npu._inductor")
    assert not npu_lazy.ran(DYNAMO_SETUP)


class _PendingEntryPoint:
    """What Dynamo's registry holds for a discovered entry point before its first lookup."""

    module = "torch_npu.dynamo"

    def load(self):
        from torch_npu.dynamo import _npu_backend_entrypoint

        return _npu_backend_entrypoint


@pytest.mark.npu_lazy(preload=["torch"], track=["torch._dynamo.backends.registry:register_backend"])
def test_entry_point_lookup_registers_the_npu_backend_once(npu_lazy):
    """Dynamo discovered the entry point before torch_npu was imported; the lookup imports torch_npu,
    whose Dynamo set-up must leave the registration to the lookup (two registrations of one name raise),
    and a later registration attempt is a no-op."""
    import torch._dynamo  # noqa: F401
    from torch._dynamo.backends import registry

    registry._BACKENDS["npu"] = _PendingEntryPoint()
    registry._COMPILER_FNS.pop("npu", None)
    with npu_lazy.phase("lookup"):
        backend = registry.lookup_backend("npu")
    assert backend.__name__ == "_npu_backend_entrypoint"
    assert registry._COMPILER_FNS["npu"] is backend
    assert npu_lazy.first_loaded("torch_npu") == "lookup"
    assert npu_lazy.ran(DYNAMO_SETUP)
    registrations = npu_lazy.calls("torch._dynamo.backends.registry:register_backend")

    from torch_npu.dynamo import _register_npu_backend

    _register_npu_backend(backend, "npu")
    assert registry._COMPILER_FNS["npu"] is backend
    assert npu_lazy.calls("torch._dynamo.backends.registry:register_backend") == registrations, (
        "registering an already registered torch_npu backend called register_backend again")
    assert not npu_lazy.ran(INDUCTOR_SETUP)


def test_registration_is_retried_after_a_partial_failure(npu_lazy, monkeypatch):
    """The first backend registered, the second failed: a retry registers the missing one and leaves the
    first alone (a second register_backend for 'npu' would raise)."""
    import torch._dynamo  # noqa: F401
    import torch_npu.dynamo as npu_dynamo
    from torch._dynamo.backends import registry

    for name in ("npu", "npugraph_ex"):
        monkeypatch.delitem(registry._BACKENDS, name, raising=False)
        monkeypatch.delitem(registry._COMPILER_FNS, name, raising=False)
    register = npu_dynamo._register_npu_backend

    def second_fails(backend, name="npu"):
        if name == "npugraph_ex":
            raise RuntimeError("injected: npugraph_ex registration failed")
        return register(backend, name)

    with monkeypatch.context() as failing:
        failing.setattr(npu_dynamo, "_register_npu_backend", second_fails)
        with pytest.raises(RuntimeError, match="injected: npugraph_ex registration failed"):
            npu_dynamo._register_backends()
    assert "npu" in registry._COMPILER_FNS and "npugraph_ex" not in registry._COMPILER_FNS
    first = registry._COMPILER_FNS["npu"]
    npu_dynamo._register_backends()
    assert registry._COMPILER_FNS["npu"] is first, "the retry replaced the backend that had registered"
    assert "npugraph_ex" in registry._COMPILER_FNS, "the retry did not register the backend that had failed"


@pytest.mark.npu_lazy(preload=["torch", "torch_npu"], track=["torch._dynamo.backends.registry:lookup_backend"])
def test_dynamo_setup_completes_before_any_backend_lookup(npu_lazy):
    """The set-up runs while torch._dynamo itself loads, so it is complete before the registry can be
    asked for a backend, and torch.compile does not run it a second time."""
    with npu_lazy.phase("dynamo"):
        from torch._dynamo.backends import registry  # noqa: F401
    assert npu_lazy.ran(DYNAMO_SETUP), "importing torch._dynamo did not run the NPU Dynamo set-up"
    from torch_npu.utils._dynamo import _DynamoPostImportFinder

    assert not [f for f in sys.meta_path if isinstance(f, _DynamoPostImportFinder)], (
        "the Dynamo post-import trigger stayed on sys.meta_path after it fired")
    assert npu_lazy.calls("torch._dynamo.backends.registry:lookup_backend") == 0
    import torch

    compiled = npu_lazy.compile(lambda x: x + 1, backend="eager")
    assert compiled(torch.tensor(1)).item() == 2
    assert npu_lazy.calls("torch._dynamo.backends.registry:lookup_backend") >= 1
    assert not npu_lazy.ran(INDUCTOR_SETUP)


def test_trigger_calls_the_current_setup_function_once(npu_lazy, monkeypatch):
    """The trigger looks the set-up up when Dynamo loads (a replaced set-up is the one that runs), and
    compiling afterwards does not call it again."""
    from torch_npu.utils import _dynamo

    calls = []

    @_dynamo.run_once
    def replacement_setup():
        calls.append("setup")

    monkeypatch.setattr(_dynamo, "_lazy_dynamo_setup", replacement_setup)
    import torch
    from torch._dynamo.backends import registry  # noqa: F401

    assert calls == ["setup"], f"the post-import trigger ran the set-up {len(calls)} times"
    assert torch.compile(lambda x: x + 1, backend="eager")(torch.tensor(1)).item() == 2
    assert calls == ["setup"], "torch.compile ran the Dynamo set-up again"


@pytest.mark.npu_lazy(preload=["torch"], track=["torch._dynamo.backends.registry:register_backend"])
def test_zoo_duplicate_entry_point_registration_is_caught(npu_lazy):
    """(h) Registering the backend while Dynamo's registry is loading its entry point: caught above."""
    duplicate_entry_point_registration()
    caught(test_entry_point_lookup_registers_the_npu_backend_once, npu_lazy,
           says=("duplicate name: npu", "npu_lazy: raised during phase 'lookup'", "in lookup_backend"))


@pytest.mark.npu_lazy(preload=["torch"])
@pytest.mark.parametrize("discovered", [False, True], ids=["registered", "registered-then-entry-points-discovered"])
def test_a_foreign_npu_backend_is_refused_not_silently_kept(npu_lazy, discovered):
    """A backend another package registered as "npu" before torch_npu's Dynamo set-up is not taken for
    torch_npu's own: the set-up replaces a registration only when it is torch_npu's (its module, or its pending
    entry point), and otherwise fails with torch's duplicate-name error instead of leaving ``backend="npu"`` to
    run someone else's compiler."""
    import torch
    import torch._dynamo
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    def foreign(graph_module, example_inputs):
        return graph_module.forward

    register_backend(foreign, "npu")
    if discovered:  # Dynamo's registry reads the entry points: torch_npu's pending "npu" sits beside the foreign one
        torch._dynamo.list_backends(exclude_tags=None)
        npu_lazy.assert_not_loaded("torch_npu")
    with pytest.raises(AssertionError, match="duplicate name: npu"):
        import torch_npu  # noqa: F401  (Dynamo is loaded: the set-up runs at import)
    assert _COMPILER_FNS["npu"] is foreign  # torch refused the second registration; nothing was replaced quietly
