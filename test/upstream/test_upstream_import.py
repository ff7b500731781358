"""`import torch` loads none of the compiler stack: torch_npu's own deferral builds on this."""

from __future__ import annotations

import pytest
from releases import IMPORT_DEFERS, torch_version


@pytest.mark.npu_lazy(preload=[], autoload=False)
def test_import_torch_defers_the_compiler_stack(npu_lazy, record_property):
    with npu_lazy.phase("import"):
        import torch
    record_property("torch", torch.__version__)
    record_property("import_modules", len(npu_lazy.modules("import")))
    npu_lazy.assert_loaded("torch")
    npu_lazy.assert_not_loaded(*IMPORT_DEFERS)
    npu_lazy.assert_not_loaded("torch_npu")  # plain torch: this suite never needs torch_npu
    assert str(torch_version()).split("+")[0] == torch.__version__.split("+")[0]
