"""CPU copies of what a function reaches on the emulated NPU: the reference computes apart from the emulation.

A compiled function is ordinary code: a lambda that closes over a module on the ``npu``
device, a function that names a global ``npu`` tensor, a bound ``forward``, a
``functools.partial``, a bfloat16 module. For the reference to run on the host, each of those
is copied: inputs, parameters and buffers, closure cells, defaults and the globals the code
names become CPU copies (float32 copies of bfloat16 / float16 ones where the reference runs
in float32), each shared object copied once. What the function reaches any other way (a helper
it calls closes over an ``npu`` tensor) is not copied; the reference then fails with a
mixed-devices error, which :mod:`.reference` answers by running on the device instead.
"""

from __future__ import annotations

import copy
import functools
import types


def low_precision():
    import torch

    return (torch.bfloat16, torch.float16)


def _is_module(value) -> bool:
    import torch

    return isinstance(value, torch.nn.Module)


def _tensors_of(value, depth: int = 0):
    """The tensors a value holds: itself, a module's parameters and buffers, a container's items (two levels)."""
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif _is_module(value):
        yield from value.parameters()
        yield from value.buffers()
    elif depth < 2 and isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors_of(item, depth + 1)
    elif depth < 2 and isinstance(value, dict):
        for item in value.values():
            yield from _tensors_of(item, depth + 1)


def reached(fn) -> list:
    """What a function reaches besides its arguments: a module itself, a bound method's object, a partial's
    arguments, a function's closure, defaults and the globals its code names."""
    if _is_module(fn):
        return [fn]
    if isinstance(fn, functools.partial):
        return [*fn.args, *fn.keywords.values(), *reached(fn.func)]
    if isinstance(fn, types.MethodType):
        return [fn.__self__, *reached(fn.__func__)]
    if not isinstance(fn, types.FunctionType):
        return []
    values = [cell.cell_contents for cell in (fn.__closure__ or ()) if _filled(cell)]
    values += list(fn.__defaults__ or ()) + list((fn.__kwdefaults__ or {}).values())
    values += [fn.__globals__[name] for name in fn.__code__.co_names if name in fn.__globals__]
    return values


def _filled(cell) -> bool:
    try:
        _ = cell.cell_contents
    except ValueError:  # a cell not yet assigned
        return False
    return True


def _all_tensors(fn, args, kwargs):
    for value in (*args, *kwargs.values(), *reached(fn)):
        yield from _tensors_of(value)


def reaches_npu(fn, args, kwargs) -> bool:
    return any(t.device.type == "npu" for t in _all_tensors(fn, args, kwargs))


def reaches_low_precision(fn, args, kwargs) -> bool:
    return any(t.dtype in low_precision() for t in _all_tensors(fn, args, kwargs))


def clones(tree):
    """Copies of a tree's tensors on their own device: new autograd leaves, as the originals' requires_grad."""
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda x: x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor)
                    else x, tree)


class HostCopier:
    """CPU copies, each shared object copied once; ``upcast``: bfloat16 / float16 tensors become float32."""

    def __init__(self, upcast: bool) -> None:
        self.upcast = upcast
        self._copies: dict[int, object] = {}

    def _tensor(self, tensor):
        host = tensor.detach().cpu().clone()
        if self.upcast and host.dtype in low_precision():
            host = host.float()
        return host.requires_grad_(tensor.requires_grad)

    def _module(self, module):
        host = copy.deepcopy(module).to("cpu")
        if self.upcast:
            host._apply(lambda t: t.float() if t.dtype in low_precision() else t)
        return host

    def value(self, value):
        """The CPU copy of one value (tensors, modules, and the lists, tuples and dicts holding them)."""
        import torch

        if not any(True for _ in _tensors_of(value)):
            return value
        key = id(value)
        if key not in self._copies:
            if isinstance(value, torch.Tensor):
                copied = self._tensor(value)
            elif _is_module(value):
                copied = self._module(value)
            elif isinstance(value, dict):
                copied = {k: self.value(v) for k, v in value.items()}
            elif isinstance(value, tuple) and hasattr(value, "_fields"):
                copied = type(value)(*(self.value(v) for v in value))
            elif isinstance(value, (list, tuple)):
                copied = type(value)(self.value(v) for v in value)
            else:
                copied = value
            self._copies[key] = copied
        return self._copies[key]

    def tree(self, tree):
        from torch.utils._pytree import tree_map

        return tree_map(self.value, tree)

    def function(self, fn):
        """The function as the reference calls it: the same code over CPU copies of what it reaches."""
        if _is_module(fn):
            return self.value(fn)
        if isinstance(fn, functools.partial):
            return functools.partial(self.function(fn.func), *(self.value(a) for a in fn.args),
                                     **{k: self.value(v) for k, v in fn.keywords.items()})
        if isinstance(fn, types.MethodType):
            return types.MethodType(self.function(fn.__func__), self.value(fn.__self__))
        if not isinstance(fn, types.FunctionType):
            return fn
        scope = fn.__globals__
        named = [name for name in fn.__code__.co_names if name in scope]
        if any(self.value(scope[name]) is not scope[name] for name in named):
            scope = dict(scope)
            scope.update({name: self.value(scope[name]) for name in named})
        closure = tuple(types.CellType(self.value(cell.cell_contents)) if _filled(cell) else cell
                        for cell in (fn.__closure__ or ()))
        copied = types.FunctionType(fn.__code__, scope, fn.__name__, tuple(self.value(d) for d in fn.__defaults__ or ()),
                                    closure or None)
        copied.__kwdefaults__ = {k: self.value(v) for k, v in (fn.__kwdefaults__ or {}).items()} or None
        copied.__qualname__ = fn.__qualname__
        return copied
