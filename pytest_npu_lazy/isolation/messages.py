"""Every message of isolation, in one place: the pytest process, the root zygote, zygotes and test children.

Each message is a frozen dataclass sent with :func:`pytest_npu_lazy.forks.channel.send`. A
receiving end that dispatches has one ``on_<kind>`` handler per kind it
accepts, and accepts exactly those (a server, the pool's view of a zygote,
a test's controller); one that waits for a fixed order names it
(:data:`CHILD_ACCEPTS`, :data:`FROM_ROOT`). Either gets the dataclass back,
or a ProtocolError for anything else. Payloads
are plain data (JSON); settings and targets travel as their ``to_dict()``
and are rebuilt with ``from_dict()``. Descriptors that travel with a
message are listed in its docstring.

Channels, by direction:

pytest -> root       :class:`StartZygote`, :class:`Shutdown`
root -> pytest       :class:`ZygoteStarted` (+1 fd: the zygote's channel), :class:`ChildExited` (a zygote)
pytest -> zygote     :class:`ForkChild`, :class:`StartModuleZygote`, :class:`Shutdown`
zygote -> pytest     :class:`TestZygoteReady`, :class:`ChildForked` (+1 fd: the child's channel),
                     :class:`ZygoteStarted` (a module zygote), :class:`ForkRefused`,
                     :class:`ChildExited` (a test child or a module zygote)

A module zygote (forked by a zygote; it imported and collected one test
module) speaks as a zygote does, and its children get :class:`Prepare` and
:class:`RunTest` too.
pytest -> child      :class:`Prepare` (the launcher sends it), then :class:`RunTest` (the controller)
child -> pytest      :class:`Files` (+n fds), :class:`Phase`, :class:`Report`, :class:`WarningRecorded`,
                     :class:`Terminal`, :class:`Junit`, :class:`NotRun`, :class:`InternalError`,
                     :class:`Interrupted`, then :class:`Finished`; one kept for the next test
                     (``Finished.kept``, the marker's ``share_process``) starts again at :class:`Files`

Standard library only: this module is imported in zygotes and children too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from ..forks.channel import Accepts
from ..forks.server import Shutdown  # every fork server's; the pytest process sends it

# -- the root zygote ------------------------------------------------------------

@dataclass(frozen=True)
class StartZygote:
    """Fork a zygote that imports this baseline (``Baseline.to_dict()``); ``key`` pairs the answer."""

    KIND: ClassVar[str] = "start_zygote"
    key: str
    baseline: dict


@dataclass(frozen=True)
class ZygoteStarted:
    """The zygote for ``key`` runs (it may still be importing); +1 fd: its channel."""

    KIND: ClassVar[str] = "zygote_started"
    key: str
    pid: int


@dataclass(frozen=True)
class ChildExited:
    """A process this server forked ended, with its ``os.waitpid`` status: a zygote (root) or a test child."""

    KIND: ClassVar[str] = "child_exited"
    pid: int
    status: int


# -- a zygote ---------------------------------------------------------------------

@dataclass(frozen=True)
class ForkChild:
    """Fork a spare test child now; it waits for its :class:`Prepare`."""

    KIND: ClassVar[str] = "fork_child"


@dataclass(frozen=True)
class StartModuleZygote:
    """Fork a module zygote: it applies these settings' blocks and tracking, imports and collects the
    module ``target`` names (``Target.to_dict()`` of the file, no names below it), then forks test
    children that find their test among its items; ``key`` pairs the ZygoteStarted answer."""

    KIND: ClassVar[str] = "start_module_zygote"
    key: str
    settings: dict
    target: dict


@dataclass(frozen=True)
class TestZygoteReady:
    """The preload (or a module zygote's collection) finished: its error (a traceback) or None, what it
    printed, and warnings for the user."""

    KIND: ClassVar[str] = "ready"
    pid: int
    error: Optional[str]
    output: str
    warnings: list


@dataclass(frozen=True)
class ChildForked:
    """A spare test child exists; +1 fd: its channel."""

    KIND: ClassVar[str] = "child_forked"
    pid: int


@dataclass(frozen=True)
class ForkRefused:
    """Forking now would hand the child a broken device runtime; ``reason`` says why and what to do."""

    KIND: ClassVar[str] = "fork_refused"
    reason: str


# -- a test child -------------------------------------------------------------------

@dataclass(frozen=True)
class Prepare:
    """Which test the child runs, with which settings: it collects the test and waits for :class:`RunTest`."""

    KIND: ClassVar[str] = "prepare"
    nodeid: str
    settings: dict  # TestSettings.to_dict()
    target: dict  # Target.to_dict()


@dataclass(frozen=True)
class RunTest:
    """Run the prepared test now; ``nodeid`` must be the prepared one."""

    KIND: ClassVar[str] = "run"
    nodeid: str


@dataclass(frozen=True)
class Files:
    """Files a crash report reads (``names``, in order): +1 fd each (the stack dump, the capture files)."""

    KIND: ClassVar[str] = "files"
    names: list


@dataclass(frozen=True)
class Phase:
    """A phase started (``duration`` None) or ended: what a crashed test's reports still show."""

    KIND: ClassVar[str] = "phase"
    name: str
    parent: Optional[str]
    start: float
    duration: Optional[float]


@dataclass(frozen=True)
class Report:
    """A test report, serialised by pytest itself (``pytest_report_to_serializable``)."""

    KIND: ClassVar[str] = "report"
    data: dict


@dataclass(frozen=True)
class WarningRecorded:
    """A warning the test raised, for ``pytest_warning_recorded`` in the pytest process."""

    KIND: ClassVar[str] = "warning"
    warning: dict  # message, category (the class's MRO as (module, name) pairs), filename, lineno
    when: str
    nodeid: str
    location: Optional[Any]


@dataclass(frozen=True)
class Terminal:
    """Text the test wrote through the terminal writer (live logs, --setup-show)."""

    KIND: ClassVar[str] = "terminal"
    text: str


@dataclass(frozen=True)
class Junit:
    """``record_xml_attribute`` and ``record_testsuite_property`` values, sent before the teardown report."""

    KIND: ClassVar[str] = "junit"
    attributes: list
    suite_properties: list


@dataclass(frozen=True)
class NotRun:
    """The test could not run (bad marker, not collected, preload failed): the text of its error report."""

    KIND: ClassVar[str] = "not_run"
    text: str
    error: bool


@dataclass(frozen=True)
class InternalError:
    """A traceback of this plugin's own code in the child, added to whatever report ends the test."""

    KIND: ClassVar[str] = "internal_error"
    text: str


@dataclass(frozen=True)
class Interrupted:
    """Ctrl-C (``KeyboardInterrupt``) or ``pytest.exit()`` (``Exit``) in the child, re-raised by the pytest process."""

    KIND: ClassVar[str] = "interrupted"
    exception: str
    message: str
    returncode: Optional[int]


@dataclass(frozen=True)
class Finished:
    """Everything is sent and saved; the pytest process may go on. ``kept``: the test passed under
    ``share_process``, and the child waits for the next such test of its module (its next messages are
    :class:`Files`, then whatever the next :class:`Prepare` asks); the pytest process closes it when none comes."""

    KIND: ClassVar[str] = "finished"
    kept: bool = False


# One list per direction (the table above): an endpoint that dispatches by kind accepts, of its direction's
# list, those it has ``on_<kind>`` handlers for (:meth:`~pytest_npu_lazy.forks.channel.Accepts.handled_by`), so a
# handler for a message that only travels the other way is refused when the endpoint is set up.
#: what the root zygote may be sent
TO_ROOT = (StartZygote, Shutdown)
#: what a zygote and a module zygote may be sent
TO_ZYGOTE = (ForkChild, StartModuleZygote, Shutdown)
#: what the pool's view of a zygote (or of the root) may receive
FROM_ZYGOTE = (TestZygoteReady, ChildForked, ZygoteStarted, ForkRefused, ChildExited)
#: what the controller of a test child may receive
FROM_CHILD = (Files, Phase, Report, WarningRecorded, Terminal, Junit, NotRun, InternalError, Interrupted, Finished)
#: what a test child may be sent
TO_CHILD = (Prepare, RunTest)
#: every message of isolation
ALL = tuple(dict.fromkeys((*TO_ROOT, *TO_ZYGOTE, *FROM_ZYGOTE, *FROM_CHILD, *TO_CHILD)))
#: what the pytest process reads from the root: it waits for one of them at a time (a zygote's start or exit)
FROM_ROOT = Accepts(ZygoteStarted, ChildExited)
#: what a test child reads, in this order: its item, then the go-ahead
CHILD_ACCEPTS = Accepts(*TO_CHILD)
