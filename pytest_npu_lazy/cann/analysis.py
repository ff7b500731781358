"""Analysis: which sonames and symbols only CANN provides, once torch, libpython and the system are taken away."""

from __future__ import annotations

import email
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path, PurePosixPath
from typing import Iterable

from .common import GENERATOR_VERSION, MANIFEST_NAME, CannError, distribution_version
from .elf import _Elf, _read_elf, _read_elf_path, _shared_objects

# --------------------------------------------------------------------------- providers


@lru_cache(maxsize=1)
def _ld_cache() -> dict[str, tuple[str, ...]]:
    """soname -> paths known to the dynamic linker's cache (`ldconfig -p`)."""
    ldconfig = shutil.which("ldconfig") or next(
        (p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.access(p, os.X_OK)), None
    )
    if ldconfig is None:
        return {}
    try:
        listing = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    cache: dict[str, list[str]] = {}
    for line in listing.splitlines():
        match = re.match(r"\s*(\S+)\s+\(.*?\)\s+=>\s+(\S+)", line)
        if match:
            cache.setdefault(match.group(1), []).append(match.group(2))
    return {name: tuple(paths) for name, paths in cache.items()}


def _default_library_dirs() -> list[str]:
    multiarch = sysconfig.get_config_var("MULTIARCH")
    dirs = ["/lib64", "/usr/lib64", "/lib", "/usr/lib"]
    if multiarch:
        dirs = [f"/lib/{multiarch}", f"/usr/lib/{multiarch}", *dirs]
    return dirs


def _ascend_roots() -> list[str]:
    roots = [os.environ.get(name) for name in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "ASCEND_OPP_PATH")]
    return [os.path.realpath(root) for root in roots if root]


def _belongs_to_cann(path: str) -> bool:
    """True for CANN's own files (and our stubs): they must never count as 'system'."""
    real = os.path.realpath(path)
    if "Ascend" in Path(real).parts or Path(real).parent.joinpath(MANIFEST_NAME).exists():
        return True
    return any(real == root or real.startswith(root + os.sep) for root in _ascend_roots())


def _resolve_system_library(soname: str, like: _Elf) -> _Elf | None:
    """Find a soname the way ld.so does for the system (ld.so.cache, then default dirs).

    LD_LIBRARY_PATH is left out on purpose: CANN's set_env.sh puts CANN there.
    """
    candidates = [*_ld_cache().get(soname, ()), *(os.path.join(d, soname) for d in _default_library_dirs())]
    for candidate in candidates:
        if not os.path.isfile(candidate) or _belongs_to_cann(candidate):
            continue
        try:
            elf = _read_elf_path(candidate)
        except CannError:
            continue
        if elf.machine == like.machine and elf.elfclass == like.elfclass:
            return elf
    return None


def _torch_libraries() -> tuple[list[_Elf], str | None]:
    spec = find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise CannError(
            "torch is not installed in this environment; torch_npu's symbols cannot be told apart "
            "from CANN's without it. Install the torch version torch_npu requires."
        )
    torch_dir = Path(next(iter(spec.submodule_search_locations)))
    paths = _shared_objects(torch_dir / "lib")
    vendored = torch_dir.parent / "torch.libs"
    if vendored.is_dir():
        paths += _shared_objects(vendored)
    return [_read_elf_path(p) for p in paths], distribution_version("torch")


def _python_libraries() -> list[_Elf]:
    """The interpreter's exported symbols (extension modules take libpython's API from it)."""
    paths = [os.path.realpath(sys.executable)]
    library = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY")
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and library:
        paths.append(os.path.join(sysconfig.get_config_var("LIBDIR") or "", library))
    return [_read_elf_path(p) for p in paths if os.path.isfile(p)]


# --------------------------------------------------------------------------- analysis


@dataclass(frozen=True)
class StubSpec:
    """What a torch_npu build needs from CANN, and nothing that torch or the system provides."""

    torch_npu_version: str | None
    libraries: dict[str, tuple[str, ...]]  # soname -> sorted symbols its stub must export
    data_symbols: dict[str, str] = field(default_factory=dict)  # symbol -> "object" | "tls"; others are functions
    core_sonames: tuple[str, ...] = ()  # needed by `import torch_npu` itself; others (e.g. libatb.so) on demand
    needed_by: dict[str, tuple[str, ...]] = field(default_factory=dict)  # soname -> torch_npu files listing it
    machine: str = ""
    fingerprint: str = ""  # hash over the dynamic sections of the torch_npu files analysed
    source: str = ""
    torch_version: str | None = None
    torch_requirement: str | None = None
    weak_unresolved: tuple[str, ...] = ()  # weak references nobody provides: fine left at 0
    torch_skew: tuple[str, ...] = ()  # torch-namespace symbols this torch lacks (version mismatch)

    @property
    def symbol_count(self) -> int:
        return len({s for symbols in self.libraries.values() for s in symbols})

    def key(self) -> str:
        """Cache key: changes with torch_npu's version, its ELF files and this generator."""
        payload = json.dumps(
            [GENERATOR_VERSION, self.machine, self.fingerprint, self.libraries, self.data_symbols],
            sort_keys=True,
        )
        version = re.sub(r"[^A-Za-z0-9._-]", "_", self.torch_npu_version or "unknown")
        return f"cann-{version}-{self.machine}-{hashlib.sha256(payload.encode()).hexdigest()[:16]}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> StubSpec:
        raw = json.loads(text)
        tuple_fields = ("core_sonames", "weak_unresolved", "torch_skew")
        raw.update({name: tuple(raw[name]) for name in tuple_fields})
        raw["libraries"] = {k: tuple(v) for k, v in raw["libraries"].items()}
        raw["needed_by"] = {k: tuple(v) for k, v in raw["needed_by"].items()}
        return cls(**raw)


_NESTED_NAME = re.compile(r"_Z(?:T[VTISHW]|GV)?N[rVKRO]*(St|\d+)")


def _top_namespace(symbol: str) -> str | None:
    """Outermost C++ scope of a mangled nested name (_ZN2at4_ops... -> 'at'); None otherwise."""
    match = _NESTED_NAME.match(symbol)
    if not match:
        return None
    if match.group(1) == "St":
        return "std"
    length = int(match.group(1))
    return symbol[match.end() : match.end() + length]


def _closure(own: list[_Elf], cann: set[str]) -> dict[str, set[str]]:
    """For each torch_npu file, the CANN sonames in its dependency tree (through torch_npu's files)."""
    by_name = {name: elf for elf in own for name in elf.names}
    result: dict[str, set[str]] = {}

    def visit(elf: _Elf, seen: set[str]) -> set[str]:
        if elf.label in result:
            return result[elf.label]
        found = {n for n in elf.needed if n in cann}
        for name in elf.needed:
            dependency = by_name.get(name)
            if dependency is not None and dependency.label not in seen:
                found |= visit(dependency, seen | {dependency.label})
        result[elf.label] = found
        return found

    for elf in own:
        visit(elf, {elf.label})
    return result


def _preference(soname: str, referencing: list[_Elf]) -> tuple[int, int, str]:
    """Most referencing files list it directly, then the one they list earliest."""
    votes = sum(soname in elf.needed for elf in referencing)
    position = min((elf.needed.index(soname) for elf in referencing if soname in elf.needed), default=sys.maxsize)
    return (-votes, position, soname)


def _assign(
    references: dict[str, list[_Elf]], closures: dict[str, set[str]], cann: list[str]
) -> dict[str, tuple[str, ...]]:
    """Choose the stub soname(s) exporting each symbol.

    Real CANN's placement is unknowable without CANN; what matters is that the linker finds
    the symbol. It is put where every referencing file's dependency tree reaches, so the
    stubs also work through LD_LIBRARY_PATH without RTLD_GLOBAL; when no single soname is
    reachable from all of them, it is exported from several.
    """
    libraries: dict[str, list[str]] = {soname: [] for soname in cann}
    for symbol, referencing in sorted(references.items()):
        pending = [closures[elf.label] for elf in referencing if closures[elf.label]] or [set(cann)]
        while pending:
            pool = set.intersection(*pending) or pending[0]
            chosen = min(pool, key=lambda soname: _preference(soname, referencing))
            libraries[chosen].append(symbol)
            pending = [tree for tree in pending if chosen not in tree]
    return {soname: tuple(sorted(symbols)) for soname, symbols in libraries.items()}


def _analyse_files(
    own: list[_Elf],
    top_level: set[str],
    version: str | None,
    source: str,
    torch_requirement: str | None,
) -> StubSpec:
    """Drop what torch_npu, torch, the interpreter and the system provide; the rest is CANN's."""
    if not own:
        raise CannError(f"{source}: no native libraries found; is this a torch_npu installation?")
    torch_libs, torch_version = _torch_libraries()
    providers = own + torch_libs + _python_libraries()
    known_names = {name for elf in providers for name in elf.names}

    # Resolve every other DT_NEEDED as the system would; what stays unresolved is CANN's.
    missing: set[str] = set()
    queue = [(name, elf) for elf in providers for name in elf.needed]
    while queue:
        name, requester = queue.pop()
        if name in known_names or name in missing:
            continue
        system = _resolve_system_library(name, requester)
        if system is None:
            missing.add(name)
            continue
        known_names |= system.names | {name}
        providers.append(system)
        queue.extend((dependency, system) for dependency in system.needed)
    cann = sorted({name for elf in own for name in elf.needed if name in missing})

    provided = set().union(*(elf.defined for elf in providers))
    # Only a torch that does not match torch_npu's requirement leaves torch symbols unresolved;
    # then those (recognised by torch's own C++ namespaces) are version skew, not CANN.
    torch_namespaces = (
        set()
        if _satisfies(torch_version, torch_requirement)
        else {ns for lib in torch_libs for name in lib.defined if (ns := _top_namespace(name))}
    )
    references: dict[str, list[_Elf]] = {}
    kinds: dict[str, str] = {}
    weak, skew = set(), set()
    for elf in own:
        for symbol in elf.undefined:
            if symbol.name in provided:
                continue
            if symbol.version_file and symbol.version_file not in cann:
                continue  # a versioned reference (GLIBC_2.x, GLIBCXX_3.4...) belongs to that system library
            if symbol.weak:
                weak.add(symbol.name)
                continue
            if _top_namespace(symbol.name) in torch_namespaces:
                skew.add(symbol.name)
                continue
            references.setdefault(symbol.name, []).append(elf)
            if symbol.kind != "func":
                kinds[symbol.name] = symbol.kind

    closures = _closure(own, set(cann))
    core = sorted({s for elf in own if PurePosixPath(elf.label).name in top_level for s in closures[elf.label]})
    fingerprint = hashlib.sha256("".join(elf.digest for elf in sorted(own, key=lambda e: e.label)).encode())
    return StubSpec(
        torch_npu_version=version,
        libraries=_assign(references, closures, cann),
        data_symbols=dict(sorted(kinds.items())),
        core_sonames=tuple(core),
        needed_by={
            soname: tuple(sorted(PurePosixPath(e.label).name for e in own if soname in e.needed)) for soname in cann
        },
        machine=own[0].machine,
        fingerprint=fingerprint.hexdigest(),
        source=source,
        torch_version=torch_version,
        torch_requirement=torch_requirement,
        weak_unresolved=tuple(sorted(weak)),
        torch_skew=tuple(sorted(skew)),
    )


def _package_dir(package_dir: str | os.PathLike | None) -> Path:
    if package_dir is not None:
        return Path(package_dir)
    spec = find_spec("torch_npu")
    if spec is None or not spec.submodule_search_locations:
        raise CannError("torch_npu is not installed in this environment (pip install torch-npu).")
    return Path(next(iter(spec.submodule_search_locations)))


def _satisfies(version: str | None, requirement: str | None) -> bool:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion

    if version is None or requirement is None:
        return False
    try:
        return Requirement(requirement).specifier.contains(version, prereleases=True)
    except (InvalidRequirement, InvalidVersion):
        return False


def _torch_requirement(requirements: Iterable[str] | None) -> str | None:
    for requirement in requirements or ():
        if re.match(r"\s*torch\s*[=<>!~(;]", requirement) or requirement.strip() == "torch":
            return requirement.strip()
    return None


def analyse(package_dir: str | os.PathLike | None = None) -> StubSpec:
    """Read an installed torch_npu's ELF files and derive the CANN sonames and symbols they need."""
    directory = _package_dir(package_dir)
    own = [_read_elf_path(p) for p in _shared_objects(directory)]
    vendored = directory.parent / f"{directory.name}.libs"
    if vendored.is_dir():
        own += [_read_elf_path(p) for p in _shared_objects(vendored)]
    requirement, version = None, None
    for dist in metadata.distributions(path=[str(directory.parent)]):
        if re.sub(r"[-_.]+", "_", (dist.metadata["Name"] or "").lower()) == directory.name.lower():
            version, requirement = dist.version, _torch_requirement(dist.requires)
            break
    top_level = {p.name for p in directory.iterdir() if p.is_file()}
    return _analyse_files(own, top_level, version, str(directory), requirement)


def analyse_wheel(wheel: str | os.PathLike) -> StubSpec:
    """Same as analyse(), straight from a .whl: nothing is installed or imported."""
    wheel = Path(wheel)
    own: list[_Elf] = []
    top_level: set[str] = set()
    version, requirement = None, None
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            path = PurePosixPath(member.filename)
            if path.parent.name.endswith(".dist-info") and path.name == "METADATA":
                fields = email.message_from_bytes(archive.read(member))
                version = fields["Version"]
                requirement = _torch_requirement(fields.get_all("Requires-Dist"))
            elif ".so" in path.name and not member.is_dir():
                data = archive.read(member)
                if data[:4] == b"\x7fELF":
                    own.append(_read_elf(io.BytesIO(data), member.filename))
                    if len(path.parts) == 2:
                        top_level.add(path.name)
    return _analyse_files(own, top_level, version, str(wheel), requirement)


