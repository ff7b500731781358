"""Pointwise, broadcast, view and reduction operators: compiled on the NPU equals eager on the NPU.

Written as torch_npu writes its Inductor op tests (inputs made on the NPU, eager computed there,
``torch.compile(backend="inductor")`` of the same function, the two compared), one test per
operator and dtype. Under ``--npu-lazy-cann=compute`` eager runs ATen's CPU kernels on the
device's host memory and the compiled call runs the Triton kernels torch_npu's NPU codegen
wrote, in Triton's interpreter; the report lists them per test (``computed``). What the
interpreter or the emulation cannot run, or where torch_npu's compiled result differs from
eager for a reason of its own, is a strict xfail naming the reason (``KNOWN``), so a fix shows
up as an unexpected pass. docs/npu-kernels.md is the table.
"""

from __future__ import annotations

import pytest
from ops import BROADCAST, FLOATS, INT_REDUCTIONS, POINTWISE, REDUCTIONS, VIEWS
from testutils import MARKS, SHAPE_OF, compile_and_compare, generate_tensor

pytestmark = MARKS

#: (test name, dtype) -> why the compiled result cannot equal eager here; each one a finding in docs/npu-kernels.md
KNOWN: dict[tuple[str, str], str] = {}


def _known(name: str, dtype: str) -> None:
    reason = KNOWN.get((name, dtype))
    if reason is not None:
        pytest.xfail(reason)


@pytest.mark.parametrize("name,dtype", [(name, dtype) for name, (_, dtypes, _) in POINTWISE.items()
                                        for dtype in dtypes])
def test_pointwise(name, dtype):
    op, _, arity = POINTWISE[name]
    _known(f"pointwise:{name}", dtype)
    inputs = [generate_tensor(SHAPE_OF[dtype], dtype) for _ in range(arity)]
    compile_and_compare(op, *inputs)


@pytest.mark.parametrize("dtype", FLOATS + ("int64",))
@pytest.mark.parametrize("name", list(BROADCAST))
def test_broadcast(name, dtype):
    op, other_shape = BROADCAST[name]
    _known(f"broadcast:{name}", dtype)
    shape = SHAPE_OF[dtype]
    compile_and_compare(op, generate_tensor(shape, dtype), generate_tensor(other_shape(shape), dtype))


@pytest.mark.parametrize("dtype", FLOATS + ("int64",))
@pytest.mark.parametrize("name", list(VIEWS))
def test_view(name, dtype):
    _known(f"view:{name}", dtype)
    compile_and_compare(VIEWS[name], generate_tensor(SHAPE_OF[dtype], dtype))


@pytest.mark.parametrize("name,dtype", [(name, dtype) for name in REDUCTIONS for dtype in FLOATS]
                         + [(name, "int64") for name in INT_REDUCTIONS])
def test_reduction(name, dtype):
    _known(f"reduction:{name}", dtype)
    compile_and_compare(REDUCTIONS[name], generate_tensor(SHAPE_OF[dtype], dtype))
