"""Deferred loading on the device paths: guarantees that need an NPU to be present, not to compute.

Initialising the device, creating streams and events, copying to and from the device and
creating a wrapper that touches the device must load none of ``torch._dynamo``,
``torch._inductor``, ``torch_npu._inductor`` or Triton beyond what the CPU paths load.
They need only device discovery and initialisation, so they run under
``--npu-lazy-cann=emulate`` on any CPU runner, and for real on an NPU runner; on the CANN
host stub (no device) they skip. Nothing here checks a value an NPU would compute.
"""

from __future__ import annotations

import pytest
from facts import DEFERRED, DYNAMO_SETUP, INDUCTOR_SETUP, needs_deferred_setup, present

pytestmark = [needs_deferred_setup, pytest.mark.requires_npu(emulated=True),
              pytest.mark.npu_lazy(preload=["torch", "torch_npu"])]


def test_device_initialisation_loads_no_compiler(npu_lazy):
    import torch
    import torch_npu

    with npu_lazy.phase("init"):
        assert torch.npu.is_available() and torch.npu.device_count() >= 1
        assert torch_npu.npu.current_device() == 0
        properties = torch.npu.get_device_properties(0)
    assert torch_npu.npu.is_initialized()
    assert properties.name and properties.total_memory > 0 and properties.multi_processor_count > 0
    npu_lazy.assert_not_loaded(*present(DEFERRED))


def test_streams_and_events_load_no_compiler(npu_lazy):
    import torch

    with npu_lazy.phase("streams"):
        stream = torch.npu.Stream()
        start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
        with torch.npu.stream(stream):
            start.record()
            end.record()
        stream.synchronize()
        end.synchronize()
    assert stream.query() and end.query()
    assert start.elapsed_time(end) >= 0
    assert torch.npu.current_stream() != stream  # the context restored the default stream
    npu_lazy.assert_not_loaded(*present(DEFERRED))


def test_copies_to_and_from_the_device_load_no_compiler(npu_lazy):
    import torch

    host = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    with npu_lazy.phase("copy"):
        on_device = host.to("npu")
        back = on_device.cpu()
    assert on_device.device.type == "npu" and torch.equal(back, host)  # data moved, nothing computed
    npu_lazy.assert_not_loaded(*present(DEFERRED))


def test_wrapper_on_an_initialised_device_defers_npu_inductor(npu_lazy):
    import torch_npu

    torch_npu.npu.set_device(0)
    npu_lazy.compile(lambda x: x + 1, backend="inductor")
    assert npu_lazy.ran(DYNAMO_SETUP) and not npu_lazy.ran(INDUCTOR_SETUP)
    npu_lazy.assert_not_loaded("torch_npu._inductor")

