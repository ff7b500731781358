"""Guarantees 2 and 3: creating an Inductor wrapper sets up Dynamo only, with or without Triton."""

from __future__ import annotations

import pytest
from facts import DYNAMO_SETUP, INDUCTOR_SETUP, WRAPPER_KWARGS, needs_deferred_setup

pytestmark = [needs_deferred_setup, pytest.mark.npu_lazy(preload=["torch", "torch_npu"])]


@pytest.mark.parametrize("kwargs", WRAPPER_KWARGS.values(), ids=WRAPPER_KWARGS.keys())
def test_wrapper_runs_dynamo_setup_only(npu_lazy, kwargs):
    npu_lazy.compile(lambda x: x + 1, backend="inductor", **kwargs)
    npu_lazy.assert_not_loaded("torch_npu._inductor")
    assert not npu_lazy.ran(INDUCTOR_SETUP)
    assert npu_lazy.ran(DYNAMO_SETUP)
    assert npu_lazy.first_loaded("torch._dynamo") == "wrap"


# the test's own doing: with Triton blocked, torch_npu._inductor says at the first call that triton-ascend is missing
@pytest.mark.filterwarnings("ignore:triton-ascend is not installed:UserWarning")
@pytest.mark.npu_lazy(preload=["torch"], block=["triton"])
def test_wrapper_without_triton(npu_lazy):
    import torch
    import torch_npu  # noqa: F401

    fn = npu_lazy.compile(lambda x: torch.cos(x) * 3, backend="inductor")
    npu_lazy.assert_not_loaded("triton", "torch_npu._inductor")
    assert not npu_lazy.ran(INDUCTOR_SETUP)
    fn(torch.randn(8))  # still compiles, for the CPU, and matches eager (an NPU's kernels need Triton)
    assert npu_lazy.first_loaded("torch_npu._inductor") == "first_call"
    npu_lazy.assert_not_loaded("triton")


@pytest.mark.npu_lazy(preload=["torch"], block=["triton.language.extra.ascend", "triton.backends.ascend"])
def test_wrapper_with_triton_lacking_the_ascend_extension(npu_lazy):
    """The environment of the bug that shipped: Triton without its Ascend parts.

    With upstream Triton the blocked modules do not exist at all; with
    triton-ascend installed, triton's own backend discovery then fails to
    import, and torch treats Triton as absent. Either way the wrapper must
    be created without touching the Ascend extension.
    """
    import torch_npu  # noqa: F401

    npu_lazy.compile(lambda x: x * 2, backend="inductor")
    assert not npu_lazy.ran(INDUCTOR_SETUP)
    npu_lazy.assert_not_loaded("torch_npu._inductor", "triton.language.extra.ascend", "triton.backends.ascend")


@pytest.mark.parametrize("name", [None, "decoder_region"])
def test_the_patched_wrapper_hands_torch_its_name_and_options(npu_lazy, name):
    """torch.compile builds ``_TorchCompileInductorWrapper(mode, options, dynamic, name)``; torch_npu's __init__
    wraps torch's and must pass everything on: the name (Inductor's compile region) and the options, as given."""
    import torch

    wrapper = torch._TorchCompileInductorWrapper("default", {"max_autotune": False}, None, name)
    assert wrapper.name == name, f"the wrapper was built with name={name!r} and holds {wrapper.name!r}"
    assert wrapper.config.get("max_autotune") is False and wrapper.dynamic is None, (wrapper.config, wrapper.dynamic)
    assert npu_lazy.ran(DYNAMO_SETUP) and not npu_lazy.ran(INDUCTOR_SETUP)


def test_the_wrappers_shape_handling_bookkeeping_ends_with_its_init(npu_lazy):
    """torch_npu defers shape handling while torch's __init__ applies the options, with two attributes of its
    own: both go when __init__ ends, so options applied later (``apply_options``) take effect at once."""
    import torch
    from test_backend_scope import _shape_handling_installed

    wrapper = torch._TorchCompileInductorWrapper("default", None, None)
    leftovers = sorted(name for name in vars(wrapper) if name.startswith("_npu"))
    assert not leftovers, f"torch_npu's bookkeeping outlived the wrapper's __init__: {leftovers}"
    assert not _shape_handling_installed()
    wrapper.apply_options({"enable_shape_handling": True})
    assert _shape_handling_installed(), "shape handling asked for after __init__ was deferred, and never installed"
