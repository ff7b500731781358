"""Framed messages between processes: the channel, and typed messages on it.

Each message is a named event with a JSON payload, framed by a 4-byte length
on a Unix stream socket. File descriptors (a new child's socket, a child's
capture files) travel alongside as SCM_RIGHTS ancillary data; a message says
how many it carries and the receiver takes them in order.

What travels is always a frozen dataclass whose ``KIND`` names the event
and whose fields are its payload (:func:`send`); the receiver names the
kinds it accepts (:class:`Accepts`) and gets the dataclass back. A kind or
a field it does not know raises :class:`ProtocolError`, as pytest-xdist's
controller does for an unknown event: a message is never dropped unread.
An endpoint that serves a channel binds each kind to an ``on_<kind>``
method, and what it accepts is derived from those methods
(:meth:`Accepts.handled_by`), so the two cannot drift apart.
The isolation's messages are in :mod:`pytest_npu_lazy.isolation.messages`,
run_python's in :mod:`pytest_npu_lazy.python_c.messages`. A kind is unique on
its own channels only (both front ends have a ``run`` and a ``ready``); the
class names are unique across the package and say their front end
(``RunTest``, ``RunCode``...), so a reader of either end knows which is meant.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import threading
import time
from collections import deque
from dataclasses import fields
from typing import Any, ClassVar, NamedTuple, Protocol

from .processes import close_fd

_HEADER = struct.Struct("!II")  # payload length, number of fds
_MAX_FDS = 16
_HANDLED: dict[tuple[type, tuple[MessageType, ...]], "Accepts"] = {}  # what an endpoint class accepts, derived once


class TypedMessage(Protocol):
    """A message: a frozen dataclass whose ``KIND`` names the event and whose fields are its payload."""

    KIND: ClassVar[str]


MessageType = type[TypedMessage]


class Message(NamedTuple):
    kind: str
    payload: dict[str, Any]
    fds: list[int]


class ChannelClosed(EOFError):
    """The other end closed its socket: it exited, crashed or was killed."""


class ProtocolError(ChannelClosed):
    """The other end sent a message this end does not accept: a bug on one side, never a test's doing.

    It is a ChannelClosed too, because nothing more can be read from that
    peer with confidence: every caller that ends a conversation on EOF ends
    it here as well, and the ones that report to a person name the message.
    """


class Channel:
    """One end of a socketpair carrying framed messages and file descriptors."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = bytearray()
        self._fds: deque[int] = deque()
        self._pending: deque[Message] = deque()
        self._send_lock = threading.Lock()  # a child's log lines may come from any thread
        self._held: bytearray | None = None  # frames kept for one write, once hold() was called

    @classmethod
    def pair(cls) -> tuple["Channel", "Channel"]:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        return cls(a), cls(b)

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, kind: str, /, fds: list[int] | tuple[int, ...] = (), **payload: Any) -> None:
        body = json.dumps({"kind": kind, **payload}, default=str).encode()
        frame = _HEADER.pack(len(body), len(fds)) + body
        with self._send_lock:
            if fds:
                self._flush_held()  # in order: what was held goes first
                socket.send_fds(self.sock, [frame[:1]], list(fds))
                self.sock.sendall(frame[1:])
            elif self._held is not None:
                self._held += frame
            else:
                self.sock.sendall(frame)

    def hold(self) -> None:
        """From now on keep what is sent until :meth:`release`: several messages in one write, one wake-up
        of the reader. A sender holds only while its own code runs, and releases before code that could
        crash, hang or be killed runs (a test child: around its test's own code)."""
        with self._send_lock:
            if self._held is None:
                self._held = bytearray()

    def release(self) -> None:
        """Write everything held, in the order it was sent, and send at once from now on."""
        with self._send_lock:
            self._flush_held()
            self._held = None

    def _flush_held(self) -> None:
        if self._held:
            data = bytes(self._held)
            self._held.clear()
            self.sock.sendall(data)

    def hung_up(self) -> bool:
        """Whether the other end is gone with nothing left to read (a peek that would block says no): for a
        process forked ahead, asked before it is given work."""
        if self._buffer or self._pending:
            return False
        try:
            return self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True

    def recv(self, timeout: float | None = None) -> Message | None:
        """The next message; None when ``timeout`` passes first; ChannelClosed on EOF."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._pending:
            if self._parse():
                continue
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if remaining is not None and not _wait_readable(self.sock, remaining):
                return None
            try:
                data, fds, _, _ = socket.recv_fds(self.sock, 1 << 16, _MAX_FDS)
            except (ConnectionResetError, OSError) as exc:
                raise ChannelClosed(str(exc)) from None
            if not data:
                raise ChannelClosed("connection closed")
            self._buffer += data
            self._fds.extend(fds)
        return self._pending.popleft()

    def _parse(self) -> bool:
        if len(self._buffer) < _HEADER.size:
            return False
        length, nfds = _HEADER.unpack_from(self._buffer)
        if len(self._buffer) < _HEADER.size + length or len(self._fds) < nfds:
            return False
        body = bytes(self._buffer[_HEADER.size:_HEADER.size + length])
        del self._buffer[:_HEADER.size + length]
        fds = [self._fds.popleft() for _ in range(nfds)]
        try:
            payload = json.loads(body)
            kind = payload.pop("kind")
        except (ValueError, TypeError, AttributeError, KeyError) as exc:  # not JSON, not an object, no kind
            for fd in fds:
                os.close(fd)
            raise ProtocolError(f"a malformed message ({type(exc).__name__}: {exc}): "
                                f"{body[:80].decode(errors='replace')!r}") from None
        self._pending.append(Message(kind, payload, fds))
        return True

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        while self._fds:
            close_fd(self._fds.popleft())


def send(channel: Channel, message: Any, fds: list[int] | tuple[int, ...] = ()) -> None:
    """Send a typed message: its ``KIND`` and its fields (a shallow copy: payloads are plain data)."""
    channel.send(message.KIND, fds=fds, **{f.name: getattr(message, f.name) for f in fields(message)})


class Accepts:
    """The message types one end accepts on one channel, by kind."""

    def __init__(self, *types: MessageType) -> None:
        self.types = {cls.KIND: cls for cls in types}

    @classmethod
    def handled_by(cls, endpoint: object, *types: MessageType) -> "Accepts":
        """The kinds among ``types`` that ``endpoint`` (an instance or its class) has an ``on_<kind>`` method
        for, and only those; derived once per class.

        Every ``on_`` method is a message handler (an endpoint names its other
        events otherwise). A handler whose kind is none of ``types`` is a typo
        or a message that no longer exists: it raises TypeError the first time
        the set is derived, not later, as a message that never comes.
        """
        endpoint_class = endpoint if isinstance(endpoint, type) else type(endpoint)
        key = (endpoint_class, types)
        if key not in _HANDLED:
            _HANDLED[key] = cls._derive(endpoint_class, types)
        return _HANDLED[key]

    @classmethod
    def _derive(cls, endpoint: type, types: tuple[MessageType, ...]) -> "Accepts":
        kinds = {message.KIND for message in types}
        stray = sorted(name for name in dir(endpoint)
                       if name.startswith("on_") and name[3:] not in kinds)
        if stray:
            raise TypeError(f"{endpoint.__name__} has handlers for no message it may receive: {stray}; "
                            f"the kinds it may receive are {sorted(kinds)}")
        return cls(*(message for message in types if callable(getattr(endpoint, "on_" + message.KIND, None))))

    @staticmethod
    def dispatch(endpoint: object, message: Any, fds: list[int]) -> Any:
        """Call the endpoint's handler for this message: ``on_<kind>(message, fds)``."""
        return getattr(endpoint, "on_" + message.KIND)(message, fds)

    def receive(self, channel: Channel, timeout: float | None = None) -> tuple[Any, list[int]]:
        """The next message as its dataclass, with the descriptors it carried: ``(message, fds)``.

        ``(None, [])`` when ``timeout`` passes first; ChannelClosed when the
        peer is gone; ProtocolError for a kind or payload this end does not know.
        """
        raw = channel.recv(timeout)
        if raw is None:
            return None, []
        cls = self.types.get(raw.kind)
        if cls is None:
            for fd in raw.fds:
                close_fd(fd)
            raise ProtocolError(f"unexpected message {raw.kind!r}; this end accepts {', '.join(self.types)}")
        try:
            return cls(**raw.payload), raw.fds
        except TypeError as exc:
            raise ProtocolError(f"message {raw.kind!r} with payload keys {sorted(raw.payload)}: {exc}") from None


def _wait_readable(sock: socket.socket, timeout: float) -> bool:
    while True:
        try:
            readable, _, _ = select.select([sock], [], [], timeout)
            return bool(readable)
        except InterruptedError:  # pragma: no cover - PEP 475 retries for us
            continue


def describe_status(status: int | None) -> str:
    """'signal 11 (SIGSEGV)' or 'exit status 3', as a crash report says it."""
    if status is None:
        return "an unknown status (its zygote could not report it)"
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = "unknown signal"
        return f"signal {number} ({name})"
    if os.WIFEXITED(status):
        return f"exit status {os.WEXITSTATUS(status)}"
    return f"wait status {status}"
