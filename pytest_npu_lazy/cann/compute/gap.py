"""The one error the interpreted device raises for what it cannot compute as a device would.

Kept apart (standard library only) so that the interpreter's bridges, its device numerics and its
libdevice all raise the same class, and the plugin can name it without loading NumPy or Triton.
"""

from __future__ import annotations

#: the words every refusal ends with: what to run instead
NEEDS_A_DEVICE = "the kernel needs a real Ascend device (pytest-npu-lazy --npu-lazy-cann=compute)"


class InterpreterGap(NotImplementedError):
    """A kernel needs something Triton's interpreter cannot compute as the device does: named, never replaced by
    another computation."""


class MissingAttribute(InterpreterGap, AttributeError):
    """A bridged module lacks a name: an InterpreterGap to whoever calls it, an AttributeError to whoever only asks
    (``hasattr``, ``getattr(..., default)``, pickling and Inductor's cache key), as a real module would answer."""
