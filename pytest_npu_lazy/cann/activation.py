"""Activation: choose real CANN, the stub or nothing, load it before torch, and describe the choice."""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Iterable, Mapping

from . import emulation
from .analysis import StubSpec, _default_library_dirs, _ld_cache, _package_dir, analyse
from .build import (
    _LOADED,
    _read_manifest,
    _writable_dir,
    build_stub,
    default_cache_dir,
    load_stub,
)
from .common import (
    ENV_CACHE,
    EMULATED_MODES,
    ENV_MODE,
    GENERATOR_VERSION,
    MANIFEST_NAME,
    MODES,
    NO_DEVICE_ERROR,
    CannError,
)
from .elf import _shared_objects

# --------------------------------------------------------------------------- activation


@dataclass(frozen=True)
class CannStatus:
    """What activate() did, in a form the plugin can print and hand to child processes."""

    requested: str
    active: str  # "real" | "stub" | "emulate" | "compute" | "off" | "absent"
    version: str | None  # real CANN's release; under "emulate" and "compute", the emulated Ascend model
    stub_dir: str | None
    detail: str
    location: str | None = None  # real CANN's toolkit directory
    sonames: int = 0
    symbols: int = 0
    cache_dir: str | None = None
    library_dirs: tuple[str, ...] = ()  # what a child needs on LD_LIBRARY_PATH to load the same CANN

    def header(self) -> str:
        """One line for pytest's report header; the stub always says it is one."""
        counts = f"{self.sonames} sonames, {self.symbols} symbols"
        if self.active == "stub":
            return f"CANN: host stub - no NPU device ({counts}; {self.stub_dir})"
        if self.active == "compute":
            from .compute import describe

            return (f"CANN: emulated NPU ({self.version}) that computes - {describe()} ({counts}; {self.stub_dir})")
        if self.active == "emulate":
            return (f"CANN: emulated NPU ({self.version}) - device paths run, kernels do not ({counts}; {self.stub_dir}); "
                    "its Triton driver answers target and core counts, compiles and launches nothing")
        if self.active == "real":
            return f"CANN: {self.version or 'version unknown'} ({self.location})"
        if self.active == "off":
            return "CANN: off (nothing loaded; import torch_npu needs CANN from the environment)"
        return "CANN: absent (torch_npu not installed)"

    def env(self) -> dict[str, str]:
        """Variables that make a spawned child activate the same way.

        LD_LIBRARY_PATH lets even a child that never imports this plugin (a bare
        `python -c "import torch_npu"`) find the same libraries by soname.
        """
        env = {ENV_MODE: self.active if self.active in ("real", "stub", *EMULATED_MODES, "off") else self.requested}
        if self.cache_dir:
            env[ENV_CACHE] = self.cache_dir
        if self.library_dirs:
            current = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
            env["LD_LIBRARY_PATH"] = os.pathsep.join([*(d for d in self.library_dirs if d not in current), *current])
        return env


_STATUS: CannStatus | None = None


def _install_fingerprint(package_dir: Path) -> str:
    """Cheap identity of everything analyse() reads, so activation can skip re-reading ELF files."""
    torch_spec = find_spec("torch")
    torch_dirs = list(torch_spec.submodule_search_locations or ()) if torch_spec else []
    paths = _shared_objects(package_dir) + [p for d in torch_dirs for p in _shared_objects(Path(d, "lib"))]
    paths += [Path(os.path.realpath(sys.executable)), Path("/etc/ld.so.cache")]
    digest = hashlib.sha256(f"{GENERATOR_VERSION}\0{package_dir}\0{sys.implementation.cache_tag}".encode())
    for path in paths:
        try:
            stat = path.stat()
        except OSError:
            continue
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return digest.hexdigest()[:32]


def _installed_spec(package_dir: Path, cache_root: Path) -> StubSpec:
    """analyse() the installed torch_npu, memoised in the cache by file identity."""
    index = cache_root / "cann-index" / f"{_install_fingerprint(package_dir)}.json"
    try:
        return StubSpec.from_json(index.read_text())
    except (OSError, ValueError, KeyError, TypeError):
        pass
    spec = analyse(package_dir)
    fd, staging = tempfile.mkstemp(prefix=".index.", dir=_writable_dir(index.parent))
    with os.fdopen(fd, "w") as handle:
        handle.write(spec.to_json())
    os.replace(staging, index)
    return spec


def _search_dirs() -> list[str]:
    """Where CANN's set_env.sh puts CANN: LD_LIBRARY_PATH, then the ASCEND_* toolkit roots."""
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    for variable in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"):
        root = os.environ.get(variable)
        if root:
            dirs += [os.path.join(root, "lib64"), os.path.join(root, "lib")]
    return dirs


def _locate_real_cann(sonames: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """soname -> file of a real (non-stub) CANN library, and the sonames nowhere to be found."""
    found: dict[str, str] = {}
    missing: list[str] = []
    for soname in sonames:
        candidates = [os.path.join(d, soname) for d in _search_dirs()]
        candidates += [*_ld_cache().get(soname, ()), *(os.path.join(d, soname) for d in _default_library_dirs())]
        path = next(
            (c for c in candidates if os.path.isfile(c) and not Path(c).parent.joinpath(MANIFEST_NAME).exists()),
            None,
        )
        if path is None:
            missing.append(soname)
        else:
            found[soname] = os.path.realpath(path)
    return found, missing


_VERSION_LINE = re.compile(r"^\s*(?:[\w-]*_)?version\s*=\s*\[?\s*([^\]\s\"']+)", re.IGNORECASE | re.MULTILINE)
_RELEASE_DIR = re.compile(r"^\d+\.\d+(?:\.[\w]+)*$")


def _version_in(record: Path) -> str | None:
    try:
        match = _VERSION_LINE.search(record.read_text(errors="replace"))
    except OSError:
        return None
    return match.group(1).rsplit(":", 1)[-1] if match else None


def _cann_version(roots: Iterable[str]) -> str | None:
    """CANN's release from its install records, else the release directory's name, else version.cfg."""
    for root in dict.fromkeys(os.path.realpath(r) for r in roots if r):
        base = Path(root)
        for record in [*sorted(base.glob("*_install.info")), *sorted(base.glob("*/*_install.info"))]:
            if version := _version_in(record):
                return version
        if _RELEASE_DIR.match(base.name):
            return base.name
        for record in (base / "version.cfg", base / "runtime" / "version.info"):
            if version := _version_in(record):
                return version
    return None


def _toolkit_root(found: Mapping[str, str]) -> str | None:
    for variable in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"):
        if os.environ.get(variable):
            return os.environ[variable]
    for path in found.values():
        parent = Path(path).parent
        return str(parent.parent if parent.name in ("lib64", "lib") else parent)
    return None


def _probe_load(paths: Iterable[str]) -> str | None:
    """dlopen the libraries in a throwaway interpreter: a half-loaded CANN must not stay in this one."""
    code = "import ctypes, sys\nfor p in sys.argv[1:]:\n    ctypes.CDLL(p)\n"
    try:
        result = subprocess.run(
            [sys.executable, "-S", "-c", code, *paths], capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    if result.returncode == 0:
        return None
    lines = (result.stderr or result.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit status {result.returncode}"


def _activate_real(mode: str, spec: StubSpec, cache_root: Path) -> CannStatus | str:
    """Load the real CANN, or return why not (a string) so auto mode can fall back to the stub."""
    found, missing = _locate_real_cann(spec.libraries)
    core_missing = [s for s in spec.core_sonames if s in missing]
    if core_missing:
        where = "LD_LIBRARY_PATH, $ASCEND_TOOLKIT_HOME/lib64, $ASCEND_HOME_PATH/lib64, ld.so.cache"
        return f"{core_missing[0]} (needed by {', '.join(spec.needed_by[core_missing[0]])}) not found in {where}"
    core_paths = [found[s] for s in spec.core_sonames]
    if mode == "auto":
        failure = _probe_load(core_paths)
        if failure:
            return f"real CANN libraries did not load: {failure}"
    for soname in spec.core_sonames:
        try:
            # RTLD_LOCAL is enough for torch_npu's DT_NEEDED to match by soname, and keeps
            # CANN's many exported symbols from interposing on libraries loaded later.
            _LOADED.append(ctypes.CDLL(found[soname]))
        except OSError as exc:
            return f"{soname} ({found[soname]}) did not load: {exc}"
    root = _toolkit_root(found)
    optional = sorted(set(missing) - set(core_missing))
    note = f"; not found (loaded on demand only): {', '.join(optional)}" if optional else ""
    return CannStatus(
        requested=mode,
        active="real",
        version=_cann_version([r for r in (root, os.environ.get("ASCEND_HOME_PATH")) if r]),
        stub_dir=None,
        detail=f"real CANN: {', '.join(f'{s}={found[s]}' for s in spec.core_sonames)}{note}",
        location=root,
        cache_dir=str(cache_root),
        library_dirs=tuple(dict.fromkeys(str(Path(p).parent) for p in core_paths)),
    )


def _activate_stub(mode: str, spec: StubSpec, cache_root: Path, why: str, emulate: str | None = None) -> CannStatus:
    """Load the host stub, or with ``emulate`` ("emulate" or "compute") the emulated NPU, before torch."""
    if "torch" in sys.modules:
        what = "the emulated NPU" if emulate else "the CANN host stub"
        raise CannError(
            f"{what} must be loaded before torch is imported, but torch is already imported. "
            "Load the plugin first (it is loaded through its pytest11 entry point, or pass -p npu_lazy) "
            "and move any `import torch` out of code that runs before it (conftest.py plugins, sitecustomize)."
        )
    stub_dir = build_stub(spec, cache_root, emulate=bool(emulate))
    load_stub(stub_dir)
    if emulate == "compute":
        detail = f"{emulation.MODEL.describe()}; eager operators and Triton kernels compute on the host ({why})"
    elif emulate:
        detail = f"{emulation.MODEL.describe()}; compute calls are refused ({why})"
    else:
        detail = f"every CANN call fails with {NO_DEVICE_ERROR} ({why})"
    return _stub_status(mode, stub_dir, detail, len(spec.libraries), spec.symbol_count, cache_root, emulate)


def _stub_status(mode: str, stub_dir: Path, detail: str, sonames: int, symbols: int, cache_root: Path,
                 emulate: str | None = None) -> CannStatus:
    return CannStatus(
        requested=mode,
        active=emulate or "stub",
        version=emulation.MODEL.soc_name if emulate else None,
        stub_dir=str(stub_dir),
        detail=f"emulated NPU: {detail}" if emulate else f"CANN host stub, no NPU device: {detail}",
        sonames=sonames,
        symbols=symbols,
        cache_dir=str(cache_root),
        library_dirs=(str(stub_dir),),
    )


def _mapped_stub_dir() -> Path | None:
    """The stub directory whose libraries this process has mapped, if any (/proc/self/maps)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    mapped = {Path(fields[5]).parent for line in maps.splitlines() if len(fields := line.split(maxsplit=5)) == 6}
    return next((d for d in sorted(mapped) if (d / MANIFEST_NAME).is_file()), None)


def _already_imported(mode: str, cache_root: Path) -> CannStatus:
    """torch_npu got in first (e.g. a child inheriting LD_LIBRARY_PATH): report what it runs on."""
    stub_dir = _mapped_stub_dir()
    manifest = _read_manifest(stub_dir) if stub_dir is not None else {}
    emulated = "emulation" in manifest
    if stub_dir is not None and mode in ("auto", *(EMULATED_MODES if emulated else ("stub",))):
        detail = f"torch_npu was already imported with the {'emulation' if emulated else 'stub'} in {stub_dir}"
        active = None  # the stub; with the emulation, the mode asked for here or by the parent process
        if emulated:
            active = mode if mode in EMULATED_MODES else "compute" if os.environ.get(ENV_MODE) == "compute" else "emulate"
        return _stub_status(mode, stub_dir, detail, len(manifest["libraries"]), manifest["total_symbols"], cache_root,
                            active)
    if stub_dir is None and mode not in ("stub", *EMULATED_MODES):
        root = _toolkit_root({})
        version = _cann_version([root] if root else [])
        detail = "torch_npu was already imported, with the CANN of the environment"
        return CannStatus(mode, "real", version, None, detail, location=root, cache_dir=str(cache_root))
    running = ("the emulated NPU" if emulated else "the CANN host stub") if stub_dir else "real CANN"
    raise CannError(
        f"torch_npu was imported before CANN could be activated and runs on {running}, not on what "
        f"mode {mode!r} asks for; load the plugin before anything imports torch or torch_npu."
    )


def _inherited_stub_dirs() -> list[str]:
    """Stub builds on LD_LIBRARY_PATH, put there by a parent process that activated the stub."""
    return [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)
            if d and Path(d, MANIFEST_NAME).is_file()]


def _activate(mode: str, cache_root: Path) -> CannStatus:
    if mode == "off":
        inherited = _inherited_stub_dirs()
        if inherited:  # the dynamic linker read LD_LIBRARY_PATH at start-up: too late to take it back
            raise CannError(
                f"CANN mode 'off' was asked for, but LD_LIBRARY_PATH holds the CANN host stub "
                f"({inherited[0]}), inherited from the process that started this one, so torch_npu would "
                "load it anyway. Remove that directory from LD_LIBRARY_PATH (and unset "
                f"{ENV_MODE}) before starting pytest, or use another CANN mode.")
        return CannStatus(mode, "off", None, None, "CANN activation switched off")
    try:
        package_dir = _package_dir(None)
    except CannError:
        return CannStatus(mode, "absent", None, None, "torch_npu is not installed")
    if "torch_npu" in sys.modules:
        return _already_imported(mode, cache_root)
    if mode == "compute":
        from .compute.interpreter import triton_problem

        problem = triton_problem()
        if problem is not None:
            raise CannError(problem)
    spec = _installed_spec(package_dir, cache_root)
    if mode in ("stub", *EMULATED_MODES):
        return _activate_stub(mode, spec, cache_root, f"requested with mode {mode!r}",
                              emulate=mode if mode in EMULATED_MODES else None)
    outcome = _activate_real(mode, spec, cache_root)
    if isinstance(outcome, CannStatus):
        return outcome
    if mode == "real":
        raise CannError(
            f"real CANN requested but it cannot be loaded: {outcome}. Source CANN's set_env.sh "
            "(e.g. `source /usr/local/Ascend/ascend-toolkit/set_env.sh`) or use --npu-lazy-cann=stub."
        )
    return _activate_stub(mode, spec, cache_root, f"no real CANN: {outcome}")


def activate(mode: str | None = None, cache_dir: str | os.PathLike | None = None) -> CannStatus:
    """Make `import torch_npu` possible in this process, before torch is imported.

    mode None means $PYTEST_NPU_LAZY_CANN, else "auto". Idempotent: a second call returns
    the first status; asking for a different outcome than the one in effect is an error.
    """
    global _STATUS
    mode = mode or os.environ.get(ENV_MODE) or "auto"
    if mode not in MODES:
        raise CannError(f"unknown CANN mode {mode!r}; choose one of {', '.join(MODES)}")
    if _STATUS is not None:
        if mode in ("auto", _STATUS.requested, _STATUS.active) or _STATUS.active == "absent":
            return _STATUS
        raise CannError(f"CANN is already active as {_STATUS.active!r} in this process; cannot switch to {mode!r}")
    cache_root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    status = _activate(mode, cache_root)
    if status.active != "absent":
        os.environ.update(status.env())
    _STATUS = status
    return status


