"""ELF reading: the dynamic section, needed sonames and undefined symbols of torch_npu's libraries (pyelftools)."""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from .common import CannError

if TYPE_CHECKING:
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.gnuversions import GNUVerNeedSection

# --------------------------------------------------------------------------- ELF reading

_STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE = 1, 2, 10
_STT_OBJECT, _STT_COMMON, _STT_TLS = 1, 5, 6
_SHN_UNDEF = 0
_VERSION_INDEX = 0x7FFF  # .gnu.version entries carry a "hidden" flag in bit 15



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
    tag: Any  # pyelftools sets .needed and .soname on the DT_NEEDED and DT_SONAME tags at run time
    for tag in cast("DynamicSection", dynamic).iter_tags():  # SHT_DYNAMIC: pyelftools gives a DynamicSection
        if tag.entry.d_tag == "DT_NEEDED":
            needed.append(tag.needed)
        elif tag.entry.d_tag == "DT_SONAME":
            soname = tag.soname

    version_files: dict[int, str | None] = {}
    versym = b""
    for section in elf.iter_sections():
        if section["sh_type"] == "SHT_GNU_verneed":
            for verneed, auxiliaries in cast("GNUVerNeedSection", section).iter_versions():
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


