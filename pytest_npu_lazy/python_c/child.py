"""A run_python child: turn a fresh fork of the zygote into the ``python -c CODE`` it stands in for.

Everything a fork inherits from the zygote that ``python -c`` would not have
is put back here, before the code runs: its working directory, descriptors
0, 1 and 2 (the caller's pipes) and no other, ``os.environ`` exactly the
call's ``env``, ``sys.argv == ["-c"]``, the standard streams built the way
the interpreter builds them at start-up, a fresh ``__main__``, and
``sys.modules`` cut back to what the preload loaded (the zygote's own
modules go). What cannot be put back (the preload already ran, the hash
seed is the zygote's) is the documented price of a zygote.

When the child cannot run the code (its ``cwd`` does not exist, a file
there would shadow a preloaded module, or this module failed), it writes a
:class:`~.messages.SetupOutcome` to its set-up pipe and exits; the caller
then raises what subprocess would, or runs the call as a real subprocess.

Runs in zygotes only: standard library only.
"""

from __future__ import annotations

import io
import os
import signal
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any

from ..forks.processes import die_with_parent, libc
from .messages import RunCode, SetupOutcome

_STREAMS = ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w"))


@dataclass
class ChildContext:
    """What the zygote knew right after its preload, which every child is reset to."""

    main: dict  # __main__'s namespace as `python -c` starts with it
    modules: frozenset  # names in sys.modules after the preload
    finders: frozenset  # keys of sys.path_importer_cache after the preload
    path: list  # sys.path after the preload
    source_cached: bool  # this Python puts the -c source in linecache under "<string>" (3.13+)
    shadowable: dict  # top-level module the preload loaded from a file -> the directory it came from
    suffixes: tuple  # file suffixes the import system tries, for the shadowing check
    signals: dict = field(default_factory=dict)  # dispositions the zygote changes, as they were
    in_child = False  # class attribute: set in a forked child, read by zygote.finish

    @classmethod
    def capture(cls, main: dict, state: dict) -> "ChildContext":
        from importlib.machinery import all_suffixes

        libc()  # loaded once here, not in every child
        startup = set(state["startup"])
        shadowable = {}
        for name in state["modules"]:
            module = sys.modules.get(name)
            origin = getattr(module, "__file__", None)
            if "." in name or name in startup or not origin:
                continue
            directory = os.path.dirname(origin)
            if getattr(module, "__path__", None) is not None:  # a package: its directory is the name
                directory = os.path.dirname(directory)
            shadowable[name] = directory
        return cls(main=main, modules=frozenset(state["modules"]), finders=frozenset(state["finders"]),
                   path=list(state["path"]), source_cached=_caches_source(), shadowable=shadowable,
                   suffixes=tuple(all_suffixes()), signals={signal.SIGTERM: signal.getsignal(signal.SIGTERM)})

    def shadowed_here(self) -> list[str]:
        """Files in the working directory that `python -c` (sys.path[0] == '') would import instead."""
        if "" not in self.path or not self.shadowable:
            return []
        found = []
        for entry in sorted(os.listdir(".")):
            name = self._module_name(entry)
            directory = self.shadowable.get(name) if name else None
            if directory is not None and not _same_directory(directory, "."):
                found.append(entry)
        return found

    def _module_name(self, entry: str) -> str | None:
        for suffix in self.suffixes:
            if entry.endswith(suffix):
                return entry[: -len(suffix)]
        if any(os.path.exists(os.path.join(entry, "__init__" + s)) for s in self.suffixes):
            return entry  # a regular package; a directory without __init__ never shadows
        return None


def _caches_source() -> bool:
    """Whether `python -c` registered its source in linecache (3.13+ does, to show it in tracebacks)."""
    linecache = sys.modules.get("linecache")
    entry = getattr(linecache, "cache", {}).get("<string>")
    argv = getattr(sys, "orig_argv", [])
    return bool(entry) and len(argv) > 2 and entry == _source_entry(argv[2])


def _source_entry(code: str) -> tuple:
    source = code + "\n"
    return (len(source), None, [line + "\n" for line in source.splitlines()], "<string>")


def _same_directory(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def become(run: RunCode, fds: dict[str, int], setup: int, context: ChildContext, sockets: list) -> tuple[Any, dict]:
    """In a freshly forked child: reset, then return (compiled code, __main__ namespace), or exit."""
    ChildContext.in_child = True
    try:
        _leave_zygote(sockets, context)
        try:
            os.fchdir(fds["cwd"])
            if run.cwd is not None:
                os.chdir(run.cwd)
        except OSError as exc:  # subprocess raises this in the caller, naming cwd
            _give_up(setup, SetupOutcome(start_errno=exc.errno))
        shadowed = context.shadowed_here()
        if shadowed:
            _give_up(setup, SetupOutcome(shadowed=shadowed))
        _take_descriptors(fds, setup)
        namespace = _reset_interpreter(run, context)
    except BaseException:
        _give_up(setup, SetupOutcome(internal_error=traceback.format_exc()))
    os.close(setup)
    return _compile(run.code, context), namespace


def _give_up(setup: int, outcome: SetupOutcome) -> None:
    os.write(setup, outcome.to_json())
    os._exit(255)


def _leave_zygote(sockets: list, context: ChildContext) -> None:
    os.setpgid(0, 0)  # killing the group on timeout ends what the code started, too
    for sock in sockets:
        sock.detach()  # their descriptors are closed below; the objects must never close a reused number
    die_with_parent()  # the zygote killed by SIGKILL cannot clean up: its children go with it
    for number, handler in context.signals.items():
        signal.signal(number, handler)


def _take_descriptors(fds: dict[str, int], keep: int) -> None:
    """0, 1, 2 become the caller's stdin and pipes; everything else closes (subprocess's close_fds)."""
    if "stdin" in fds:
        os.dup2(fds["stdin"], 0)
    else:
        os.close(0)  # the caller's own stdin was closed
    os.dup2(fds["stdout"], 1)
    os.dup2(fds["stderr"], 2)
    os.closerange(3, keep)
    os.closerange(keep + 1, _max_fd())


def _max_fd() -> int:
    try:
        return max(os.sysconf("SC_OPEN_MAX"), 256)
    except (ValueError, OSError):  # pragma: no cover
        return 65536


def _reset_interpreter(run: RunCode, context: ChildContext) -> dict:
    os.environ.clear()
    os.environ.update(run.env)
    sys.argv = ["-c"]
    if hasattr(sys, "orig_argv"):
        sys.orig_argv = [run.argv0, "-c", run.code]
    _make_streams()
    main = type(sys)("__main__")
    main.__dict__.update(context.main)
    if "__annotations__" in context.main:
        main.__annotations__ = {}
    _forget_modules(context)
    sys.modules["__main__"] = main
    if context.source_cached:
        sys.modules["linecache"].cache["<string>"] = _source_entry(run.code)
    _reseed()
    return main.__dict__


def _make_streams() -> None:
    """sys.stdin/stdout/stderr as the interpreter's start-up makes them for these descriptors.

    The zygote's own objects describe its descriptors, not the caller's pipes:
    TextIOWrapper fixes seekable() and line buffering when it is made.
    """
    unbuffered = bool(getattr(sys.__stdout__, "write_through", False))  # -u or PYTHONUNBUFFERED
    for fd, name, mode in _STREAMS:
        old = getattr(sys, f"__{name}__")
        try:
            os.fstat(fd)
        except OSError:
            stream = None  # the interpreter leaves a stream it cannot open as None
        else:
            buffering = 0 if unbuffered and mode == "w" else -1
            buffer: Any = io.open(fd, mode + "b", buffering=buffering, closefd=False)  # a FileIO or a Buffered*
            raw = buffer.raw if buffering else buffer
            raw.name = f"<{name}>"
            line_buffering = not unbuffered and (raw.isatty() or fd == 2)
            stream = io.TextIOWrapper(buffer, encoding=getattr(old, "encoding", None),
                                      errors=getattr(old, "errors", None), newline="\n",
                                      line_buffering=line_buffering, write_through=unbuffered)
            stream.mode = mode  # type: ignore[misc]  # read-only in typeshed; TextIOWrapper keeps it in its __dict__
        setattr(sys, f"__{name}__", stream)
        setattr(sys, name, stream)


def _forget_modules(context: ChildContext) -> None:
    """Drop every module the zygote loaded after the preload (its own code), and the caches that name them."""
    for name in [n for n in sys.modules if n not in context.modules]:
        module = sys.modules.pop(name)
        parent, _, child = name.rpartition(".")
        if parent in sys.modules and getattr(sys.modules[parent], child, None) is module:
            delattr(sys.modules[parent], child)  # `import importlib; importlib.util` must fail as it would
    for key in [k for k in sys.path_importer_cache if k not in context.finders]:
        del sys.path_importer_cache[key]
    sys.path[:] = context.path
    for finder in sys.path_importer_cache.values():
        if finder is not None and hasattr(finder, "invalidate_caches"):
            finder.invalidate_caches()  # the directories may have changed since the preload listed them


def _reseed() -> None:
    """Generators seeded once per process at import would repeat the zygote's sequence in every child.

    ``random`` reseeds itself after a fork; numpy's legacy global generator does not.
    """
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None and hasattr(numpy_random, "seed"):
        numpy_random.seed()


def _compile(code: str, context: ChildContext):
    """Compile as `python -c` does: UTF-8, no coding cookie, no __future__ flags of ours."""
    try:
        code.encode("utf-8")
    except UnicodeEncodeError as exc:
        sys.stderr.write("Unable to decode the command from the command line:\n")
        show_exception(exc.with_traceback(None))
        raise SystemExit(1) from None
    try:
        return compile(code, "<string>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:  # a parse error has no frame in `python -c` either
        show_exception(exc.with_traceback(None))
        raise SystemExit(1) from None


def show_exception(exc: BaseException) -> None:
    """Print an uncaught exception as the interpreter's PyErr_Print does: through sys.excepthook."""
    sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, exc.__traceback__
    if sys.version_info >= (3, 12):
        sys.last_exc = exc
    hook = getattr(sys, "excepthook", None)
    if hook is None:
        sys.stderr.write("sys.excepthook is missing\n")
        sys.__excepthook__(type(exc), exc, exc.__traceback__)
        return
    try:
        hook(type(exc), exc, exc.__traceback__)
    except SystemExit:
        raise
    except BaseException as error:
        error = error.with_traceback(error.__traceback__.tb_next if error.__traceback__ else None)
        sys.stderr.write("Error in sys.excepthook:\n")
        sys.__excepthook__(type(error), error, error.__traceback__)
        sys.stderr.write("\nOriginal exception was:\n")
        sys.__excepthook__(type(exc), exc, exc.__traceback__)


def end(exc: BaseException | None) -> None:
    """End the child as `python -c` ends after its code, without tearing the interpreter down.

    CPython's own teardown would release every object the zygote's preload
    made, writing to each page of its heap (over a second once torch is
    loaded, copy-on-write). What a program can observe of the teardown is
    done here in CPython's order: the uncaught exception or SystemExit text,
    non-daemon threads joined, atexit handlers, stdout flushed (120 when
    that fails), __main__'s globals released (closing files they hold) and
    a garbage collection; then the process exits, with SIGINT after an
    uncaught KeyboardInterrupt as CPython does.
    """
    code, interrupted = 0, False
    try:
        if isinstance(exc, SystemExit):
            code = _exit_code(exc)
        elif exc is not None:
            tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None  # without boot.py's frame
            code, interrupted = 1, isinstance(exc, KeyboardInterrupt)
            show_exception(exc.with_traceback(tb))
    except SystemExit as hook_exit:  # sys.excepthook itself raised SystemExit
        code, interrupted = _exit_code(hook_exit), False
    threading = sys.modules.get("threading")
    if threading is not None:
        threading._shutdown()
    import atexit
    import gc

    atexit._run_exitfuncs()
    if not _flush_std_files():
        code = 120
    main = sys.modules.get("__main__")
    if main is not None:
        _clear_namespace(vars(main))
    gc.collect()
    if not _flush_std_files():
        code = 120
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


def _exit_code(exc: SystemExit) -> int:
    """CPython's handling of an uncaught SystemExit: its int code, else its text on stderr and 1."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        if not -(1 << 63) <= code < 1 << 63:
            return -1  # PyLong_AsLong overflows
        return ((code + (1 << 31)) % (1 << 32)) - (1 << 31)  # the C int it is cast to
    stderr = sys.stderr
    if stderr is not None:
        try:
            stderr.write(str(code) + "\n")
        except Exception:
            pass
    return 1


def _flush_std_files() -> bool:
    """Flush stdout (a failure is reported and makes the exit status 120) and stderr, as CPython's exit does."""
    ok = True
    stdout = sys.stdout
    if stdout is not None and not getattr(stdout, "closed", False):
        try:
            stdout.flush()
        except Exception as error:
            ok = False
            _unraisable(stdout, error)
    stderr = sys.stderr
    if stderr is not None and not getattr(stderr, "closed", False):
        try:
            stderr.flush()
        except Exception:
            pass
    return ok


def _unraisable(obj: Any, error: BaseException) -> None:
    try:
        sys.stderr.write(f"Exception ignored in: {obj!r}\n")
        sys.stderr.write("".join(traceback.format_exception_only(type(error), error)))
        sys.stderr.flush()
    except Exception:
        pass


def _clear_namespace(namespace: dict) -> None:
    """CPython's _PyModule_ClearDict: '_x' names to None first, then every name but __builtins__."""
    for key, value in list(namespace.items()):
        if value is not None and isinstance(key, str) and key[:1] == "_" and key[1:2] != "_":
            namespace[key] = None
    for key, value in list(namespace.items()):
        if value is not None and isinstance(key, str) and key != "__builtins__":
            namespace[key] = None
