"""Typed messages between run_python's caller, its zygote and the zygote's children.

Each message is a frozen dataclass; it travels as a
:mod:`pytest_npu_lazy.forks.channel` frame whose kind is the class's
``KIND`` and whose payload is its fields. The receiving side gets the
dataclass back, never text to parse.

Directions:

caller -> zygote (control socket)  :class:`RunCode` (+ fds), :class:`Shutdown`
zygote -> caller (control socket)  :class:`CodeZygoteReady`
caller -> zygote (call socket)     :class:`Kill`
zygote -> caller (call socket)     :class:`Exited`
child  -> zygote (set-up pipe)     :class:`SetupOutcome`, once, only when the child cannot run the code

This module runs in the pytest process and in zygotes: standard library only.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import ClassVar, Optional

from ..forks.channel import Accepts, send  # noqa: F401 - send is this module's API too
from ..forks.server import Shutdown  # every fork server's; the caller sends it

#: the order of the descriptors that travel with a RunCode message
RUN_FDS = ("call", "cwd", "stdout", "stderr", "stdin")


@dataclass(frozen=True)
class RunCode:
    """Fork a child that runs ``code`` as ``python -c`` would, with these settings."""

    KIND: ClassVar[str] = "run"
    code: str
    env: dict
    cwd: Optional[str]  # as given to run_python, resolved in the child against the caller's directory
    argv0: str  # the caller's sys.executable: what sys.orig_argv[0] of `python -c` would be
    stdin: bool  # whether a stdin descriptor travels with the message (the caller's fd 0 may be closed)


@dataclass(frozen=True)
class CodeZygoteReady:
    """The preload finished (or failed); what the zygote learnt about it."""

    KIND: ClassVar[str] = "ready"
    pid: int
    error: Optional[str]  # the preload's traceback when an import failed
    reads: list  # environment variables the preload looked up (env.ALL: it iterated over all of them)
    hazard: Optional[str]  # why forking this zygote would hand children a broken device runtime
    threads: list  # names of Python threads the preload left running (a fork copies none of them)
    environ: dict  # os.environ as the interpreter's start-up left it, before the preload


@dataclass(frozen=True)
class Kill:
    """Kill the child's process group now (the caller's timeout, or the caller was interrupted)."""

    KIND: ClassVar[str] = "kill"


@dataclass(frozen=True)
class SetupOutcome:
    """Why a child did not run the code: written by the child to its set-up pipe, then it exits."""

    KIND: ClassVar[str] = "setup"
    start_errno: Optional[int] = None  # chdir(cwd) failed: subprocess raises OSError(errno, ..., cwd)
    shadowed: list = field(default_factory=list)  # files in cwd that would shadow preloaded modules
    internal_error: Optional[str] = None  # a traceback of this plugin's own code in the child

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "SetupOutcome | None":
        return cls(**json.loads(data)) if data else None


@dataclass(frozen=True)
class Exited:
    """The child ended: its wait status, and its set-up outcome when it never ran the code."""

    KIND: ClassVar[str] = "exited"
    status: int
    setup: Optional[dict] = None  # SetupOutcome's fields

    @property
    def outcome(self) -> SetupOutcome | None:
        return SetupOutcome(**self.setup) if self.setup else None


#: every message of run_python's control channel; the zygote accepts those it has ``on_<kind>`` handlers for
#: what a run_python zygote may be sent (its server accepts, of these, the kinds it has handlers for)
TO_ZYGOTE = (RunCode, Shutdown)
#: every message of run_python's zygotes (the zygote's CodeZygoteReady travels the other way, waited for in order)
ALL = (*TO_ZYGOTE, CodeZygoteReady)
#: what the caller reads from the zygote: CodeZygoteReady on the control channel
FROM_ZYGOTE = Accepts(CodeZygoteReady)
#: what a call's socket carries each way: the caller may say Kill; the zygote says how the child exited
FROM_CALLER = Accepts(Kill)
FROM_CALL = Accepts(Exited)
