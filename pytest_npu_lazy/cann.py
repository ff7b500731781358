"""CANN host stub: lets torch_npu's real Python code run on machines without Ascend software.

torch_npu's native libraries list CANN sonames (libhccl.so, libascendcl.so, ...) in
DT_NEEDED, so without CANN even ``import torch`` fails (torch auto-loads torch_npu).
This module reads those ELF files, works out which sonames and symbols only CANN can
provide (everything torch, libpython and the system provide is dropped), compiles one
small stub library per soname whose functions all fail with "no device", and loads the
stubs with RTLD_GLOBAL before torch is imported. The dynamic linker then matches them by
soname: ``import torch_npu`` works and ``torch.npu.is_available()`` is False. Child
processes get the same stubs through LD_LIBRARY_PATH (see CannStatus.env).

Nothing here imports torch, torch_npu or triton: the module must run before them.
"""

from __future__ import annotations

import argparse
import ctypes
import email
import fcntl
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Iterable, Iterator, Mapping


MODES = ("auto", "real", "stub", "off")

# Bump whenever the analysis or the generated C changes: it is part of every cache key.
GENERATOR_VERSION = "1"

# ACL_ERROR_RT_NO_DEVICE from CANN's public rt_error_codes.h: the honest answer of every stub.
NO_DEVICE_ERROR = 207004

ENV_MODE = "PYTEST_NPU_LAZY_CANN"
ENV_CACHE = "PYTEST_NPU_LAZY_CACHE"
ENV_TRACE = "PYTEST_NPU_LAZY_CANN_TRACE"
MANIFEST_NAME = "npu-lazy-stub.json"
STUB_MARKER_SYMBOL = "pytest_npu_lazy_cann_stub"

# Zeroed storage behind a stubbed data symbol: the referencing side does not record a size.
DATA_SYMBOL_BYTES = 4096

# Getters following CANN's "fill *count, return aclError" convention: the stub writes 0 devices.
_DEVICE_COUNT_GETTER = re.compile(r"^[A-Za-z]\w*GetDeviceCount$")

_STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE = 1, 2, 10
_STT_OBJECT, _STT_COMMON, _STT_TLS = 1, 5, 6
_SHN_UNDEF = 0
_VERSION_INDEX = 0x7FFF  # .gnu.version entries carry a "hidden" flag in bit 15


class CannError(Exception):
    """Raised with a message that says what is wrong and how to fix it."""


# --------------------------------------------------------------------------- ELF reading


@dataclass(frozen=True)
class _Undefined:
    name: str
    weak: bool
    kind: str  # "func" | "object" | "tls"
    version_file: str | None  # the library named by the symbol's version requirement


@dataclass
class _Elf:
    label: str
    soname: str | None
    needed: tuple[str, ...]
    machine: str
    elfclass: int
    defined: frozenset[str]
    undefined: tuple[_Undefined, ...]
    digest: str

    @property
    def names(self) -> set[str]:
        """Names a DT_NEEDED entry may use for this file."""
        base = PurePosixPath(self.label).name
        return {base, self.soname} if self.soname else {base}


def _read_elf(stream: BinaryIO, label: str) -> _Elf:
    """Read the dynamic-linking view of one ELF file (struct-parsed: pyelftools per symbol is slow)."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        elf = ELFFile(stream)
    except ELFError as exc:
        raise CannError(f"{label}: not a readable ELF file ({exc})") from exc
    dynsym = next((s for s in elf.iter_sections() if s["sh_type"] == "SHT_DYNSYM"), None)
    dynamic = next((s for s in elf.iter_sections() if s["sh_type"] == "SHT_DYNAMIC"), None)
    if dynsym is None or dynamic is None:
        raise CannError(f"{label}: no dynamic symbol table; is it a shared library?")
    needed, soname = [], None
    for tag in dynamic.iter_tags():
        if tag.entry.d_tag == "DT_NEEDED":
            needed.append(tag.needed)
        elif tag.entry.d_tag == "DT_SONAME":
            soname = tag.soname

    version_files: dict[int, str] = {}
    versym = b""
    for section in elf.iter_sections():
        if section["sh_type"] == "SHT_GNU_verneed":
            for verneed, auxiliaries in section.iter_versions():
                for aux in auxiliaries:
                    version_files[aux["vna_other"]] = verneed.name
        elif section["sh_type"] == "SHT_GNU_versym":
            versym = section.data()

    endian = "<" if elf.little_endian else ">"
    symbol_format = endian + ("IBBHQQ" if elf.elfclass == 64 else "IIIBBH")
    versym_values = struct.unpack(f"{endian}{len(versym) // 2}H", versym) if versym else ()
    symbols = dynsym.data()
    strings = elf.get_section(dynsym["sh_link"]).data()

    defined: set[str] = set()
    undefined: list[_Undefined] = []
    for index, fields in enumerate(struct.iter_unpack(symbol_format, symbols)):
        if elf.elfclass == 64:
            name_offset, info, other, shndx, _value, _size = fields
        else:
            name_offset, _value, _size, info, other, shndx = fields
        if name_offset == 0:
            continue
        name = strings[name_offset : strings.index(b"\0", name_offset)].decode("utf-8", "replace")
        bind, symbol_type = info >> 4, info & 0xF
        if shndx == _SHN_UNDEF:
            version_index = versym_values[index] & _VERSION_INDEX if versym_values else 0
            kind = {_STT_OBJECT: "object", _STT_COMMON: "object", _STT_TLS: "tls"}.get(symbol_type, "func")
            undefined.append(_Undefined(name, bind == _STB_WEAK, kind, version_files.get(version_index)))
        elif bind in (_STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE) and (other & 0x3) in (0, 3):
            defined.add(name)

    digest = hashlib.sha256()
    for part in (symbols, strings, versym, "\0".join(needed).encode()):
        digest.update(hashlib.sha256(part).digest())
    return _Elf(
        label=label,
        soname=soname,
        needed=tuple(needed),
        machine=str(elf["e_machine"]).removeprefix("EM_").lower(),
        elfclass=elf.elfclass,
        defined=frozenset(defined),
        undefined=tuple(undefined),
        digest=digest.hexdigest(),
    )


def _read_elf_path(path: str | os.PathLike) -> _Elf:
    with open(path, "rb") as stream:
        return _read_elf(stream, os.fspath(path))


def _is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as stream:
            return stream.read(4) == b"\x7fELF"
    except OSError:
        return False


def _shared_objects(directory: Path) -> list[Path]:
    """ELF shared objects below a directory (names containing '.so'), sorted for stable keys."""
    found = []
    for root, _dirs, files in os.walk(directory):
        for name in files:
            if ".so" in name:
                path = Path(root, name)
                if not path.is_symlink() and _is_elf(path):
                    found.append(path)
    return sorted(found)


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
    return [_read_elf_path(p) for p in paths], _distribution_version("torch")


def _python_libraries() -> list[_Elf]:
    """The interpreter's exported symbols (extension modules take libpython's API from it)."""
    paths = [os.path.realpath(sys.executable)]
    library = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY")
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and library:
        paths.append(os.path.join(sysconfig.get_config_var("LIBDIR") or "", library))
    return [_read_elf_path(p) for p in paths if os.path.isfile(p)]


def _distribution_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


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


# --------------------------------------------------------------------------- building


_C_PRELUDE = """\
/* {soname}: CANN host stub generated by pytest-npu-lazy (generator {generator}) for torch_npu {version}.
 * There is no NPU behind it: every function fails with ACL_ERROR_RT_NO_DEVICE ({error}) and
 * device-count getters report 0 devices. Set {trace_env}=1 to log each call to stderr. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char {marker}[] = "pytest-npu-lazy CANN host stub {generator}: no NPU device";

static void trace(const char *symbol)
{{
    static int enabled = -1;
    if (enabled < 0) {{
        const char *value = getenv("{trace_env}");
        enabled = value != NULL && *value != '\\0' && strcmp(value, "0") != 0;
    }}
    if (enabled) {{
        static const char prefix[] = "pytest-npu-lazy CANN stub: ";
        static const char suffix[] = " -> {error} (no NPU device)\\n";
        ssize_t written = write(2, prefix, sizeof prefix - 1);
        written += write(2, symbol, strlen(symbol));
        written += write(2, suffix, sizeof suffix - 1);
        (void)written;
    }}
}}

#define FAIL(id, symbol) \\
    long id(void) __asm__(symbol); \\
    long id(void) {{ trace(symbol); return {error}; }}
#define NO_DEVICES(id, symbol) \\
    long id(uint32_t *count) __asm__(symbol); \\
    long id(uint32_t *count) {{ trace(symbol); if (count != NULL) *count = 0; return {error}; }}
#define DATA(id, symbol) \\
    char id[{data_bytes}] __asm__(symbol) __attribute__((aligned(64)));
#define TLS_DATA(id, symbol) \\
    __thread char id[{data_bytes}] __asm__(symbol) __attribute__((aligned(64)));

"""

_SYMBOL_NAME = re.compile(r"^[A-Za-z_.$][\w.$]*$")


def _stub_source(spec: StubSpec, soname: str) -> str:
    lines = [
        _C_PRELUDE.format(
            soname=soname,
            generator=GENERATOR_VERSION,
            version=spec.torch_npu_version or "(unknown version)",
            error=NO_DEVICE_ERROR,
            trace_env=ENV_TRACE,
            marker=STUB_MARKER_SYMBOL,
            data_bytes=DATA_SYMBOL_BYTES,
        )
    ]
    for index, symbol in enumerate(spec.libraries[soname]):
        if not _SYMBOL_NAME.match(symbol):
            raise CannError(f"cannot stub symbol {symbol!r} of {soname}: not a plain ELF symbol name")
        kind = spec.data_symbols.get(symbol, "func")
        if kind == "object":
            macro = "DATA"
        elif kind == "tls":
            macro = "TLS_DATA"
        else:
            macro = "NO_DEVICES" if _DEVICE_COUNT_GETTER.match(symbol) else "FAIL"
        lines.append(f'{macro}(npu_lazy_stub_{index}, "{symbol}")')
    return "\n".join(lines) + "\n"


def _find_compiler(compiler: str | None) -> list[str]:
    requested = compiler or os.environ.get("CC")
    candidates = [shlex.split(requested)] if requested else [["cc"], ["gcc"], ["clang"]]
    for command in candidates:
        if command and shutil.which(command[0]):
            return [shutil.which(command[0]) or command[0], *command[1:]]
    looked_for = requested if requested else "cc, gcc, clang"
    raise CannError(
        f"the CANN host stub needs a C compiler and none was found (looked for {looked_for}). "
        "Install one (Debian/Ubuntu: apt-get install gcc; Fedora/RHEL: dnf install gcc; "
        "Alpine: apk add gcc musl-dev) or set CC; or use --npu-lazy-cann=real on a machine with CANN."
    )


def _compile(compiler: list[str], source: Path, output: Path, soname: str) -> None:
    command = [*compiler, "-shared", "-fPIC", "-O1", "-w", f"-Wl,-soname,{soname}", "-o", str(output), str(source)]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as exc:
        raise CannError(f"compiling the {soname} stub failed: {shlex.join(command)}: {exc}") from exc
    if result.returncode != 0:
        raise CannError(
            f"compiling the {soname} stub failed (exit {result.returncode}): {shlex.join(command)}\n"
            f"{(result.stderr or result.stdout).strip()[-2000:]}"
        )


def default_cache_dir() -> Path:
    """$PYTEST_NPU_LAZY_CACHE, else $XDG_CACHE_HOME/pytest-npu-lazy, else ~/.cache/pytest-npu-lazy."""
    if os.environ.get(ENV_CACHE):
        return Path(os.environ[ENV_CACHE])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "pytest-npu-lazy")


def _writable_dir(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=path, prefix=".write-test.")
    except OSError as exc:
        raise CannError(
            f"the CANN stub cache {path} is not writable ({exc}); set {ENV_CACHE} to a writable directory"
        ) from exc
    probe.close()
    return path


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Exclusive lock across processes (xdist workers build the same stub at the same time)."""
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read_manifest(stub_dir: Path) -> dict:
    try:
        return json.loads((stub_dir / MANIFEST_NAME).read_text())
    except (OSError, ValueError) as exc:
        raise CannError(f"{stub_dir} is not a complete CANN stub build ({MANIFEST_NAME}: {exc})") from exc


def build_stub(
    spec: StubSpec, cache_dir: str | os.PathLike | None = None, compiler: str | None = None
) -> Path:
    """Compile one stub library per CANN soname into cache_dir/<spec.key()>, or reuse it.

    The build happens in a private temporary directory that is renamed into place, under a
    file lock, so concurrent builders never see or leave a half-written stub.
    """
    from concurrent.futures import ThreadPoolExecutor

    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    final = root / spec.key()
    if (final / MANIFEST_NAME).is_file():
        return final
    with _locked(_writable_dir(root) / f".{spec.key()}.lock"):
        if (final / MANIFEST_NAME).is_file():
            return final
        command = _find_compiler(compiler)
        started = time.perf_counter()
        staging = Path(tempfile.mkdtemp(prefix=f".{spec.key()}.", dir=root))
        try:
            sources = staging / "src"
            sources.mkdir()
            jobs = []
            for soname in spec.libraries:
                source = sources / f"{soname}.c"
                source.write_text(_stub_source(spec, soname))
                jobs.append((source, staging / soname, soname))
            with ThreadPoolExecutor(max_workers=max(1, min(len(jobs), os.cpu_count() or 1))) as pool:
                for future in [pool.submit(_compile, command, *job) for job in jobs]:
                    future.result()
            manifest = {
                "generator": GENERATOR_VERSION,
                "key": spec.key(),
                "torch_npu_version": spec.torch_npu_version,
                "machine": spec.machine,
                "error_code": NO_DEVICE_ERROR,
                "compiler": command,
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "build_seconds": round(time.perf_counter() - started, 3),
                "load_order": sorted(spec.libraries),
                "libraries": {
                    soname: {
                        "file": soname,
                        "symbols": len(symbols),
                        "data_symbols": sum(s in spec.data_symbols for s in symbols),
                    }
                    for soname, symbols in spec.libraries.items()
                },
                "total_symbols": spec.symbol_count,
            }
            (staging / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
            if final.exists():  # left behind without a manifest by a killed pre-rename build tool
                shutil.rmtree(final)
            os.rename(staging, final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return final


_LOADED: list[ctypes.CDLL] = []


def load_stub(stub_dir: str | os.PathLike) -> None:
    """Load every stub with RTLD_GLOBAL so torch_npu's DT_NEEDED entries match them by soname.

    The stubs need nothing from each other, so any order is dependency-safe; the
    manifest's order keeps it reproducible.
    """
    stub_dir = Path(stub_dir)
    manifest = _read_manifest(stub_dir)
    for soname in manifest["load_order"]:
        path = stub_dir / manifest["libraries"][soname]["file"]
        try:
            _LOADED.append(ctypes.CDLL(os.fspath(path), mode=ctypes.RTLD_GLOBAL))
        except OSError as exc:
            raise CannError(f"cannot load the CANN stub {path}: {exc}; delete {stub_dir} to rebuild it") from exc


# --------------------------------------------------------------------------- activation


@dataclass(frozen=True)
class CannStatus:
    """What activate() did, in a form the plugin can print and hand to child processes."""

    requested: str
    active: str  # "real" | "stub" | "off" | "absent"
    version: str | None
    stub_dir: str | None
    detail: str
    location: str | None = None  # real CANN's toolkit directory
    sonames: int = 0
    symbols: int = 0
    cache_dir: str | None = None
    library_dirs: tuple[str, ...] = ()  # what a child needs on LD_LIBRARY_PATH to load the same CANN

    def header(self) -> str:
        """One line for pytest's report header; the stub always says it is one."""
        if self.active == "stub":
            counts = f"{self.sonames} sonames, {self.symbols} symbols"
            return f"CANN: host stub - no NPU device ({counts}; {self.stub_dir})"
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
        env = {ENV_MODE: self.active if self.active in ("real", "stub", "off") else self.requested}
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


def _activate_stub(mode: str, spec: StubSpec, cache_root: Path, why: str) -> CannStatus:
    if "torch" in sys.modules:
        raise CannError(
            "the CANN host stub must be loaded before torch is imported, but torch is already imported. "
            "Load the plugin first (it is loaded through its pytest11 entry point, or pass -p npu_lazy) "
            "and move any `import torch` out of code that runs before it (conftest.py plugins, sitecustomize)."
        )
    stub_dir = build_stub(spec, cache_root)
    load_stub(stub_dir)
    detail = f"every CANN call fails with {NO_DEVICE_ERROR} ({why})"
    return _stub_status(mode, stub_dir, detail, len(spec.libraries), spec.symbol_count, cache_root)


def _stub_status(mode: str, stub_dir: Path, detail: str, sonames: int, symbols: int, cache_root: Path) -> CannStatus:
    return CannStatus(
        requested=mode,
        active="stub",
        version=None,
        stub_dir=str(stub_dir),
        detail=f"CANN host stub, no NPU device: {detail}",
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
    if stub_dir is not None and mode != "real":
        manifest = _read_manifest(stub_dir)
        detail = f"torch_npu was already imported with the stub in {stub_dir}"
        return _stub_status(mode, stub_dir, detail, len(manifest["libraries"]), manifest["total_symbols"], cache_root)
    if stub_dir is None and mode != "stub":
        root = _toolkit_root({})
        version = _cann_version([root] if root else [])
        detail = "torch_npu was already imported, with the CANN of the environment"
        return CannStatus(mode, "real", version, None, detail, location=root, cache_dir=str(cache_root))
    running = "the CANN host stub" if stub_dir else "real CANN"
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
    spec = _installed_spec(package_dir, cache_root)
    if mode == "stub":
        return _activate_stub(mode, spec, cache_root, "requested with mode 'stub'")
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


_DEVICE_CHECK = """\
import json
try:
    import torch, torch_npu
    answer = {"available": bool(torch.npu.is_available()), "count": int(torch.npu.device_count())}
except Exception as error:
    while error.__cause__ is not None or error.__context__ is not None:
        error = error.__cause__ or error.__context__  # torch's autoload wraps the real reason
    answer = {"error": f"{type(error).__name__}: {error}"}
print(json.dumps(answer))
"""


def npu_device_usable(timeout: float = 120) -> tuple[bool, str]:
    """Ask a fresh interpreter whether torch_npu sees an NPU (initialising one here would break fork)."""
    try:
        command = [sys.executable, "-c", _DEVICE_CHECK]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"checking for an NPU timed out after {timeout:g} s"
    except OSError as exc:
        return False, f"could not start {sys.executable}: {exc}"
    lines = result.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1])
    except (IndexError, ValueError):
        error = (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1]
        return False, f"the NPU check crashed: {error}"
    if "error" in answer:
        return False, f"import torch_npu failed: {answer['error']}"
    stub = " (the CANN host stub is active)" if os.environ.get(ENV_MODE) == "stub" else ""
    if not answer["available"] or answer["count"] < 1:
        return False, f"torch.npu.is_available() is {answer['available']}, {answer['count']} NPU devices{stub}"
    return True, f"{answer['count']} NPU device(s) available"


# --------------------------------------------------------------------------- command line


def _missing_exports(spec: StubSpec, stub_dir: Path) -> list[str]:
    """Symbols a built stub should export but does not (read back from the .so files)."""
    problems = []
    for soname, symbols in spec.libraries.items():
        elf = _read_elf_path(stub_dir / soname)
        if elf.soname != soname:
            problems.append(f"{soname}: DT_SONAME is {elf.soname!r}")
        problems += [f"{soname}: {symbol}" for symbol in symbols if symbol not in elf.defined]
    return problems


def _report(spec: StubSpec, build: str | os.PathLike | None, do_build: bool) -> dict:
    result = {
        "source": spec.source,
        "torch_npu_version": spec.torch_npu_version,
        "torch_version": spec.torch_version,
        "torch_requirement": spec.torch_requirement,
        "machine": spec.machine,
        "key": spec.key(),
        "libraries": {soname: len(symbols) for soname, symbols in spec.libraries.items()},
        "needed_by": spec.needed_by,
        "core_sonames": list(spec.core_sonames),
        "sonames": len(spec.libraries),
        "symbols": spec.symbol_count,
        "data_symbols": spec.data_symbols,
        "weak_unresolved": len(spec.weak_unresolved),
        "torch_skew": len(spec.torch_skew),
    }
    if do_build:
        with tempfile.TemporaryDirectory(prefix="npu-lazy-cann-") as scratch:
            started = time.perf_counter()
            try:
                stub_dir = build_stub(spec, build if build is not None else scratch)
                seconds = time.perf_counter() - started
                problems = _missing_exports(spec, stub_dir)
                result["build"] = {
                    "ok": not problems,
                    "seconds": round(seconds, 3),
                    "cold": build is None,
                    "stub_dir": str(stub_dir) if build is not None else None,
                    "problems": problems,
                }
            except CannError as exc:
                result["build"] = {"ok": False, "seconds": round(time.perf_counter() - started, 3), "error": str(exc)}
    return result


def _print_report(report: dict) -> None:
    version = report["torch_npu_version"] or "(unknown version)"
    print(f"torch_npu {version}  [{report['machine']}]  {report['source']}")
    print(f"  torch installed: {report['torch_version']}; torch_npu requires: {report['torch_requirement']}")
    width = max((len(s) for s in report["libraries"]), default=6)
    print(f"  {'soname':<{width}}  symbols  core  needed by")
    for soname, count in report["libraries"].items():
        core = "yes" if soname in report["core_sonames"] else "no"
        print(f"  {soname:<{width}}  {count:>7}  {core:<4}  {', '.join(report['needed_by'][soname])}")
    print(
        f"  total: {report['sonames']} sonames, {report['symbols']} symbols "
        f"({len(report['data_symbols'])} data); weak left unresolved: {report['weak_unresolved']}; "
        f"torch symbols missing from the installed torch (version skew, not stubbed): {report['torch_skew']}"
    )
    build = report.get("build")
    if build:
        if build["ok"]:
            where = f" -> {build['stub_dir']}" if build["stub_dir"] else ""
            print(f"  build: ok in {build['seconds']:.3f} s ({'cold' if build['cold'] else 'cache'}){where}")
        else:
            print(f"  build: FAILED after {build['seconds']:.3f} s: {build.get('error') or build['problems'][:5]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_npu_lazy.cann",
        description="Show what the installed torch_npu (or a wheel) needs from CANN; optionally build the stub.",
    )
    parser.add_argument("--wheel", action="append", default=[], help="analyse this .whl instead (repeatable)")
    parser.add_argument("--build", action="store_true", help="also compile the stub (cold, temp dir) and time it")
    parser.add_argument("--cache-dir", help="build into this cache instead of a throwaway directory")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = parser.parse_args(argv)
    reports = []
    try:
        specs = [analyse_wheel(w) for w in args.wheel] if args.wheel else [analyse()]
    except CannError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for spec in specs:
        reports.append(_report(spec, args.cache_dir, args.build))
        if not args.json:
            _print_report(reports[-1])
    if args.json:
        print(json.dumps(reports, indent=2))
    return 0 if all(r.get("build", {"ok": True})["ok"] for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
