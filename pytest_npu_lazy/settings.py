"""The one place that turns command line, ini, environment and markers into a test's settings.

Precedence, highest first: the closest ``npu_lazy`` marker, the command
line, the environment, the ini file, the default. pytest-timeout's
``timeout`` marker is honoured when the ``npu_lazy`` marker sets none.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from .cann.common import ENV_CACHE, ENV_TRACE, MODES
from .errors import MarkerError
from .probe import inductor_cache
from .probe.summary import DEFAULT_WATCH
from .shard import Shard, ShardError
from .shard import parse as parse_shard

ISOLATE_CHOICES = ("marked", "all", "off")
ISOLATION_MODES = ("fork", "spawn")
MARKER_OPTIONS = ("preload", "isolation", "autoload", "timeout", "block", "track", "inductor_cache", "share_process")

INI: dict[str, tuple[str, Any, Any]] = {
    # name: (help, type, default)
    "npu_lazy_isolate": ("which tests run isolated: marked (default), all or off", "string", "marked"),
    "npu_lazy_isolation": ("how isolated tests run: fork (from a zygote, default) or spawn", "string", "fork"),
    "npu_lazy_preload": ("modules every zygote imports before forking tests (default: torch)", "linelist", ["torch"]),
    "npu_lazy_autoload": ("let torch auto-load device backends (TORCH_DEVICE_BACKEND_AUTOLOAD) in zygotes "
                          "(default: off where a zygote preloads modules, untouched where it preloads none)",
                          "bool", None),
    "npu_lazy_timeout": ("seconds an isolated test may run before it is killed (0: no limit)", "string", "0"),
    "npu_lazy_watch": ("modules the reports follow: in which phase each first loaded, and through which import "
                       "chain (default: " + ", ".join(DEFAULT_WATCH) + ")", "linelist", list(DEFAULT_WATCH)),
    "npu_lazy_budget_growth": ("how much a phase's module count may grow over the --npu-lazy-baseline (default 5%)",
                               "string", "5%"),
    "npu_lazy_module_zygotes": ("module zygotes (each imported and collected one test module, and forks its "
                                "tests) alive at once per process; 0: each isolated test collects in its own child",
                                "string", "4"),
    "npu_lazy_module_zygote_memory": ("memory the module zygotes of one process may hold together (their private "
                                      "pages), e.g. 2GiB or 512MiB; the least recently used stop first",
                                      "string", "2GiB"),
    "npu_lazy_cann": ("CANN for torch_npu: auto (real if it loads, else the host stub), real, stub, "
                      "emulate (an emulated NPU: device paths run, kernels do not), compute (the emulated NPU "
                      "computes: eager ops by ATen's CPU kernels, Triton kernels interpreted) or off",
                      "string", "auto"),
    "npu_lazy_map": ("the selection map --npu-lazy-take-map writes and --npu-lazy-changed reads, relative to the "
                     "rootdir (default .npu-lazy-map.json)", "string", ".npu-lazy-map.json"),
    "npu_lazy_map_packages": ("the packages a selection map follows line by line (default: torch_npu)", "linelist",
                              ["torch_npu"]),
    "npu_lazy_changed_ignore": ("paths (globs) of changed files no test can observe, left out of a change-driven "
                                "selection (default: *.md, *.rst, docs/*)", "linelist", ["*.md", "*.rst", "docs/*"]),
    "npu_lazy_check_grad": ("npu_lazy.compile also checks gradients against eager where a compiled output requires "
                            "grad, unless a call says check_grad=False (default: false)", "bool", False),
    "npu_lazy_share_process": ("the marker's share_process for every isolated test that does not set it: after a "
                               "pass, the module's next test runs in the same child (default: false)", "bool", False),
    "npu_lazy_inductor_cache": ("the Inductor cache each isolated test starts with: cold (default: every graph "
                                "lookup misses, kernels cached for this run), empty (an empty cache per test) or "
                                "shared (the environment's)", "string", inductor_cache.DEFAULT),
}
ENV = {
    "isolate": "PYTEST_NPU_LAZY_ISOLATE",
    "isolation": "PYTEST_NPU_LAZY_ISOLATION",
    "timeout": "PYTEST_NPU_LAZY_TIMEOUT",
    "cann": "PYTEST_NPU_LAZY_CANN",
    "module_zygotes": "PYTEST_NPU_LAZY_MODULE_ZYGOTES",
    "inductor_cache": "PYTEST_NPU_LAZY_INDUCTOR_CACHE",
    "changed": "PYTEST_NPU_LAZY_CHANGED",
}
CANN_MODES = MODES  # the CANN package owns its modes

MARKER_HELP = (
    "npu_lazy(preload=[...], isolation='fork'|'spawn', autoload=False, timeout=SECONDS, block=[...], "
    "track=[...], inductor_cache='cold'|'empty'|'shared', share_process=True): run this test in a clean "
    "interpreter forked from a zygote that imported only `preload`; `timeout` 0 or None: no limit, whatever the "
    "run's; `block` makes modules look absent; `track` counts calls of 'pkg.mod:function'; `inductor_cache`: the "
    "Inductor cache it starts with; `share_process`: after a passing test so marked, the next test of its module "
    "so marked runs in the same child (a test that says nothing of what loads, e.g. compiled-against-eager)."
)


@dataclass(frozen=True)
class Baseline:
    """What a zygote imports before it forks tests; one zygote per distinct baseline."""

    preload: tuple[str, ...]
    #: TORCH_DEVICE_BACKEND_AUTOLOAD for the zygote and its tests; None leaves the environment as it is
    autoload: bool | None

    @property
    def label(self) -> str:
        autoload = {True: "on", False: "off", None: "as the environment sets it"}[self.autoload]
        return f"a zygote with preload {list(self.preload)}, device-backend autoload {autoload}"

    def environment(self) -> dict[str, str]:
        """The variables the zygote sets: only those its settings ask for."""
        if self.autoload is None:
            return {}
        return {"TORCH_DEVICE_BACKEND_AUTOLOAD": "1" if self.autoload else "0"}

    def to_dict(self) -> dict:
        return {"preload": list(self.preload), "autoload": self.autoload}

    @classmethod
    def from_dict(cls, data: dict) -> "Baseline":
        return cls(tuple(data["preload"]), data["autoload"])


@dataclass(frozen=True)
class TestSettings:
    isolated: bool
    isolation: str
    baseline: Baseline
    timeout: float | None
    block: tuple[str, ...] = ()
    track: tuple[str, ...] = ()
    #: where the preload came from, for the guard's advice: "marker", "--npu-lazy-preload" or "ini npu_lazy_preload"
    preload_source: str = "ini npu_lazy_preload"
    #: modules whose first load each phase explains (ini npu_lazy_watch), in-process and isolated alike
    watch: tuple[str, ...] = DEFAULT_WATCH
    #: whether a report of this run reads every module of every phase (Resolver.list_modules)
    list_modules: bool = True
    #: the Inductor cache an isolated test starts with (:mod:`.probe.inductor_cache`), and the directory of
    #: this run it is kept in (None under "shared", and for a test in the pytest process)
    inductor_cache: str = inductor_cache.DEFAULT
    inductor_cache_dir: str | None = None
    #: npu_lazy.compile checks gradients unless a call says otherwise (ini npu_lazy_check_grad)
    check_grad: bool = False
    #: the marker's share_process: once this test passes, its child may run the next such test of its module
    #: (:mod:`.isolation.pytest_side.pool`); a child that ran any other test is never given another
    share_process: bool = False

    def sharing_key(self) -> "TestSettings":
        """What two tests must have in common to run one after the other in one child: everything but the
        per-test Inductor cache directory (each test of a shared child still starts with its own)."""
        return replace(self, inductor_cache_dir=None)

    def to_dict(self) -> dict:
        """What an isolated child needs (it is isolated by definition): the inverse of :meth:`from_dict`."""
        return {"isolation": self.isolation, "baseline": self.baseline.to_dict(), "timeout": self.timeout,
                "block": list(self.block), "track": list(self.track), "preload_source": self.preload_source,
                "watch": list(self.watch), "list_modules": self.list_modules,
                "inductor_cache": self.inductor_cache, "inductor_cache_dir": self.inductor_cache_dir,
                "check_grad": self.check_grad, "share_process": self.share_process}

    @classmethod
    def from_dict(cls, data: dict) -> "TestSettings":
        return cls(isolated=True, isolation=data["isolation"], baseline=Baseline.from_dict(data["baseline"]),
                   timeout=data["timeout"], block=tuple(data["block"]), track=tuple(data["track"]),
                   preload_source=data["preload_source"], watch=tuple(data["watch"]),
                   list_modules=data["list_modules"], inductor_cache=data["inductor_cache"],
                   inductor_cache_dir=data["inductor_cache_dir"], check_grad=data.get("check_grad", False),
                   share_process=data.get("share_process", False))


#: the --help group every feature's options share (pytest keeps the description of the group's first maker)
GROUP = ("npu_lazy", "deferred-loading checks (pytest-npu-lazy)")


def _group(parser: pytest.Parser):
    return parser.getgroup(*GROUP)


def _add_ini(parser: pytest.Parser, names: tuple[str, ...]) -> None:
    for name in names:
        help_text, kind, default = INI[name]
        parser.addini(name, help_text, type=kind, default=default)


def add_isolation_options(parser: pytest.Parser) -> None:
    """The isolation plugin's options: which tests run isolated, how, with what preload, for how long."""
    group = _group(parser)
    group.addoption("--npu-lazy-isolate", choices=ISOLATE_CHOICES, default=None,
                    help="which tests run isolated: marked (default), all, or off (run in-process, e.g. for "
                         f"--pdb); env {ENV['isolate']}")
    group.addoption("--npu-lazy-isolation", choices=ISOLATION_MODES, default=None,
                    help="default isolation mode: fork (zygote, default) or spawn (fresh interpreter per test); "
                         f"env {ENV['isolation']}")
    group.addoption("--npu-lazy-preload", default=None, metavar="MODULES",
                    help="comma-separated modules the zygote imports (overrides ini npu_lazy_preload; '' for none)")
    group.addoption("--npu-lazy-timeout", type=float, default=None, metavar="SECONDS",
                    help=f"kill an isolated test after this many seconds (0: no limit); env {ENV['timeout']}")
    group.addoption("--npu-lazy-module-zygotes", type=int, default=None, metavar="N",
                    help="module zygotes alive at once: a test module is imported and collected once and its "
                         "isolated tests fork from it (default 4; 0: each test collects in its own child); "
                         f"env {ENV['module_zygotes']}")
    group.addoption("--npu-lazy-inductor-cache", choices=inductor_cache.POLICIES, default=None,
                    help="the Inductor cache each isolated test starts with: cold (default: every lookup of "
                         "Inductor's graph caches misses, kernels are cached for this run only: each first call "
                         "compiles as on a cold cache), empty (an empty cache per test: kernels built too) or shared (the environment's, as a "
                         f"user's process has it); env {ENV['inductor_cache']}")
    _add_ini(parser, ("npu_lazy_isolate", "npu_lazy_isolation", "npu_lazy_preload", "npu_lazy_autoload",
                      "npu_lazy_timeout", "npu_lazy_module_zygotes", "npu_lazy_module_zygote_memory",
                      "npu_lazy_inductor_cache", "npu_lazy_share_process"))


def add_cann_options(parser: pytest.Parser) -> None:
    """The CANN plugin's options: which CANN torch_npu gets, and whether a real NPU is required."""
    group = _group(parser)
    group.addoption("--npu-lazy-cann", choices=CANN_MODES, default=None,
                    help="CANN for torch_npu: auto (default: real CANN if it loads, else the host stub "
                         f"when torch_npu is installed), real, stub, emulate (an emulated NPU: device "
                         f"discovery and initialisation run, kernels are refused), compute (the emulated NPU "
                         "computes: eager operators by ATen's CPU kernels on its host memory, torch_npu's Triton "
                         f"kernels in Triton's interpreter), or off; env {ENV['cann']}. "
                         f"Stub and emulation are built in {ENV_CACHE} (default ~/.cache/pytest-npu-lazy); "
                         f"{ENV_TRACE}=1 makes them log each call to stderr; under compute, "
                         "PYTEST_NPU_LAZY_PROGRAMS_ONE_BY_ONE=1 runs each kernel launch program by program and "
                         "PYTEST_NPU_LAZY_LOOPS_ONE_BY_ONE=1 each reduction loop iteration by iteration, "
                         "PYTEST_NPU_LAZY_SUBBLOCKS_AS_LAUNCHED=1 each kernel with the sub-blocks it was launched "
                         "with (by default programs, a sum's loop iterations and an index-codegen kernel's "
                         "sub-blocks run together where the kernel's source allows it), and "
                         "PYTEST_NPU_LAZY_SUBBLOCKS_CHECK=1 runs each widened launch both ways and fails where a "
                         "bit differs")
    group.addoption("--npu-lazy-require-npu", action="store_true", default=False,
                    help="fail the run unless a real NPU device is usable (never test on the stub by accident)")
    _add_ini(parser, ("npu_lazy_cann",))


def add_selection_options(parser: pytest.Parser) -> None:
    """The selection plugin's options: taking a selection map, selecting by a change with one."""
    group = _group(parser)
    group.addoption("--npu-lazy-take-map", action="store_true", default=False,
                    help="measure which lines of the watched packages (ini npu_lazy_map_packages) each test's phases "
                         "run, and write the selection map (--npu-lazy-map) when the run ends")
    group.addoption("--npu-lazy-map", default=None, metavar="PATH",
                    help="the selection map to write or read (ini npu_lazy_map; default .npu-lazy-map.json in the "
                         "rootdir)")
    group.addoption("--npu-lazy-changed", default=None, metavar="CHANGE",
                    help="run only the tests of the selection map that the change can affect, and those the map does "
                         "not know: a git range (main..HEAD, origin/master...HEAD), a revision (against the working "
                         "tree), a .diff/.patch file, - for a diff on stdin, @FILE listing changed files, or files "
                         f"separated by commas; env {ENV['changed']}")
    group.addoption("--npu-lazy-shard", default=None, metavar="K/N",
                    help="with --npu-lazy-take-map: run and map only shard K of N (1 <= K <= N), the tests whose node "
                         "id hashes to K, so N machines each take a part; python -m pytest_npu_lazy.selection.merge "
                         "makes the N maps the one a single run writes")
    _add_ini(parser, ("npu_lazy_map", "npu_lazy_map_packages", "npu_lazy_changed_ignore"))


def add_probe_options(parser: pytest.Parser) -> None:
    """The probe's ini keys: the modules every phase explains, gradients checked by npu_lazy.compile."""
    _add_ini(parser, ("npu_lazy_watch", "npu_lazy_check_grad"))


def add_budget_options(parser: pytest.Parser) -> None:
    """The import budget's growth allowance (the reports' gate reads it through the Resolver)."""
    _add_ini(parser, ("npu_lazy_budget_growth",))


def _ini_bool(config: pytest.Config, name: str) -> bool | None:
    """pytest's own boolean ini reading, with an error that names the key (pytest's names only the value);
    None where the ini file does not set it."""
    try:
        value = config.getini(name)
        return None if value is None else bool(value)
    except (ValueError, pytest.UsageError) as exc:  # pytest 9 turns the ValueError into a UsageError
        raise pytest.UsageError(f"ini {name}: {exc}; use true or false (also yes/no, on/off, 1/0).") from None


def cann_mode(early_config: pytest.Config) -> str:
    """Resolved before conftests load (torch must not be imported before the stub is)."""
    value = (getattr(early_config.known_args_namespace, "npu_lazy_cann", None)
             or os.environ.get(ENV["cann"]) or early_config.getini("npu_lazy_cann"))
    if value not in CANN_MODES:
        source = ENV["cann"] if os.environ.get(ENV["cann"]) == value else "ini npu_lazy_cann"
        raise pytest.UsageError(f"{source} = {value!r} is not valid; choose one of {', '.join(CANN_MODES)}.")
    return value


@dataclass(frozen=True)
class MapSettings:
    """The selection map's settings: where it is, what it follows, and whether this run takes or uses it."""

    path: Path
    packages: tuple[str, ...]
    ignore: tuple[str, ...]
    take: bool
    #: the change to select by (None: run what was collected)
    changed: str | None
    #: --npu-lazy-shard: take the map of this shard's tests only
    shard: Shard | None = None


def map_settings(config: pytest.Config) -> MapSettings:
    """Resolved once, at configure; a take and a change in one run are refused (a map of part of a suite)."""
    path = config.getoption("npu_lazy_map") or config.getini("npu_lazy_map")
    changed = config.getoption("npu_lazy_changed")
    if changed is None:
        changed = os.environ.get(ENV["changed"]) or None
    take = bool(config.getoption("npu_lazy_take_map"))
    if take and changed is not None:
        raise pytest.UsageError("--npu-lazy-take-map and --npu-lazy-changed cannot be combined: a map taken from "
                                "the selected tests only would forget the others. Take the map in a full run, "
                                f"then select with it (unset {ENV['changed']} for the full run).")
    shard = None
    if config.getoption("npu_lazy_shard") is not None:
        try:
            shard = parse_shard(config.getoption("npu_lazy_shard"), option="--npu-lazy-shard")
        except ShardError as exc:
            raise pytest.UsageError(f"pytest-npu-lazy: {exc}") from None
        if not take:
            raise pytest.UsageError(f"--npu-lazy-shard {shard} splits taking a selection map over N runs: add "
                                    "--npu-lazy-take-map (or drop --npu-lazy-shard)")
    packages = tuple(config.getini("npu_lazy_map_packages"))
    if not packages:
        raise pytest.UsageError("ini npu_lazy_map_packages is empty: name the packages a selection map follows "
                                "(e.g. torch_npu).")
    return MapSettings(Path(str(config.rootpath)) / os.path.expanduser(path), packages,
                       tuple(config.getini("npu_lazy_changed_ignore")), take, changed, shard)


_RESOLVED = pytest.StashKey["TestSettings | MarkerError"]()


class Resolver:
    """Resolves settings; the session-wide part once, the marker part per test."""

    def __init__(self, config: pytest.Config, list_modules: bool = True) -> None:
        """``list_modules``: whether a report of this run reads every module of every phase (the reporter
        says, :func:`needs_module_lists`); children then send them home."""
        self.config = config
        self.isolate = self._choice("isolate", ISOLATE_CHOICES)
        self.isolation = self._choice("isolation", ISOLATION_MODES)
        self.inductor_cache = self._choice("inductor_cache", inductor_cache.POLICIES)
        self.inductor_cache_dir = None
        if self.isolate != "off":
            self.inductor_cache_dir = inductor_cache.RunDirectory()
            config.add_cleanup(self.inductor_cache_dir.remove)
        cli_preload = config.getoption("npu_lazy_preload")
        if cli_preload is not None:
            preload = tuple(m.strip() for m in cli_preload.split(",") if m.strip())
        else:
            preload = tuple(config.getini("npu_lazy_preload"))
        _check_module_names("npu_lazy_preload", preload)
        self.autoload = _ini_bool(config, "npu_lazy_autoload")  # None unless the ini file sets it
        self.preload_source = "--npu-lazy-preload" if cli_preload is not None else "ini npu_lazy_preload"
        self.default_baseline = self.baseline(preload, None)
        self.timeout = self._timeout()
        self.module_zygotes = self._module_zygotes()
        self.module_zygote_memory = _bytes("ini npu_lazy_module_zygote_memory",
                                           config.getini("npu_lazy_module_zygote_memory"))
        self.watch = tuple(config.getini("npu_lazy_watch"))
        self.check_grad = bool(_ini_bool(config, "npu_lazy_check_grad"))
        self.share_process = bool(_ini_bool(config, "npu_lazy_share_process"))
        self.list_modules = list_modules
        try:
            self.budget_growth = parse_growth(config.getini("npu_lazy_budget_growth"))
        except ValueError as exc:
            raise pytest.UsageError(f"pytest-npu-lazy: {exc}") from None

    def _choice(self, key: str, choices: tuple[str, ...]) -> str:
        value = self.config.getoption(f"npu_lazy_{key}") or os.environ.get(ENV[key]) or self.config.getini(f"npu_lazy_{key}")
        if value not in choices:
            source = ENV[key] if os.environ.get(ENV[key]) == value else f"ini npu_lazy_{key}"
            raise pytest.UsageError(f"{source} = {value!r} is not valid; choose one of {', '.join(choices)}.")
        return value

    def _timeout(self) -> float | None:
        value = self.config.getoption("npu_lazy_timeout")
        source = "--npu-lazy-timeout"
        if value is None:
            source = ENV["timeout"] if os.environ.get(ENV["timeout"]) else "ini npu_lazy_timeout"
            value = os.environ.get(ENV["timeout"]) or self.config.getini("npu_lazy_timeout")
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            raise pytest.UsageError(f"{source} = {value!r} is not a number of seconds; use e.g. 120, or 0 for no limit.") from None
        if seconds < 0:
            raise pytest.UsageError(f"{source} = {value!r} is negative; use a positive number of seconds, or 0 for no limit.")
        return seconds or None

    def _module_zygotes(self) -> int:
        value, source = self.config.getoption("npu_lazy_module_zygotes"), "--npu-lazy-module-zygotes"
        if value is None:
            env = os.environ.get(ENV["module_zygotes"])
            value, source = (env, ENV["module_zygotes"]) if env else (
                self.config.getini("npu_lazy_module_zygotes"), "ini npu_lazy_module_zygotes")
        try:
            count = int(value)
        except (TypeError, ValueError):
            count = -1
        if count < 0:
            raise pytest.UsageError(f"{source} = {value!r} is not a count; use e.g. 4, or 0 to collect each "
                                    "isolated test in its own child.")
        return count

    def baseline(self, preload: tuple[str, ...], autoload: bool | None) -> Baseline:
        """Autoload is off where the zygote imports something, unless asked for; with nothing to
        import, the environment is left as it is, so a test that imports torch itself gets torch's
        own default, as in-process."""
        if autoload is None:
            autoload = self.autoload
        if autoload is None and preload:
            autoload = False
        return Baseline(preload, autoload)

    def for_item(self, item: pytest.Item) -> TestSettings:
        """Raise MarkerError when the marker is misused; resolved once per item."""
        resolved = item.stash.get(_RESOLVED, None)
        if resolved is None:
            try:
                resolved = self._resolve(item)
            except MarkerError as exc:
                resolved = exc
            item.stash[_RESOLVED] = resolved
        if isinstance(resolved, MarkerError):
            raise MarkerError(str(resolved))
        return resolved

    def _resolve(self, item: pytest.Item) -> TestSettings:
        options = marker_options(item)
        isolated = self.isolate == "all" or (self.isolate == "marked" and item.get_closest_marker("npu_lazy") is not None)
        preload = options.get("preload", self.default_baseline.preload)
        baseline = self.baseline(tuple(preload), options.get("autoload"))
        timeout = options["timeout"] if "timeout" in options else _timeout_marker(item, self.timeout)
        block = tuple(options.get("block", ()))
        clash = sorted(m for m in block if any(m == p or m.startswith(p + ".") or p.startswith(m + ".") for p in preload))
        if clash:
            raise MarkerError(
                f"npu_lazy marker: block={list(block)} conflicts with preload={list(preload)}: {clash[0]!r} "
                "would be loaded by the preload before it could be blocked. Remove it from one of them "
                "(e.g. preload=[] and import what you need inside the test).")
        cache_policy = options.get("inductor_cache", self.inductor_cache)
        return TestSettings(
            inductor_cache=cache_policy,
            # isolated: isolation is on, so the run's directory exists
            inductor_cache_dir=(None if cache_policy == "shared" or not isolated or self.inductor_cache_dir is None
                                else self.inductor_cache_dir.get()),
            isolated=isolated,
            isolation=options.get("isolation", self.isolation),
            baseline=baseline,
            timeout=timeout,
            block=block,
            track=tuple(options.get("track", ())),
            preload_source="marker" if "preload" in options else self.preload_source,
            watch=self.watch,
            list_modules=self.list_modules,
            check_grad=self.check_grad,
            share_process=options.get("share_process", self.share_process),
        )


_SESSION = pytest.StashKey[Resolver]()


def session_resolver(config: pytest.Config) -> Resolver:
    """The session's one Resolver, made on the first question: the features' plugins each ask for it at
    configure, in whatever order pytest calls them."""
    resolver = config.stash.get(_SESSION, None)
    if resolver is None:
        resolver = config.stash[_SESSION] = Resolver(config, list_modules=needs_module_lists(config))
    return resolver


def needs_module_lists(config: pytest.Config) -> bool:
    """Whether a report of this run reads every module of every phase: the JSON's module lists, the HTML
    view, the import budget (saved or checked) and ``-vv``'s terminal lines. Only then do children send
    them home with each test (they are the largest part of a summary)."""
    option = config.option
    return bool(getattr(option, "npu_lazy_json_modules", False) or getattr(option, "npu_lazy_html", None)
                or getattr(option, "npu_lazy_save_baseline", None) or getattr(option, "npu_lazy_baseline", None)
                or getattr(option, "verbose", 0) > 1)


def marker_options(item: pytest.Item) -> dict[str, Any]:
    """Merged keyword options of all ``npu_lazy`` markers, closest first."""
    merged: dict[str, Any] = {}
    for marker in item.iter_markers("npu_lazy"):
        if marker.args:
            raise MarkerError(
                f"npu_lazy marker takes keyword options only, got positional {marker.args!r}; "
                f"write e.g. @pytest.mark.npu_lazy(preload={_preload_guess(marker.args)!r}).")
        for key, value in marker.kwargs.items():
            if key not in MARKER_OPTIONS:
                close = difflib.get_close_matches(key, MARKER_OPTIONS, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise MarkerError(f"npu_lazy marker: unknown option {key!r}.{hint} "
                                  f"Valid options: {', '.join(MARKER_OPTIONS)}.")
            merged.setdefault(key, _validated(key, value))
    return merged


def _preload_guess(args: tuple) -> list:
    """What positional arguments most likely meant as a preload list: ``("torch",)`` or ``(["torch"],)``."""
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        return list(args[0])
    return list(args)


def _validated(key: str, value: Any) -> Any:
    if key in ("preload", "block", "track"):
        if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            example = {"preload": "['torch']", "block": "['triton']",
                       "track": "['torch_npu.utils._dynamo:_lazy_dynamo_setup']"}[key]
            raise MarkerError(f"npu_lazy marker: {key} must be a list of strings, got "
                              f"{type(value).__name__} {value!r}; write {key}={example}.")
        if key in ("preload", "block"):
            _check_module_names(f"npu_lazy marker {key}", value, MarkerError)
        else:
            bad = [t for t in value if ":" not in t]
            if bad:
                raise MarkerError(f"npu_lazy marker: track entries name functions as 'pkg.mod:function', "
                                  f"got {bad[0]!r}.")
        return tuple(value)
    if key == "isolation":
        if value not in ISOLATION_MODES:
            raise MarkerError(f"npu_lazy marker: isolation={value!r} is not a mode; choose 'fork' or 'spawn'.")
        return value
    if key == "inductor_cache":
        if value not in inductor_cache.POLICIES:
            close = difflib.get_close_matches(str(value), inductor_cache.POLICIES, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise MarkerError(f"npu_lazy marker: inductor_cache={value!r} is not a policy.{hint} Choose one of "
                              f"{', '.join(map(repr, inductor_cache.POLICIES))}.")
        return value
    if key == "share_process":
        if not isinstance(value, bool):
            raise MarkerError(f"npu_lazy marker: share_process must be True or False, got {value!r}.")
        return value
    if key == "autoload":
        if not isinstance(value, bool):
            raise MarkerError(f"npu_lazy marker: autoload must be True or False, got {value!r}.")
        return value
    if key == "timeout":
        # 0 and None mean "no limit", as --npu-lazy-timeout=0 and the ini's 0 do: one test can lift a run's limit
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:  # NaN too
            raise MarkerError(f"npu_lazy marker: timeout must be a number of seconds, or 0 or None for no limit, "
                              f"got {type(value).__name__} {value!r}; write e.g. timeout=120.")
        if value < 0:
            raise MarkerError(f"npu_lazy marker: timeout={value!r} is negative; use a number of seconds, "
                              "or 0 or None for no limit.")
        return float(value) or None
    raise AssertionError(key)  # pragma: no cover - MARKER_OPTIONS and this function list the same keys


def parse_growth(text: str) -> float:
    """``"5%"`` or ``"5"`` -> 0.05: how much a phase's module count may grow over the import budget's baseline."""
    value = str(text).strip()
    number = value[:-1] if value.endswith("%") else value
    try:
        growth = float(number) / 100
    except ValueError:
        raise ValueError(f"npu_lazy_budget_growth = {text!r}: expected a percentage such as 5%") from None
    if growth < 0:
        raise ValueError(f"npu_lazy_budget_growth = {text!r}: must not be negative")
    return growth


_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "kb": 1000, "mib": 1 << 20, "mb": 1000 ** 2, "gib": 1 << 30, "gb": 1000 ** 3}


def _bytes(source: str, text: str) -> int:
    """``"2GiB"``, ``"512MiB"``, ``"1.5GB"`` or a plain number of bytes."""
    number = str(text).strip().lower()
    unit = number.lstrip("0123456789. ")
    try:
        value = float(number[:len(number) - len(unit)].strip())
        if value < 0 or unit.strip() not in _UNITS:
            raise ValueError
    except ValueError:
        raise pytest.UsageError(f"{source} = {text!r} is not an amount of memory; use e.g. 2GiB or 512MiB.") from None
    return int(value * _UNITS[unit.strip()])


def _check_module_names(source: str, names, error=pytest.UsageError) -> None:
    for name in names:
        if not name or not all(part.isidentifier() for part in name.split(".")):
            raise error(f"{source}: {name!r} is not a module name; use dotted names such as 'torch' or 'torch_npu'.")


#: pytest-timeout acts first inside the child, with its own report; the kill is the backstop
#: for a test stuck where its signal cannot reach (a C call that released the GIL).
PYTEST_TIMEOUT_GRACE = 5.0


def _timeout_marker(item: pytest.Item, default: float | None) -> float | None:
    """pytest-timeout's marker, when that plugin is installed and the test has one."""
    marker = item.get_closest_marker("timeout")
    if marker is None or not item.config.pluginmanager.hasplugin("timeout"):
        return default
    value = marker.kwargs.get("timeout", marker.args[0] if marker.args else None)
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return default
    return seconds + PYTEST_TIMEOUT_GRACE if seconds > 0 else None
