"""``run_python``: ``subprocess.run([sys.executable, "-c", code], ...)`` at the cost of a fork.

The caller's side of one call: check the arguments, find a zygote
(:mod:`pytest_npu_lazy.python_c.pool`), hand it the code with the caller's pipes
and working directory, then do what ``subprocess.run(..., capture_output=True,
text=True)`` does: feed ``input``, collect both streams until they close,
wait for the exit status, enforce ``timeout`` by killing the child's
process group, and decode the output the way a text-mode Popen does.

Outside a pytest session with this plugin, or when a zygote cannot serve a
call (its preload fails to import, a file in ``cwd`` would shadow a
preloaded module), the call *is* ``subprocess.run``, so results never
depend on whether the fast path was taken.
"""

from __future__ import annotations

import io
import os
import selectors
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Callable, Sequence, cast

from .env import inherited, relative_pythonpath
from .pool import Zygote, active, error_for_dead
from . import messages
from ..errors import RunPythonError
from ..forks.channel import Channel, ChannelClosed
from ..forks.processes import close_fd as _close

#: how long a killed child may take to be reported reaped
KILL_WAIT = 10.0
_CHUNK = 1 << 16


#: told each call's argv before it runs: a selection map marks the test as running code it cannot see into
CALL_OBSERVERS: list[Callable[[list[str]], None]] = []


def run_python(code: str, *, env: Mapping[str, str] | None = None, timeout: float | None = None,
               preload: Sequence[str] = (), cwd=None, input: str | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` as ``python -c code`` would, in a child forked from a zygote that imported ``preload``.

    Same result as ``subprocess.run([sys.executable, "-c", code], capture_output=True,
    text=True, env=env, timeout=timeout, cwd=cwd, input=input)``: a CompletedProcess
    with ``str`` stdout and stderr, or ``subprocess.TimeoutExpired``. ``preload`` lists
    modules the zygote imports once, under ``env``; choose only modules the code itself
    imports first, and whose import the code does not inspect (see the README).
    """
    preload = _checked(code, env, timeout, preload, cwd, input)
    args = [sys.executable, "-c", code]
    for observe in CALL_OBSERVERS:
        observe(args)
    zygotes = active()
    if zygotes is None:
        return _subprocess(args, env, timeout, cwd, input)
    call_env = inherited() if env is None else dict(env)
    if call_env.get("PYTHONINSPECT"):  # `python -c` would then read more code from stdin when done
        return _subprocess(args, env, timeout, cwd, input)
    try:
        here = os.getcwd()
        directory = here if cwd is None else os.path.join(here, os.fsdecode(cwd))
    except OSError:  # the caller's directory was removed: only a real subprocess can start there
        return _subprocess(args, env, timeout, cwd, input)
    if not os.path.isdir(directory):  # the child's chdir fails as subprocess's would; a zygote starts here
        if relative_pythonpath(call_env):
            return _subprocess(args, env, timeout, cwd, input)
        directory = here
    zygote = zygotes.zygote(preload, call_env, directory)
    if zygote is None:
        return _subprocess(args, env, timeout, cwd, input)
    call = _CallerCall(zygote, args, call_env, cwd, input, timeout)
    outcome = call.run()
    if outcome.shadowed:
        zygotes.warn(f"run_python: {', '.join(outcome.shadowed)} in {directory} would shadow modules the zygote "
                  f"preloaded ({list(preload)}), as `python -c` imports from its working directory first; "
                  "such calls run as plain subprocesses.", stacklevel=3)
        return _subprocess(args, env, timeout, cwd, input)
    if outcome.unsent:  # the zygote was gone before it got the call: nothing ran, a subprocess runs it
        zygotes.forget(zygote)
        return _subprocess(args, env, timeout, cwd, input)
    if outcome.zygote_died:
        zygotes.forget(zygote)
        raise error_for_dead(zygote)
    return outcome.result


def _subprocess(args, env, timeout, cwd, input) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd, input=input)


def _checked(code, env, timeout, preload, cwd, input) -> tuple[str, ...]:
    """Reject what run_python cannot run, naming the argument and the fix; returns preload as a tuple."""
    if not isinstance(code, str):
        hint = " (decode it first: code.decode())" if isinstance(code, (bytes, bytearray)) else ""
        raise TypeError(f"run_python(code): code must be a str of Python source, not {type(code).__name__}{hint}")
    if "\0" in code:
        raise ValueError("run_python(code): code contains a NUL character ('\\0'), which no command line can "
                         "carry; subprocess.run would fail the same way (embedded null byte). Remove it.")
    os.fsencode(code)  # what cannot be encoded fails here exactly as in subprocess.run
    if isinstance(preload, (str, bytes)) or not isinstance(preload, (list, tuple)):
        example = f"[{preload!r}]" if isinstance(preload, str) else "['torch']"
        raise TypeError(f"run_python(preload=...): preload must be a list of module names such as {example}, "
                        f"not {type(preload).__name__} {preload!r}")
    for name in preload:
        if not isinstance(name, str) or not name or not all(part.isidentifier() for part in name.split(".")):
            raise ValueError(f"run_python(preload=...): {name!r} is not a module name; preload lists importable "
                             "names such as 'torch' or 'torch.nn'")
    if env is not None:
        _check_env(env)
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))):
        raise TypeError(f"run_python(timeout=...): timeout must be a number of seconds or None, not "
                        f"{type(timeout).__name__} {timeout!r}")
    if cwd is not None and not isinstance(cwd, (str, bytes, os.PathLike)):
        raise TypeError(f"run_python(cwd=...): cwd must be a path (str, bytes or os.PathLike) or None, not "
                        f"{type(cwd).__name__} {cwd!r}")
    if input is not None and not isinstance(input, str):
        hint = " (decode it first: input.decode())" if isinstance(input, (bytes, bytearray)) else ""
        raise TypeError(f"run_python(input=...): input must be a str, as with subprocess.run(..., text=True), not "
                        f"{type(input).__name__}{hint}")
    return tuple(preload)


def _check_env(env) -> None:
    if not isinstance(env, Mapping):
        raise TypeError(f"run_python(env=...): env must be a mapping of str to str (such as a copy of "
                        f"os.environ) or None, not {type(env).__name__}")
    for key, value in env.items():
        if not isinstance(key, str):
            raise TypeError(f"run_python(env=...): every name must be a str; {key!r} is {type(key).__name__}")
        if not isinstance(value, str):
            raise TypeError(f"run_python(env=...): env[{key!r}] is {type(value).__name__} {value!r}, but "
                            f"environment values are strings; write env[{key!r}] = {str(value)!r}")
        if not key or "=" in key or "\0" in key:
            raise ValueError(f"run_python(env=...): {key!r} is not a valid environment variable name "
                             "(empty, or containing '=' or NUL)")
        if "\0" in value:
            raise ValueError(f"run_python(env=...): env[{key!r}] contains a NUL character, which no environment "
                             "can carry")


class _Outcome:
    """How a call through a zygote ended: its result, or why the caller must do something else."""

    def __init__(self, result=None, shadowed=(), zygote_died=False, unsent=False) -> None:
        self.result = result
        self.shadowed = list(shadowed)
        self.zygote_died = zygote_died
        self.unsent = unsent


def _text_encoding() -> str:
    """The encoding a text-mode Popen decodes its pipes with (the locale's, or UTF-8 in UTF-8 mode)."""
    return io.TextIOWrapper(io.BytesIO()).encoding


def _text(data: bytes, encoding: str) -> str:
    """Popen's _translate_newlines: decode strictly, then universal newlines."""
    return data.decode(encoding).replace("\r\n", "\n").replace("\r", "\n")


class _CallerCall:
    """One call from request to exit status, as the caller sees it: the communicate loop of subprocess.run
    (the zygote's record of the same call is :class:`~.zygote._ZygoteCall`)."""

    def __init__(self, zygote: Zygote, args: list[str], env: dict[str, str], cwd, input: str | None,
                 timeout: float | None) -> None:
        self.zygote = zygote
        self.args = args
        self.env = env
        self.cwd = cwd
        self.timeout = timeout
        self.encoding = _text_encoding()
        self.input = None if input is None else memoryview(input.encode(self.encoding))
        self.output = {"stdout": [zygote.replay[0]] if zygote.replay[0] else [],
                       "stderr": [zygote.replay[1]] if zygote.replay[1] else []}
        self.exited: messages.Exited | None = None
        self.zygote_gone = False

    def run(self) -> _Outcome:
        own: list[int] = []  # descriptors this side reads or writes, closed at the end
        theirs: list[int] = []  # descriptors that travel to the child, closed once sent
        call_end = None
        try:
            out_read, out_write = os.pipe()
            err_read, err_write = os.pipe()
            own += [out_read, err_read]
            theirs += [out_write, err_write]
            stdin_read: int | None
            stdin_write: int | None
            if self.input is not None:
                stdin_read, stdin_write = os.pipe()
                own.append(stdin_write)
                theirs.append(stdin_read)
            else:
                stdin_read = stdin_write = None
            theirs.append(os.open(".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)))
            ours, call_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            channel = Channel(ours)
            stdin = stdin_read if stdin_read is not None else (0 if _valid_fd(0) else None)
            fds = [call_end.fileno(), theirs[-1], out_write, err_write] + ([stdin] if stdin is not None else [])
            run = messages.RunCode(self.args[2], self.zygote.environ_for(self.env), None if self.cwd is None else os.fsdecode(self.cwd),
                               sys.executable, stdin is not None)
            try:
                self.zygote.send(run, fds)
            except OSError:
                channel.close()
                return _Outcome(unsent=True)
            finally:
                call_end.close()
                while theirs:
                    _close(theirs.pop())
            return self._communicate(channel, out_read, err_read, stdin_write, own)
        finally:
            if call_end is not None:
                call_end.close()
            for fd in own + theirs:
                _close(fd)

    def _communicate(self, channel: Channel, out_read: int, err_read: int, stdin_write: int | None,
                     own: list[int]) -> _Outcome:
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        selector = selectors.DefaultSelector()
        try:
            selector.register(out_read, selectors.EVENT_READ, "stdout")
            selector.register(err_read, selectors.EVENT_READ, "stderr")
            selector.register(channel.sock, selectors.EVENT_READ, "call")
            if stdin_write is not None:
                if self.input:
                    selector.register(stdin_write, selectors.EVENT_WRITE, "stdin")
                else:
                    _close(stdin_write)
                    own.remove(stdin_write)
            try:
                while self.exited is None or any(key.data != "call" for key in selector.get_map().values()):
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining < 0:
                        self._kill(channel)  # a deadline, so a timeout: cast tells mypy
                        raise subprocess.TimeoutExpired(self.args, cast(float, self.timeout), output=self._so_far("stdout"),
                                                        stderr=self._so_far("stderr"))
                    for key, _ in selector.select(remaining):
                        self._ready(key, selector, channel, own)
                    if self.zygote_gone:
                        return _Outcome(zygote_died=True)
            except BaseException:
                if self.exited is None and not self.zygote_gone:
                    self._kill(channel)
                raise
        finally:
            selector.close()
            channel.close()
        return self._finished()

    def _ready(self, key, selector, channel: Channel, own: list[int]) -> None:
        if key.data == "stdin":
            assert self.input is not None, "stdin is watched only with input to write"
            try:
                written = os.write(key.fd, self.input[:512])
                self.input = self.input[written:]
            except BrokenPipeError:  # the code stopped reading: subprocess ignores this too
                self.input = self.input[:0]
            if not self.input:
                selector.unregister(key.fd)
                _close(key.fd)
                own.remove(key.fd)
        elif key.data == "call":
            self._from_zygote(channel, selector)
        else:
            data = os.read(key.fd, _CHUNK)
            if data:
                self.output[key.data].append(data)
            else:
                selector.unregister(key.fd)

    def _from_zygote(self, channel: Channel, selector) -> None:
        while True:
            try:
                message, _ = messages.FROM_CALL.receive(channel, timeout=0)
            except ChannelClosed:
                selector.unregister(channel.sock)
                if self.exited is None:
                    self.zygote_gone = True
                return
            if message is None:
                return
            self.exited = message  # Exited: all a call's socket carries from the zygote

    def _kill(self, channel: Channel) -> None:
        """Have the zygote kill the child's group, then wait until it reports the child reaped."""
        try:
            messages.send(channel, messages.Kill())
        except OSError:
            return
        deadline = time.monotonic() + KILL_WAIT
        while self.exited is None and time.monotonic() < deadline:
            try:
                message, _ = messages.FROM_CALL.receive(channel, timeout=deadline - time.monotonic())
            except ChannelClosed:
                return
            if message is not None:  # Exited: all a call's socket carries from the zygote
                self.exited = message

    def _so_far(self, name: str) -> bytes | None:
        chunks = self.output[name]
        return b"".join(chunks) if chunks else None

    def _finished(self) -> _Outcome:
        exited = self.exited
        assert exited is not None, "_communicate's loop ends once the call's Exited came"
        outcome = exited.outcome
        if outcome is not None and outcome.start_errno is not None:
            raise OSError(outcome.start_errno, os.strerror(outcome.start_errno), self.cwd)
        if outcome is not None and outcome.shadowed:
            return _Outcome(shadowed=outcome.shadowed)
        if outcome is not None and outcome.internal_error:
            raise RunPythonError("run_python failed inside the child before the code ran (please report this):\n"
                                 + outcome.internal_error)
        stdout = _text(b"".join(self.output["stdout"]), self.encoding)
        stderr = _text(b"".join(self.output["stderr"]), self.encoding)
        returncode = os.waitstatus_to_exitcode(exited.status)
        return _Outcome(subprocess.CompletedProcess(self.args, returncode, stdout, stderr))


def _valid_fd(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True

