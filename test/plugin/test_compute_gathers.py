"""An interpreted kernel's large loads as NumPy gathers (pytest_npu_lazy/cann/compute/gathers.py): the bytes the
interpreter's own load helper reads, element for element, or no answer (the helper loads then).

Each case builds a block of pointers into a tensor's storage, as a kernel's ``ptr + offsets`` does, and compares
``gather`` with ``triton._C.libtriton.interpreter.load`` (the helper Triton's interpreter loads with) bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

from pytest_npu_lazy.cann.compute import gathers

torch = pytest.importorskip("torch")
helper = pytest.importorskip("triton._C.libtriton").interpreter.load

DTYPES = {"float32": (torch.float32, np.float32), "float16": (torch.float16, np.float16),
          "bfloat16": (torch.bfloat16, np.uint16), "int64": (torch.int64, np.int64), "int8": (torch.int8, np.int8)}


def _pointers(tensor, offsets):
    return (tensor.data_ptr() + offsets.astype(np.int64) * tensor.element_size()).astype(np.uint64)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["contiguous", "strided", "permuted", "offset view"])
def test_a_gather_reads_the_bytes_the_interpreters_load_reads(dtype, layout):
    torch_dtype, np_dtype = DTYPES[dtype]
    rng = np.random.default_rng(0)
    base = (torch.randn(64, 512) * 100).to(torch_dtype)
    tensor = {"contiguous": base, "strided": base[:, ::3], "permuted": base.t(),
              "offset view": base[5:, 7:]}[layout]
    rows, columns = tensor.shape
    index = np.arange(rows)[:, None] * tensor.stride(0) + np.arange(columns)[None, :] * tensor.stride(1)
    pointers = _pointers(tensor, index)
    mask = rng.random(pointers.shape) < 0.8
    other = np.full(pointers.shape, 7, dtype=np_dtype)
    with gathers.launch([tensor]):
        got = gathers.gather(pointers, mask, other, np.dtype(np_dtype))
        zeros = gathers.gather(pointers, mask, None, np.dtype(np_dtype))
    assert got is not None and zeros is not None, "a load within one argument's storage was not gathered"
    expected = helper(pointers, mask, other, np.dtype(np_dtype))
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert got.tobytes() == expected.tobytes()
    assert zeros.tobytes() == helper(pointers, mask, np.zeros(pointers.shape, np_dtype), np.dtype(np_dtype)).tobytes()


def test_a_load_the_gather_cannot_prove_in_bounds_aligned_or_worth_it_goes_to_the_helper():
    tensor, other = torch.arange(8192, dtype=torch.float32), torch.zeros(8192)
    pointers = _pointers(tensor, np.arange(8192))
    mask = np.ones(8192, dtype=bool)
    float32 = np.dtype(np.float32)
    assert gathers.gather(pointers, mask, None, float32) is None, "gathered outside a launch"
    with gathers.launch([tensor, other]):
        assert gathers.gather(pointers, mask, None, float32) is not None
        assert gathers.gather(pointers + np.uint64(4), mask, None, float32) is None, "read past the storage's end"
        assert gathers.gather(pointers + np.uint64(2), mask, None, float32) is None, "read across two elements"
        assert gathers.gather(pointers[:100], mask[:100], None, float32) is None, "a small block"
        assert gathers.gather(pointers, np.zeros(8192, dtype=bool), None, float32) is None, "nothing to load"
        assert gathers.gather(pointers, mask, None, np.dtype(np.bool_)) is None, "a boolean load"
        mixed = np.where(np.arange(8192) < 4096, pointers, _pointers(other, np.arange(8192)))
        assert gathers.gather(mixed, mask, None, float32) is None, "one block over two arguments' storages"
        below = pointers - np.uint64(64)
        assert gathers.gather(below, mask, None, float32) is None, "a pointer below the storage's start"
        masked_out = mask.copy()
        masked_out[:16] = False  # the lanes whose pointers fall below the start are masked: their other values
        got = gathers.gather(below, masked_out, np.full(8192, -1.0, np.float32), float32)
        assert got is not None and (got[:16] == -1.0).all() and (got[16:] == np.arange(8192)[:-16]).all()


def test_a_gather_leaves_an_other_of_another_dtype_to_the_helper():
    tensor = torch.arange(8192, dtype=torch.float32)
    pointers = (tensor.data_ptr() + np.arange(8192) * 4).astype(np.uint64)
    with gathers.launch([tensor]):
        assert gathers.gather(pointers, np.ones(8192, bool), np.zeros(8192, np.float64), np.dtype(np.float32)) is None
