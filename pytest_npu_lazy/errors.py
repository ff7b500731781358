"""Exceptions that carry a complete explanation: what is wrong and how to fix it."""

from __future__ import annotations


class NpuLazyError(Exception):
    """Base class: misuse of the plugin, reported as an error of the test."""


class MarkerError(NpuLazyError):
    """The ``npu_lazy`` marker or an option has a value the plugin cannot use."""


class ProbeUsageError(NpuLazyError):
    """A call on the ``npu_lazy`` fixture cannot be answered truthfully."""


class BaselineContaminatedError(NpuLazyError):
    """A module the test asserts about was loaded before the test started.

    Such a test can neither pass nor fail honestly, so it errors.
    """


class BlockError(ProbeUsageError):
    """A module cannot be made to look absent (it is already loaded)."""


class ZygoteError(NpuLazyError):
    """A zygote could not be started, refused to fork, or died."""


class RunPythonError(NpuLazyError):
    """run_python could not run a call the way subprocess would (its zygote died, or failed inside a child)."""


class NpuLazyWarning(UserWarning):
    """Something the user should know that does not fail a test (what a zygote's preload printed...)."""
