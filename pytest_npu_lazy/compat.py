"""Every use of pytest's internals, in one place.

An isolated test must look to pytest and its plugins exactly like an
in-process one, and a few of the things that takes have no public API: the
session's setup state, the capture manager's global capture, the base
temporary directory, the terminal reporter's writer, the JUnit XML object,
pytest's parsing of collection arguments and its warning filters. Nothing else in this package
imports ``_pytest`` or touches a private attribute of a pytest object
(test/plugin/test_compat.py checks that); where pytest has a public
equivalent (``pytest.TestReport``, ``pytest.exit.Exception``,
``config.get_terminal_writer()``), the package uses that instead.

Each function says which pytest releases it was checked against (the
plugin's tests on pytest 8.0.0 and 9.2.0; the ``pytest(oldest)`` and
``pytest(newest)`` sessions of noxfile.py run the ends of the range
pyproject.toml declares). A new
pytest release that changes one of these fails those sessions here, not in
every caller.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

#: the pytest releases the functions below were checked against
CHECKED = ("8.0.0", "9.2.0")


def teardown_exact(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Tear down the fixtures and nodes ``nextitem`` does not share, as ``runtestprotocol`` would.

    An isolated test runs its own protocol in the child; the pytest process
    still set up the session- and module-level nodes (through the collector
    chain), so it must tear down what ``nextitem`` leaves. Public API has no
    way to reach the session's ``SetupState``. Checked: pytest 8.0.0-9.2.0
    (``Session._setupstate.teardown_exact(nextitem)``).
    """
    item.session._setupstate.teardown_exact(nextitem)


def restart_global_capture(config: pytest.Config) -> list[int]:
    """Stop the inherited global capture and start a fresh one of the same method; its (out, err) fds.

    A forked child holds the pytest process's capture files: its output must
    go to files of its own that the pytest process can read. pytest offers no
    public way to replace the capture manager's global capture. Returns
    ``[-1, -1]`` without global capture (``-s``), and ``-1`` for a stream
    not captured by file descriptor. Checked: pytest 8.0.0-9.2.0
    (``CaptureManager._global_capturing`` and ``_method``,
    ``MultiCapture._state``, ``_pytest.capture._get_multicapture``,
    ``FDCapture.tmpfile``).
    """
    from _pytest.capture import FDCapture, _get_multicapture

    capman = config.pluginmanager.get_plugin("capturemanager")
    if capman is None or capman._global_capturing is None:
        return [-1, -1]
    inherited = capman._global_capturing
    if inherited._state != "stopped":
        inherited.stop_capturing()
    capturing = _get_multicapture(capman._method)
    capturing.start_capturing()
    capturing.suspend_capturing()
    capman._global_capturing = capturing
    return [c.tmpfile.fileno() if isinstance(c, FDCapture) else -1 for c in (capturing.out, capturing.err)]


def session_basetemp(config: pytest.Config) -> str | None:
    """The session's base temporary directory (created now, as on first ``tmp_path``), or None without tmpdir.

    The ``tmp_path_factory`` fixture is the public way, but fixtures cannot
    be requested from a hook. Checked: pytest 8.0.0-9.2.0
    (``Config._tmp_path_factory``, set by the tmpdir plugin at configure).
    """
    factory = getattr(config, "_tmp_path_factory", None)
    return None if factory is None else str(factory.getbasetemp())


def adopt_basetemp(config: pytest.Config, basetemp: str | None) -> None:
    """In a child: use the session's base temporary directory instead of choosing (and clearing) one.

    Checked: pytest 8.0.0-9.2.0 (``TempPathFactory._basetemp``, which
    ``getbasetemp()`` returns once set).
    """
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is not None and basetemp is not None:
        factory._basetemp = Path(basetemp)


def redirect_terminal_writer(reporter: Any, file: Any) -> None:
    """Make the terminal reporter write to ``file`` (a text file), keeping markup, highlighting and width.

    A child's writes (live logs, ``--setup-show``, pytest-timeout's dump)
    must reach the pytest process; the reporter's writer cannot be replaced
    through public API, nor can ``TerminalWriter`` be imported from
    ``pytest``. Checked: pytest 8.0.0-9.2.0 (``TerminalReporter._tw``,
    ``_pytest._io.TerminalWriter``).
    """
    from _pytest._io import TerminalWriter

    inherited = reporter._tw
    writer = TerminalWriter(file)
    writer.hasmarkup, writer.code_highlight = inherited.hasmarkup, inherited.code_highlight
    writer.fullwidth = inherited.fullwidth
    reporter._tw = writer


def add_lowest_warning_filter(config: pytest.Config, line: str) -> None:
    """Put ``line`` first among the ``filterwarnings`` ini lines, where every other filter overrides it.

    pytest applies the ini lines in order (a later one wins), then ``-W``,
    then ``@pytest.mark.filterwarnings``; ``config.addinivalue_line`` would
    append, beating the user's own ``filterwarnings = error``. There is no
    public way to prepend: this changes the list ``getini`` caches, as
    ``addinivalue_line`` itself does. Checked: pytest 8.0.0-9.2.0
    (``Config.getini`` returns the cached list; ``Config.addinivalue_line``
    appends to it).
    """
    lines = config.getini("filterwarnings")
    assert isinstance(lines, list)
    lines.insert(0, line)


@contextlib.contextmanager
def warning_filters_of(config: pytest.Config) -> Iterator[None]:
    """The ``filterwarnings`` and ``-W`` filters in force, as during a test, for what runs inside (a zygote's
    preload: a warning the plugin hides, with its reason in the header, is hidden there too, instead of being
    printed and reported as the preload's output). Checked: pytest 8.0.0-9.2.0
    (``_pytest.config.apply_warning_filters``)."""
    import warnings

    from _pytest.config import apply_warning_filters

    with warnings.catch_warnings():
        apply_warning_filters(config.getini("filterwarnings"), config.known_args_namespace.pythonwarnings or [])
        yield


def warm_warning_filters(config: pytest.Config) -> None:
    """Parse and compile the ``filterwarnings`` and ``-W`` filters once, in a process about to fork test children.

    pytest applies them again for every test (``_pytest.config.apply_warning_filters``, checked on
    8.0.0 and 9.2.0), compiling each pattern: in a forked child that dies after one test, every
    compilation is a miss of ``re``'s cache, a millisecond per test. Done once before the fork, the
    children find them cached.
    """
    with warning_filters_of(config):
        pass


def filter_warning(config: pytest.Config, message: Warning, filename: str) -> list:
    """``message`` as pytest would record it during a test: through ``filterwarnings`` and ``-W``.

    Returns the ``warnings.WarningMessage`` to record (none when a filter
    ignores it; one when a filter makes it an error: it belongs to no test
    that could fail, so it is shown). The plugin's own warnings (what a
    zygote's preload printed) get the user's filters this way; pytest
    applies them only around its own hooks and has no public function for
    them. Checked: pytest 8.0.0-9.2.0
    (``_pytest.config.apply_warning_filters``,
    ``Config.known_args_namespace.pythonwarnings``).
    """
    import warnings

    from _pytest.config import apply_warning_filters

    category = type(message)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        apply_warning_filters(config.getini("filterwarnings"), config.known_args_namespace.pythonwarnings or [])
        try:
            warnings.warn_explicit(message, category, filename, 0, module=filename, registry={})
        except Warning:
            return [warnings.WarningMessage(message, category, filename, 0)]
    return list(caught)


def junit_xml(config: pytest.Config) -> Any:
    """The ``--junitxml`` writer (``LogXML``) of this run, or None.

    Isolated tests' ``record_xml_attribute`` and ``record_testsuite_property``
    must reach it, and its node reporters are not public. Checked: pytest
    8.0.0-9.2.0 (``_pytest.junitxml.xml_key``; ``LogXML.node_reporters_ordered``,
    ``global_properties``, ``node_reporter()``, ``add_global_property()``).
    """
    from _pytest.junitxml import xml_key

    return config.stash.get(xml_key, None)


def patch_resolve_collection_argument(
        make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Callable[[], None]:
    """Replace pytest's parsing of collection arguments by ``make(original)``; returns the undo.

    A node id is not always an argument pytest can parse back (a directory
    ``case[1]``, a parametrization id with ``::``), so a child makes pytest
    collect exactly the names it was sent. Checked: pytest 8.0.0-9.2.0
    (``_pytest.main.resolve_collection_argument``: it returns a ``(path, names)``
    tuple in 8.0.0 and a ``CollectionArgument`` dataclass with
    ``parametrization`` in 9.2.0; the caller handles both shapes).
    """
    import _pytest.main as main

    original = main.resolve_collection_argument
    main.resolve_collection_argument = make(original)

    def undo() -> None:
        main.resolve_collection_argument = original

    return undo


def read_stdin_under_capture(config: pytest.Config) -> str:
    """All of standard input, read while pytest's global capture holds it: the capture manager's
    ``suspend_global_capture(in_=True)``, as pytest's own debugger uses it, gives the real stdin back."""
    import sys

    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is None:
        return sys.stdin.read()
    capman.suspend_global_capture(in_=True)
    try:
        return sys.stdin.read()
    finally:
        capman.resume_global_capture()


def xdist_queued_items(config: pytest.Config) -> list[pytest.Item] | None:
    """The items an xdist worker was sent and has not started yet, in the order it will run them; None outside a
    worker, or where pytest-xdist keeps them otherwise.

    A worker runs the item it holds with the next one it was sent as ``nextitem``; the rest wait in its
    ``WorkerInteractor.torun``, a ``TestQueue`` of indices into ``session.items`` that ``lock()`` yields under
    its lock (ending with a shutdown marker, which is not an index). Checked: pytest-xdist 3.5.0-3.8.0.
    """
    interactor = next((plugin for plugin in config.pluginmanager.get_plugins()
                       if type(plugin).__name__ == "WorkerInteractor"), None)
    queue, session = getattr(interactor, "torun", None), getattr(interactor, "session", None)
    if queue is None or session is None or not hasattr(queue, "lock"):
        return None
    items = session.items
    try:
        with queue.lock() as queued:
            indices = [index for index in queued if isinstance(index, int)]
    except (AttributeError, TypeError):  # another pytest-xdist's queue: the worker plans nothing ahead, as before
        return None
    return [items[index] for index in indices if 0 <= index < len(items)]


def skips_hidden_by_pytest(terminalreporter: Any) -> bool:
    """Whether pytest's own end of run leaves skip reasons out while a short summary is wanted: ``-r`` without
    ``s``/``S`` (``a``/``A`` expanded by ``getreportopt``, kept as ``TerminalReporter.reportchars``), neither
    ``-rN`` (no short summary: nothing left but the ``w`` that ``getreportopt`` adds for warnings) nor
    ``--no-summary`` (pytest 8.0-9.2)."""
    chars = getattr(terminalreporter, "reportchars", None)
    if chars is None or getattr(terminalreporter.config.option, "no_summary", False):
        return False
    return chars.replace("w", "") != "" and "s" not in chars and "S" not in chars
