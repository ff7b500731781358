"""The pytest process's zygotes: start them, hand out their children, restart them, stop them.

The servers themselves run in forks (:mod:`..zygote_side.server`); this is the other end
of their channels, as pytest-xdist keeps ``workermanage.py`` apart from
``remote.py``. A launcher (the controller's word) gives a child that has
already been sent its :class:`~.messages.Prepare`: the fork pool asks a
zygote for a spare child and sends it, ahead of time where it can, so a
test usually waits only for a message.

The next child is forked while the current test runs, so a test waits only
for a socket message, not for a fork. One zygote as the pool holds it (its
channel, readiness, spare child) is :mod:`.handles`'s.
"""

from __future__ import annotations

import os
import time
from typing import Callable

from ...errors import ZygoteError
from ...forks.channel import Channel, ChannelClosed, send
from ...forks.processes import wait_or_kill
from ...forks.server import READY_TIMEOUT, run_forked
from ...settings import Baseline
from .. import messages
from ..target import prepare_message
from ..zygote_side.server import serve_root
from .handles import FORK_TIMEOUT, ChildHandle, ZygoteHandle, ZygoteProcess, socket_from_fd
from .module_zygotes import ModuleZygotes, module_key, module_target
from .outputs import record_warning_text


class ZygotePool:
    """The pytest process's view of its zygotes: start, hand out children, restart, stop."""

    def __init__(self, session, module_zygotes: ModuleZygotes | None = None) -> None:
        self.session = session
        self.modules = module_zygotes or ModuleZygotes(0, 0, counting=False)
        self.root_pid: int | None = None
        self._root: Channel | None = None
        self._zygotes: dict[Baseline, ZygoteHandle] = {}
        self._zygote_exits: dict[int, int] = {}
        self._prepared: dict[str, ChildHandle] = {}  # node id -> a child already collecting it
        #: a child that passed a share_process test and waits for the next of its module: (module, what the two
        #: tests' settings must share, the child); and what the share_process child running now would be kept as
        self._kept: tuple[tuple, ChildHandle] | None = None
        self._sharing: tuple | None = None
        self.root_restarts = 0

    def start_root(self) -> None:
        """Fork the root now, while no test module has been imported yet."""
        ours, theirs = Channel.pair()
        pid = os.fork()
        if pid == 0:
            run_forked(lambda: serve_root(theirs, self.session), close=[ours])
        theirs.close()
        self.root_pid, self._root = pid, ours

    def warm(self, baselines) -> None:
        """Start zygotes for these baselines now, so their preloads overlap."""
        for baseline in baselines:
            self._zygote(baseline, wait=False)

    def _zygote(self, baseline: Baseline, wait: bool = True, timeout: float | None = None) -> ZygoteHandle:
        """The baseline's zygote, started if need be; with ``wait``, ready within ``timeout`` (the asking
        test's timeout: a preload that hangs, say ``import torch_npu`` stuck in a lock, fails that test with a
        report that says so, instead of holding the session for READY_TIMEOUT)."""
        zygote = self._zygotes.get(baseline)
        if zygote is None or zygote.process.dead:
            if zygote is not None:
                zygote.close()
            zygote = self._zygotes[baseline] = self._start_zygote(baseline)
        if wait and not zygote.readiness.ready:
            try:
                zygote.wait_ready(timeout or READY_TIMEOUT)
            except ZygoteError as exc:
                raise ZygoteError(f"{exc}: its preload of {', '.join(baseline.preload) or 'nothing'} did not finish "
                                  "within the test's timeout (--npu-lazy-timeout); the next test waits for it "
                                  "again") from None
            for text in zygote.readiness.warnings:
                self._warn(text)
        return zygote

    def _warn(self, text: str) -> None:
        record_warning_text(self.session.config, text, filename="<npu_lazy zygote>")

    def _start_zygote(self, baseline: Baseline) -> ZygoteHandle:
        if self._root is None:
            raise ZygoteError("no root zygote: the session did not start one")
        key = repr(baseline)
        try:
            send(self._root, messages.StartZygote(key, baseline.to_dict()))
            started, fds = self._from_root(self._root, lambda m: isinstance(m, messages.ZygoteStarted) and m.key == key,
                                           FORK_TIMEOUT)
        except (ChannelClosed, OSError):
            self._restart_root()
            return self._start_zygote(baseline)
        if started is None:
            raise ZygoteError(f"the root zygote did not answer within {FORK_TIMEOUT:.0f} s")
        channel = Channel(socket_from_fd(fds[0]))
        return ZygoteHandle(ZygoteProcess(baseline, started.pid, channel,
                                          death_status=lambda: self._zygote_status(started.pid)))

    def _from_root(self, root: Channel, wanted: Callable[[object], bool], timeout: float):
        """The root channel's one reader (``root``: ``self._root``, which the caller checked is there): records every zygote exit, returns the first message ``wanted``
        accepts with its descriptors, or ``(None, [])`` after ``timeout``. ChannelClosed when the root is gone."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None, []
            message, fds = messages.FROM_ROOT.receive(root, remaining)
            if message is None:
                return None, []
            if isinstance(message, messages.ChildExited):
                self._zygote_exits[message.pid] = message.status
            if wanted(message):
                return message, fds

    def _zygote_status(self, pid: int, timeout: float = 5.0) -> int | None:
        """How a zygote ended, as its parent (the root) saw it."""
        if pid not in self._zygote_exits and self._root is not None:
            try:
                self._from_root(self._root, lambda m: isinstance(m, messages.ChildExited) and m.pid == pid, timeout)
            except ChannelClosed:
                return None
        return self._zygote_exits.get(pid)

    def _restart_root(self) -> None:
        """The root died: fork a new one from this (already collected) process and say so."""
        if self.root_restarts >= 3:
            raise ZygoteError("the root zygote died three times; giving up on fork isolation for this session")
        self.root_restarts += 1
        if self._root is not None:
            self._root.close()
        self.start_root()
        self._warn(
            "the root zygote died and was forked again from the pytest process, which has imported test "
            "modules by now; modules they imported are part of the new baseline, and the npu_lazy guard "
            "reports any test that asserts about them.")

    def child(self, item, settings) -> ChildHandle:
        """A forked child that was sent ``item``'s Prepare (the Launcher contract of the controller)."""
        child = self._child(item, settings)
        # only a module zygote's child may be kept (serve_collected_child): for it, no spare is forked ahead
        self._sharing = _sharing(item, settings) if child.zygote.process.module_key is not None else None
        return child

    def _child(self, item, settings) -> ChildHandle:
        kept = self._take_kept(item, settings)
        if kept is not None:
            return kept
        prepared = self._prepared.pop(item.nodeid, None)
        if prepared is not None and not prepared.zygote.process.dead and not prepared.gone():
            if prepared.zygote.process.module_key is not None:
                self.modules.serving(prepared.zygote.process.module_key)
            return prepared
        if prepared is not None:  # its zygote died (or was stopped) since, or it was killed: a fresh one serves
            prepared.close()
        try:
            return self._fresh_child(item, settings)
        except OSError:  # the child taken died before it got the test (killed with the one before it): once more
            try:
                return self._fresh_child(item, settings)
            except OSError as exc:
                raise ZygoteError(f"two children forked for this test died before they got it: "
                                  f"{exc.strerror or exc}") from None

    def keep(self, item, settings, child) -> None:
        """``item`` passed in ``child`` under share_process (the Launcher contract): it serves the next test of its
        module with the same settings, if that comes next; any other test closes it (:meth:`_take_kept`)."""
        self._sharing = None
        sharing = _sharing(item, settings)
        if self._kept is not None:
            self._kept[1].close()
        if sharing is None:
            child.close()
            return
        self._kept = (sharing, child)

    def _take_kept(self, item, settings) -> ChildHandle | None:
        """The kept child, sent ``item``'s Prepare, where ``item`` may run in it (its module, the same settings,
        share_process) and it is still alive; otherwise it is closed (it ends) and None."""
        if self._kept is None:
            return None
        sharing, child = self._kept
        self._kept = None
        if sharing != _sharing(item, settings) or child.zygote.process.dead or child.gone():
            child.close()
            return None
        try:
            send(child.channel, prepare_message(item, settings))
        except OSError:
            child.close()
            return None
        prepared = self._prepared.pop(item.nodeid, None)
        if prepared is not None:
            prepared.close()
        self.modules.serving(sharing[0])
        return child

    def _fresh_child(self, item, settings) -> ChildHandle:
        zygote = self._zygote_for(item, settings, wait=True)
        if zygote.readiness.error:
            raise ZygoteError(f"{settings.baseline.label} could not be prepared: {zygote.readiness.error}")
        key = zygote.process.module_key
        try:
            child = zygote.take_child(lambda: self.modules.spare_after(key))
        except ZygoteError:
            if key is None:
                raise
            self.modules.give_up(key)  # it refused to fork or died: this module's tests collect themselves
            key, child = None, self._zygote(settings.baseline, timeout=settings.timeout).take_child()
        if key is not None:
            self.modules.serving(key)
        try:
            send(child.channel, prepare_message(item, settings))
        except OSError:
            child.close()
            raise
        return child

    def prepare(self, item, settings) -> None:
        """Let a spare child collect the next test while this one runs (not while a preload is running),
        and start the next modules' zygotes while this module's tests run."""
        try:
            self._prepare_child(item, settings)
        finally:
            self._start_ahead(item, settings)

    def plan(self, upcoming) -> None:
        """Under pytest-xdist: the tests this worker will run, as far as it knows them now (the Launcher contract),
        so :meth:`_start_ahead` starts the next modules' zygotes as it does where the order is known up front."""
        if self.modules.enabled and not self.modules.counting:
            self.modules.replan([(module_key(item, settings) if settings.isolation == "fork" else None, item, settings)
                                 for item, settings in upcoming])

    def _ready_base(self, baseline: Baseline) -> ZygoteHandle | None:
        """The baseline's zygote if it has finished its preload without error: only then is it asked for
        anything ahead of a test (a preload still running is waited for by the test that needs it)."""
        base = self._zygotes.get(baseline)
        return base if base is not None and base.readiness.ready and not base.readiness.error else None

    def _prepare_child(self, item, settings) -> None:
        if item.nodeid in self._prepared or self._ready_base(settings.baseline) is None:
            return
        if self._sharing is not None and self._sharing == _sharing(item, settings):
            return  # the running test's child is kept for it if it passes; if not, it forks its own then
        try:
            zygote = self._zygote_for(item, settings, wait=False)
            if not zygote.readiness.ready:
                return  # a module zygote still collecting: the test takes its child when it is ready
            key = zygote.process.module_key
            child = zygote.take_child(lambda: self.modules.spare_after(key))  # forked a moment ago: waiting overlaps
        except ZygoteError:
            return
        try:
            send(child.channel, prepare_message(item, settings))
        except OSError:
            child.close()
            return
        self._prepared[item.nodeid] = child

    def expect(self, item, settings) -> None:
        """``item`` will run in this process: its module zygote goes after its module's last test."""
        if self.modules.enabled and settings.isolation == "fork":
            self.modules.expect(module_key(item, settings), item, settings)

    def _start_ahead(self, item, settings) -> None:
        """While ``item``'s module runs, have the next modules' zygotes import and collect theirs, then fork
        each one's first child: the first test of a module then waits for a message, as every other test
        does, not for an import.

        Only from a module whose own zygote is up, one new start per test (their imports share the CPU with
        the tests), and only where it fits the count and memory limits without stopping another. The first
        time one is seen ready is handled as in :meth:`_zygote_for` (its collection's warnings, its memory).
        """
        key = module_key(item, settings) if self.modules.enabled and settings.isolation == "fork" else None
        current = self.modules.peek(key) if key is not None else None
        if key is None or current is None or not current.readiness.ready:  # no key: no current either
            return
        for run in self.modules.ahead_of(key):
            zygote = self.modules.peek(run.key)
            if zygote is not None and zygote.readiness.ready:
                continue
            if zygote is None and (not self.modules.usable(run.key) or not self.modules.room_ahead()
                                   or self._ready_base(run.settings.baseline) is None):
                return
            try:
                zygote = self._zygote_for(run.item, run.settings, wait=False)  # started, or polled
                if zygote.readiness.ready and zygote.process.module_key is not None and not zygote.readiness.error:
                    zygote.request_fork()  # its first test's spare child, forked now
            except (ZygoteError, OSError):
                return  # that module's first test finds out, as it did before it was started ahead
            if not zygote.readiness.ready:
                return  # one import at a time

    def release(self, item, settings) -> None:
        """``item``'s child is done (the Launcher contract): stop its module zygote if that was the last test, and
        with it a child kept for a next test of the module, which none will ask for."""
        self._sharing = None
        if self.modules.enabled:
            key = module_key(item, settings)
            self.modules.done_with(key)
            if self._kept is not None and key is not None and self._kept[0][0] == key and self.modules.peek(key) is None:
                self._kept[1].close()
                self._kept = None

    def _zygote_for(self, item, settings, wait: bool) -> ZygoteHandle:
        """The zygote to fork ``item``'s child from: its module zygote where one can serve, else its baseline's."""
        base = self._zygote(settings.baseline, timeout=settings.timeout)
        key = module_key(item, settings) if self.modules.enabled else None
        if key is None or not self.modules.usable(key) or base.readiness.error:
            return base
        zygote = self.modules.get(key)
        if zygote is None or zygote.process.dead:
            if zygote is not None:
                self.modules.close(key)
            self.modules.room_for_one()
            target = module_target(item)
            try:
                zygote = base.start_module(messages.StartModuleZygote(
                    repr(key), settings.to_dict(), target.to_dict()), key)
            except ZygoteError:
                self.modules.start_failed(key)
                return base
            self.modules.add(key, zygote)
        if not zygote.readiness.ready:
            try:  # within the test's timeout: past it, the test's own child shows where the import hangs
                zygote.wait_ready(settings.timeout or READY_TIMEOUT) if wait else zygote.poll()
            except ZygoteError:
                self.modules.give_up(key)
                return base
        if zygote.readiness.ready and not self.modules.seen_ready(key):  # once, the first time it is seen ready
            for text in zygote.readiness.warnings:
                self._warn(text)
            self.modules.measured(key, zygote.process.pid)
        return zygote

    def shutdown(self) -> None:
        if self._kept is not None:
            self._kept[1].close()
            self._kept = None
        self.modules.shutdown()
        for child in self._prepared.values():
            child.close()
        self._prepared.clear()
        for zygote in self._zygotes.values():
            zygote.close()
        self._zygotes.clear()
        if self._root is not None:
            try:
                send(self._root, messages.Shutdown())
            except OSError:
                pass
            self._root.close()
            self._root = None
        if self.root_pid is not None:
            wait_or_kill(self.root_pid)
            self.root_pid = None


def _sharing(item, settings) -> tuple | None:
    """What a share_process test and the next must have in common to run in one child: the module (its module
    zygote's key) and the settings but for the per-test Inductor cache directory. None: it shares with none."""
    if not settings.share_process or settings.isolation != "fork":
        return None
    key = module_key(item, settings)
    return None if key is None else (key, settings.sharing_key())
