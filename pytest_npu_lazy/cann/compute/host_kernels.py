"""Eager operators on the emulated NPU, computed by ATen's CPU kernels on the device's host memory.

The emulated NPU's memory is host memory (``aclrtMalloc`` returns a host block), so a CPU
tensor can *alias* an ``npu`` tensor: same bytes, same strides, same storage offset. Every
ATen operator that torch_npu implements for its device (its PrivateUse1 kernels) and that
ATen can compute on the CPU gets one more PrivateUse1 kernel, registered over torch_npu's:
it aliases the ``npu`` arguments, runs the CPU kernel, and hands the result back with a
device's semantics:

- an in-place operator writes the device buffer through its alias, and returns the ``npu``
  tensor it was given (so views of it see the write);
- ``out=`` arguments receive the result as torch_npu would write it (resized first when
  the result's shape differs, through torch_npu's own ``resize_``);
- a new result is allocated on the device by torch_npu (``empty_strided``, the emulated
  ``aclrtMalloc``) and filled from the CPU result;
- factory operators (``device="npu"``) compute on the CPU and land on the device;
- random numbers are drawn from the device's generator, as on a device: an operator ATen tags
  ``nondeterministic_seeded`` (``randn``, ``rand_like``, ``bernoulli_``, ``native_dropout`` ...) runs
  with the CPU generator seeded from the ``npu`` generator's state (torch_npu's 16 bytes: seed and
  Philox offset; the generator passed, else the device's default one), and the offset then advances by
  the values drawn. So ``torch_npu.npu.get_rng_state``/``set_rng_state`` save and restore what is drawn
  (activation checkpointing's recompute, ``run_with_rng_state``, ``fork_rng`` see the same numbers
  again), a draw on the device leaves the CPU's stream alone, and right after ``torch.manual_seed(s)``
  (offset 0) the first draw equals the CPU's after the same seed. The numbers are the CPU's algorithm's,
  never a device's Philox bits: equal where a device's are equal, not equal to a device's.

Left to torch_npu, because they compute nothing: views (a return that aliases an argument
without writing it), in-place views (``squeeze_``, ``transpose_``: sizes and strides, never
bytes; functionalization calls them on wrappers that have no device memory while Inductor
traces), allocation and storage bookkeeping (``empty*``, ``resize_``, ``set_``,
``record_stream``). Operators with no CPU kernel (torch_npu's ``npu_*`` operators, its
collectives) keep torch_npu's kernel, which the emulation refuses (the device is lost):
never a made-up value. Once the device is lost, every host kernel fails too, with the
first refusal's message, as a real device does after a kernel error.

Every computation is written to :data:`.ledger.LEDGER` (``host ATen kernel``, ``refused``,
``device lost``) so a report says what computed each value.
"""

from __future__ import annotations

import contextlib
import ctypes
import struct
import warnings

from .. import task_queue
from .ledger import HOST_ATEN, LEDGER, LOST

#: Operators that torch_npu keeps: they allocate or describe storage, they compute nothing.
DEVICE_OWNED_PREFIXES = ("empty", "new_empty", "_empty")
DEVICE_OWNED = frozenset({"resize_", "resize_as_", "set_", "record_stream", "_has_compatible_shallow_copy_type",
                          "is_pinned", "_pin_memory"})

#: Operators that take CPU tensors beside device ones on a device too: copies between the two, and indices
MIXED_DEVICES_ALLOWED = frozenset({"copy_", "_copy_from", "_copy_from_and_resize", "_to_copy", "index", "index_put",
                                   "index_put_", "_index_put_impl_", "_unsafe_index", "_unsafe_index_put"})

_LIBRARY = None  # the torch.library.Library holding the kernels: registrations live as long as it does
_REGISTERED: tuple[str, ...] = ()


class DeviceLost(RuntimeError):
    """An operator on the emulated NPU after an earlier refusal: nothing computes on a lost device."""


def _lost_reason_function():
    """The emulation's C function, or None where no emulation is loaded (yet: torch_npu loads it)."""
    try:
        function = ctypes.PyDLL(None).npu_lazy_emulation_lost_reason
    except AttributeError:
        return None
    function.restype, function.argtypes = ctypes.c_char_p, []
    return function


_lost_reason = None


def lost_reason() -> str:
    """The emulation's first refusal once the device is lost, else '' (also without an emulation loaded). The
    function is kept once found, and looked up again until then: a process asked before torch_npu loaded it (a
    shared test child, say) still learns of a loss after."""
    global _lost_reason
    if _lost_reason is None:
        _lost_reason = _lost_reason_function()
    return (_lost_reason() or b"").decode(errors="replace") if _lost_reason is not None else ""


def host_alias(tensor):
    """A CPU tensor over an ``npu`` tensor's bytes: same storage, sizes, strides and offset."""
    import torch

    storage = tensor.untyped_storage()
    size = storage.nbytes()
    if size == 0:
        base = torch.empty(0, dtype=tensor.dtype)
    else:
        base = torch.frombuffer((ctypes.c_char * size).from_address(storage.data_ptr()), dtype=torch.uint8)
        base = base.view(tensor.dtype)
    return base.as_strided(tensor.size(), tensor.stride(), tensor.storage_offset())


def storage_range(tensor) -> tuple[int, int]:
    """The device memory a tensor's whole storage spans, ``(start, end)``: what a computation wrote, for the ledger."""
    storage = tensor.untyped_storage()
    return storage.data_ptr(), storage.data_ptr() + storage.nbytes()


def nonempty_storage_ranges(tensors) -> list[tuple[int, int]]:
    """:func:`storage_range` of each tensor whose storage holds any bytes (an empty one spans nothing to load
    from or overlap): a launch's argument memory, for the gathers and the sub-blocks' aliasing check."""
    return [span for span in map(storage_range, tensors) if span[1] > span[0]]


def _tensors(value):
    """Every tensor in ``value``: a tensor, or lists and tuples of them, nested."""
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


def _npu_tensors(values):
    return (tensor for tensor in _tensors(values) if tensor.device.type == "npu")


def _to_host(value):
    import torch

    if isinstance(value, torch.Tensor):
        return host_alias(value) if value.device.type == "npu" else value
    if isinstance(value, (list, tuple)):
        return type(value)(_to_host(item) for item in value)
    if isinstance(value, torch.Generator) and value.device.type == "npu":
        return None  # the CPU default generator, seeded from this one's state (drawn_from)
    return value


#: spreads (seed, offset) over the CPU generator's seeds; offset 0 keeps the seed itself
_OFFSET_STRIDE = 0x9E3779B97F4A7C15
#: torch_npu's generator state: seed and Philox offset, two little-endian uint64
_NPU_STATE = struct.Struct("<QQ")


def device_generator(args, kwargs, device):
    """The ``npu`` generator an operator draws from: the one passed, else the device's default generator."""
    import torch

    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Generator) and value.device.type == "npu":
            return value
    import torch_npu

    torch_npu.npu._lazy_init()
    index = torch.device(device).index if device is not None else None
    return torch_npu.npu.default_generators[torch_npu.npu.current_device() if index is None else index]


@contextlib.contextmanager
def drawn_from(generator):
    """Compute with the CPU default generator seeded from an ``npu`` generator's state; the CPU's own stream is
    put back after, and the device's offset advances by the values drawn (``drawn.append(numel)`` in the block)."""
    import torch

    state = bytes(generator.get_state().tolist())
    if len(state) != _NPU_STATE.size:
        raise RuntimeError(f"the npu generator's state is {len(state)} bytes, not torch_npu's {_NPU_STATE.size} "
                           "(seed, offset): pytest-npu-lazy cannot draw from it")
    seed, offset = _NPU_STATE.unpack(state)
    host = torch.default_generator
    saved = host.get_state()
    host.manual_seed((seed + offset * _OFFSET_STRIDE) % (1 << 64))
    drawn: list[int] = []
    try:
        yield drawn
    finally:
        host.set_state(saved)
    used = max(1, sum(drawn))
    advanced = _NPU_STATE.pack(seed, (offset + (used + 3) // 4 * 4) % (1 << 64))  # Philox: 4 values a counter
    generator.set_state(torch.frombuffer(bytearray(advanced), dtype=torch.uint8))


def _dense(tensor) -> bool:
    """Strides a fresh device tensor can take as they are: no overlap, no gap."""
    if tensor.is_contiguous():
        return True
    size = tensor.numel() * tensor.element_size()
    return (tensor.storage_offset() == 0 and tensor.untyped_storage().nbytes() == size
            and all(stride != 0 for stride, extent in zip(tensor.stride(), tensor.size()) if extent > 1))


def to_device(value, device):
    """A CPU result on the emulated device: allocated by torch_npu, filled through its host alias."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.device.type != "cpu":
            return value
        value = value if _dense(value) else value.contiguous()
        target = torch.empty_strided(value.size(), value.stride(), dtype=value.dtype, device=device)
        if value.numel():
            host_alias(target).copy_(value)
        return target
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(item, device) for item in value)
    return value


def _write_out(device_tensor, host_result) -> None:
    """An ``out=`` argument gets the result as a device would write it: resized when the shape differs."""
    if device_tensor.shape != host_result.shape:
        device_tensor.resize_(host_result.shape)
    if host_result.numel():
        host_alias(device_tensor).copy_(host_result)


def _npu_device(value) -> bool:
    import torch

    if value is None:
        return False
    return torch.device(value).type == "npu"


def make_kernel(op):
    """The PrivateUse1 kernel of one ATen overload: alias, compute on the CPU, hand back as the device would."""
    import torch

    schema = op._schema
    name = str(op)
    arguments = schema.arguments
    returns = schema.returns
    # out= arguments (written, keyword-only) are computed into fresh CPU tensors and written back: ATen would
    # resize a wrong-sized one, and an alias of device memory cannot grow
    outs = [a.name for a in arguments if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write]
    # arguments the operator writes (in-place, out=): what it computed, where it returns nothing
    written_positions = [i for i, a in enumerate(arguments) if a.alias_info is not None and a.alias_info.is_write]
    # a return that aliases a written argument (in-place, out=) hands back that argument, the npu tensor itself
    return_sources = []
    for ret in returns:
        source = None
        if ret.alias_info is not None:
            for i, argument in enumerate(arguments):
                if argument.alias_info is not None and argument.alias_info.before_set == ret.alias_info.before_set:
                    source = (i, argument.name)
                    break
        return_sources.append(source)
    seeded = torch.Tag.nondeterministic_seeded in op.tags  # it draws random numbers

    def kernel(*args, **kwargs):
        reason = lost_reason()
        if reason:
            LEDGER.record(LOST, name)
            raise DeviceLost(f"{name}: the emulated NPU is lost since an earlier refused call, so no operator "
                             f"computes any more (a real device is lost the same way); the first refusal: {reason}")
        host_args = [_to_host(a) for a in args]
        host_kwargs = {}
        out_tensors = {}
        for key, value in kwargs.items():
            if key in outs and isinstance(value, torch.Tensor) and value.device.type == "npu":
                out_tensors[key] = value
                host_kwargs[key] = torch.empty(0, dtype=value.dtype)
            else:
                host_kwargs[key] = _to_host(value)
        device = kwargs.get("device")
        if _npu_device(device):
            host_kwargs["device"] = torch.device("cpu")
        result_device = device if device is not None else next(
            (a.device for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and a.device.type == "npu"),
            None) or "npu"
        if seeded:
            with drawn_from(device_generator(args, kwargs, result_device)) as drawn:
                result = op(*host_args, **host_kwargs)
                drawn.append(sum(t.numel() for t in _tensors(result)))
        else:
            result = op(*host_args, **host_kwargs)
        for key, tensor in out_tensors.items():
            _write_out(tensor, host_kwargs[key])
        if not returns:
            LEDGER.record(HOST_ATEN, name, wrote=tuple(storage_range(t) for t in _npu_tensors(
                [args[i] for i in written_positions if i < len(args)] + list(out_tensors.values()))))
            return result
        results = [result] if len(returns) == 1 else list(result)
        handed = []
        for value, source in zip(results, return_sources):
            if source is not None:
                index, argument = source
                handed.append(args[index] if index < len(args) else kwargs[argument])
            else:
                handed.append(to_device(value, result_device) if torch.device(result_device).type == "npu" else value)
        LEDGER.record(HOST_ATEN, name, wrote=tuple(storage_range(t) for t in _npu_tensors(handed)))
        return handed[0] if len(returns) == 1 else tuple(handed)

    base = schema.name.split("::")[-1]
    if base not in MIXED_DEVICES_ALLOWED:
        check_devices = kernel

        def kernel(*args, **kwargs):
            _refuse_mixed_devices(name, args, kwargs)
            return check_devices(*args, **kwargs)

    computed = kernel

    def kernel(*args, **kwargs):
        result = computed(*args, **kwargs)
        task_queue.wait_until_bound()  # after: the result's allocation may be what started the device
        return result

    kernel.__name__ = f"npu_lazy_host_{base}"
    return kernel


def _refuse_mixed_devices(name: str, args, kwargs) -> None:
    """A device refuses a CPU tensor beside its own (a 0-dim CPU tensor is a scalar, which it takes): so do we,
    with ATen's words, instead of computing on the host what a device would refuse."""
    import torch

    def tensors(values):
        for value in values:
            if isinstance(value, torch.Tensor):
                yield value
            elif isinstance(value, (list, tuple)):
                yield from tensors(value)

    found = list(tensors((*args, *kwargs.values())))
    other = next((t for t in found if t.device.type != "npu" and t.dim() > 0), None)
    device = next((t.device for t in found if t.device.type == "npu"), None)
    if other is not None and device is not None:
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, {device} "
                           f"and {other.device}! ({name} on the emulated NPU, as on a device)")


def _computes_nothing(base: str, op) -> bool:
    import torch

    if base in DEVICE_OWNED or base.startswith(DEVICE_OWNED_PREFIXES):
        return True
    if torch.Tag.inplace_view in op.tags:
        # squeeze_, transpose_, as_strided_ ...: they change a tensor's sizes and strides, never its bytes, and
        # functionalization calls them on wrappers that have no device memory (AOTAutograd tracing a compiled call)
        return True
    return any(r.alias_info is not None and not r.alias_info.is_write for r in op._schema.returns)  # a view


def candidates() -> list[tuple[str, object]]:
    """(``name.overload``, op) for every ATen operator torch_npu implements that ATen computes on the CPU."""
    import torch

    found = []
    for qualified in torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1"):
        namespace, _, rest = qualified.partition("::")
        if namespace != "aten":
            continue
        base, _, overload = rest.partition(".")
        if not torch._C._dispatch_has_computed_kernel_for_dispatch_key(qualified, "CPU"):
            continue  # torch_npu's own operators (npu_*), collectives: refused by the emulation
        try:
            op = getattr(getattr(torch.ops.aten, base), overload or "default")
        except AttributeError:
            continue
        if not _computes_nothing(base, op):
            found.append((rest, op))
    return found


def install(_loaded: str = "torch_npu") -> int:
    """Register the host kernels over torch_npu's (once ``torch_npu`` loaded); returns how many."""
    global _LIBRARY, _REGISTERED
    if _LIBRARY is not None:
        return len(_REGISTERED)
    import torch

    library = torch.library.Library("aten", "IMPL")
    registered = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Overriding a previously registered kernel": that is the point
        for qualified, op in candidates():
            library.impl(qualified, make_kernel(op), "PrivateUse1")
            registered.append(qualified)
    _LIBRARY, _REGISTERED = library, tuple(registered)
    return len(registered)


def registered() -> tuple[str, ...]:
    return _REGISTERED
