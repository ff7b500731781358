"""Tests for the CANN host stub (pytest_npu_lazy.cann).

Anything that loads a stub or imports torch runs in a fresh interpreter: loading is
per process and cannot be undone. ELF facts are checked with pyelftools directly, not
through the module's own reader.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import zipfile
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from pytest_npu_lazy import cann

from cann_support import clean_env, run_python



def installed_dir(name: str) -> Path:
    """The directory of an installed package (torch, torch_npu), or a skip saying it is not installed."""
    spec = find_spec(name)
    if spec is None:
        pytest.skip(f"needs {name}, which is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def activation_error(mode: str, stub_cache: Path, first: str = "pass", **env: str) -> dict:
    """``cann.activate(mode)`` in a fresh interpreter after ``first``: its CannError message (or None) and the mode it exported."""
    return run_python(
        f"""
        import json, os
        {first}
        from pytest_npu_lazy import cann
        try:
            cann.activate({mode!r}, cache_dir={str(stub_cache)!r})
            message = None
        except cann.CannError as exc:
            message = str(exc)
        print(json.dumps({{"message": message, "mode_env": os.environ.get(cann.ENV_MODE)}}))
        """,
        **env,
    )


def elf_view(path: Path) -> tuple[str | None, list[str], dict[str, tuple[str, str, int]]]:
    """(soname, DT_NEEDED, defined symbol -> (type, bind, size)) read with pyelftools."""
    with open(path, "rb") as stream:
        elf = ELFFile(stream)
        dynamic = elf.get_section_by_name(".dynamic")
        soname = next((t.soname for t in dynamic.iter_tags() if t.entry.d_tag == "DT_SONAME"), None)
        needed = [t.needed for t in dynamic.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
        defined = {
            s.name: (s["st_info"]["type"], s["st_info"]["bind"], s["st_size"])
            for s in elf.get_section_by_name(".dynsym").iter_symbols()
            if s.name and s["st_shndx"] != "SHN_UNDEF"
        }
    return soname, needed, defined


def write_script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return str(path)


@pytest.fixture(scope="session")
def shared_stub(installed_spec, stub_cache) -> Path:
    return cann.build_stub(installed_spec, stub_cache)


# --------------------------------------------------------------------------- a fake torch_npu

FAKE_CANN_C = r"""
int fakecannInit(void) { return 0; }
int fakecannGetDeviceCount(unsigned *count) { *count = 8; return 0; }
int fakecann_table[16];
__thread int fakecann_tls;
int device_open(void) __asm__("_ZN8fakecann6Device4openEv");
int device_open(void) { return 0; }
"""

FAKE_NPU_C = r"""
#include <stdlib.h>
extern int fakecannInit(void);
extern int fakecannGetDeviceCount(unsigned *count);
extern int fakecann_table[16];
extern __thread int fakecann_tls;
extern int device_open(void) __asm__("_ZN8fakecann6Device4openEv");
extern int optional_hook(void) __attribute__((weak));
long call_init(void) { return fakecannInit(); }
long call_count(unsigned *count) { return fakecannGetDeviceCount(count); }
long call_mangled(void) { return device_open(); }
int *table(void) { return fakecann_table; }
int *tls(void) { return &fakecann_tls; }
int has_hook(void) { return optional_hook != 0; }
void *allocate(void) { return malloc(8); }
"""

HELPER_C = r"""
int helper_a(void) { return 1; }
#ifdef WITH_B
int helper_b(void) { return 2; }
#endif
"""

FAKE_OTHER_C = r"""
extern int fakecannInit(void);
long call_init_b(void) { return fakecannInit(); }
"""

FAKE_EXTRA_C = r"""
extern int helper_b(void);
long call_helper(void) { return helper_b(); }
"""

FAKE_CANN_SYMBOLS = (
    "_ZN8fakecann6Device4openEv",
    "fakecannGetDeviceCount",
    "fakecannInit",
    "fakecann_table",
    "fakecann_tls",
)


@pytest.fixture(scope="session")
def fake_package(tmp_path_factory) -> Path:
    """A 'torch_npu' whose libraries need libfakecann.so and libfakecann_b.so, which then disappear.

    Both fake CANN libraries define fakecannInit and each fake torch_npu library is linked
    against only one of them, so the stub must export it from both.

    lib/libfake_extra.so references helper_b@HELPER_1.0 from the package's own libhelper.so,
    which was rebuilt without it: a versioned reference is the named library's business, never CANN's.
    """
    installed_dir("torch")  # the analysis tells torch_npu's symbols from torch's
    root = tmp_path_factory.mktemp("fake")
    package = root / "fakenpu"
    (package / "lib").mkdir(parents=True)
    for name, text in [("fakecann.c", FAKE_CANN_C), ("npu.c", FAKE_NPU_C), ("helper.c", HELPER_C),
                       ("extra.c", FAKE_EXTRA_C), ("other.c", FAKE_OTHER_C)]:
        (root / name).write_text(text)
    (root / "helper.map").write_text("HELPER_1.0 { global: helper_*; local: *; };\n")

    def cc(*args):
        subprocess.run(["cc", "-shared", "-fPIC", *map(str, args)], check=True)

    cc("-Wl,-soname,libfakecann.so", "-o", root / "libfakecann.so", root / "fakecann.c")
    cc("-o", package / "libfake_npu.so", root / "npu.c", f"-L{root}", "-lfakecann")
    cc("-Wl,-soname,libfakecann_b.so", "-o", root / "libfakecann_b.so", root / "fakecann.c")
    cc("-o", package / "libfake_other.so", root / "other.c", f"-L{root}", "-lfakecann_b")
    cc("-DWITH_B", f"-Wl,--version-script={root / 'helper.map'}", "-Wl,-soname,libhelper.so",
       "-o", root / "libhelper.so", root / "helper.c")
    cc("-o", package / "lib" / "libfake_extra.so", root / "extra.c", f"-L{root}", "-lhelper")
    cc(f"-Wl,--version-script={root / 'helper.map'}", "-Wl,-soname,libhelper.so",
       "-o", package / "lib" / "libhelper.so", root / "helper.c")
    for library in ("libfakecann.so", "libfakecann_b.so", "libhelper.so"):
        (root / library).unlink()
    return package


def test_fake_package_analysis_keeps_exactly_the_missing_library_symbols(fake_package):
    spec = cann.analyse(fake_package)
    assert spec.libraries == {"libfakecann.so": FAKE_CANN_SYMBOLS, "libfakecann_b.so": ("fakecannInit",)}
    assert spec.data_symbols == {"fakecann_table": "object", "fakecann_tls": "tls"}
    assert spec.core_sonames == ("libfakecann.so", "libfakecann_b.so")
    assert spec.needed_by == {"libfakecann.so": ("libfake_npu.so",), "libfakecann_b.so": ("libfake_other.so",)}
    assert "optional_hook" in spec.weak_unresolved  # weak: fine unresolved, so not stubbed
    assert spec.symbol_count == 5  # not malloc (libc's), helper_b (versioned: libhelper's), nor own symbols


def test_fake_stub_exports_each_symbol_with_the_right_kind(fake_package, tmp_path):
    spec = cann.analyse(fake_package)
    stub_dir = cann.build_stub(spec, tmp_path)
    soname, needed, defined = elf_view(stub_dir / "libfakecann.so")
    assert soname == "libfakecann.so"
    assert not [n for n in needed if "fake" in n]
    assert cann.common.RECORDER_SONAME in needed  # every stubbed call is reported to the device-call recorder
    assert defined["fakecannInit"][0] == "STT_FUNC"
    assert defined["_ZN8fakecann6Device4openEv"][0] == "STT_FUNC"
    assert defined["fakecann_table"][:2] == ("STT_OBJECT", "STB_GLOBAL")
    assert defined["fakecann_table"][2] >= 16 * 4
    assert defined["fakecann_tls"][0] == "STT_TLS"
    assert defined[cann.STUB_MARKER_SYMBOL][0] == "STT_OBJECT"


@pytest.mark.parametrize("route", ["rtld_global", "ld_library_path"])
def test_fake_library_runs_against_the_stub(fake_package, tmp_path, route):
    """Every call fails with 'no device'; device counts come back as 0; data is zeroed storage."""
    stub_dir = cann.build_stub(cann.analyse(fake_package), tmp_path)
    answer = run_python(
        f"""
        import ctypes, json
        from pytest_npu_lazy import cann
        if {route!r} == "rtld_global":
            cann.load_stub({str(stub_dir)!r})
        lib = ctypes.CDLL({str(fake_package / "libfake_npu.so")!r})
        other = ctypes.CDLL({str(fake_package / "libfake_other.so")!r})
        other.call_init_b.restype = ctypes.c_long
        for name in ("call_init", "call_count", "call_mangled"):
            getattr(lib, name).restype = ctypes.c_long
        lib.table.restype = ctypes.POINTER(ctypes.c_int * 16)
        lib.tls.restype = ctypes.c_void_p
        count = ctypes.c_uint(77)
        print(json.dumps({{
            "init": lib.call_init(), "init_b": other.call_init_b(),
            "count_rc": lib.call_count(ctypes.byref(count)), "count": count.value,
            "mangled": lib.call_mangled(), "table": list(lib.table().contents), "tls": bool(lib.tls()),
            "hook": lib.has_hook(), "global": hasattr(ctypes.CDLL(None), "fakecannInit"),
        }}))
        """,
        PYTEST_NPU_LAZY_CANN_TRACE="1",
        **({"LD_LIBRARY_PATH": str(stub_dir)} if route == "ld_library_path" else {}),
    )
    assert answer["init"] == answer["init_b"] == answer["count_rc"] == answer["mangled"] == cann.NO_DEVICE_ERROR
    assert answer["count"] == 0
    assert answer["table"] == [0] * 16
    assert answer["tls"] and answer["hook"] == 0
    assert answer["global"] is (route == "rtld_global")  # load_stub makes the symbols globally visible
    assert "fakecannInit -> 207004 (no NPU device)" in answer["stderr"]


def test_analyse_wheel_matches_the_unpacked_package(fake_package, tmp_path):
    torch_version = metadata.version("torch")  # importing torch here would need CANN
    wheel = tmp_path / "fakenpu-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path in sorted(fake_package.rglob("*.so")):
            archive.write(path, f"fakenpu/{path.relative_to(fake_package)}")
        archive.writestr(
            "fakenpu-1.0.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: fakenpu\nVersion: 1.0\nRequires-Dist: torch=={torch_version}\n\n",
        )
    from_wheel = cann.analyse_wheel(wheel)
    from_dir = cann.analyse(fake_package)
    assert from_wheel.libraries == from_dir.libraries
    assert from_wheel.data_symbols == from_dir.data_symbols
    assert from_wheel.core_sonames == from_dir.core_sonames
    assert from_wheel.torch_npu_version == "1.0"
    assert from_wheel.torch_requirement == f"torch=={torch_version}"
    assert from_wheel.fingerprint == from_dir.fingerprint


# --------------------------------------------------------------------------- the installed torch_npu


def test_installed_torch_npu_needs_from_outside_only_what_nothing_here_provides(installed_spec):
    own = sorted(p for p in installed_dir("torch_npu").rglob("*.so*") if p.is_file())
    views = {p: elf_view(p) for p in own}
    needed = {n for _, deps, _ in views.values() for n in deps}
    local_names = {p.name for p in own} | {v[0] for v in views.values() if v[0]}
    torch_names = {p.name for p in (installed_dir("torch") / "lib").glob("*.so*")}
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    system = subprocess.run([ldconfig, "-p"], capture_output=True, text=True).stdout
    known_to_system = {line.split()[0] for line in system.splitlines()[1:] if line.strip()}

    stubbed = set(installed_spec.libraries)
    assert stubbed <= needed
    for soname in stubbed:
        assert soname not in local_names | torch_names | known_to_system, soname
    # ...and every soname torch_npu needs that is not stubbed is one something here provides.
    assert needed - stubbed <= local_names | torch_names | known_to_system
    assert {"libhccl.so", "libascendcl.so"} <= set(installed_spec.core_sonames)


def test_installed_stub_symbols_are_undefined_in_torch_npu_and_absent_from_torch(installed_spec):
    symbols = {s for group in installed_spec.libraries.values() for s in group}
    assert "aclrtGetDeviceCount" in symbols and "aclrtSetDevice" in symbols
    assert not symbols & {"malloc", "free", "memcpy", "PyLong_FromLong", "dlopen"}
    undefined: set[str] = set()
    for path in installed_dir("torch_npu").rglob("*.so*"):
        with open(path, "rb") as stream:
            dynsym = ELFFile(stream).get_section_by_name(".dynsym")
            undefined |= {s.name for s in dynsym.iter_symbols() if s["st_shndx"] == "SHN_UNDEF"}
    assert symbols <= undefined
    for path in (installed_dir("torch") / "lib").glob("*.so*"):
        with open(path, "rb") as stream:
            lookup = ELFFile(stream).get_section_by_name(".gnu.hash")
            for symbol in symbols:
                found = lookup.get_symbol(symbol)
                assert found is None or found["st_shndx"] == "SHN_UNDEF", (symbol, path.name)


def test_installed_wheel_analysis_agrees_with_the_installed_package(installed_spec, tmp_path):
    wheel = tmp_path / f"torch_npu-{installed_spec.torch_npu_version}-cp3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_STORED) as archive:
        package = installed_dir("torch_npu")
        for path in sorted(package.rglob("*.so*")):
            archive.write(path, f"torch_npu/{path.relative_to(package)}")
    spec = cann.analyse_wheel(wheel)
    assert spec.libraries == installed_spec.libraries
    assert spec.core_sonames == installed_spec.core_sonames
    assert spec.fingerprint == installed_spec.fingerprint


def test_key_follows_content_not_location(installed_spec):
    key = installed_spec.key()
    assert key.startswith(f"cann-{installed_spec.torch_npu_version}-{installed_spec.machine}-")
    assert dataclasses.replace(installed_spec, source="/elsewhere").key() == key
    assert dataclasses.replace(installed_spec, fingerprint="0" * 64).key() != key
    fewer = {soname: symbols[1:] for soname, symbols in installed_spec.libraries.items()}
    assert dataclasses.replace(installed_spec, libraries=fewer).key() != key
    assert cann.StubSpec.from_json(installed_spec.to_json()) == installed_spec


# --------------------------------------------------------------------------- building and caching


def test_cold_build_of_the_installed_spec(installed_spec, tmp_path):
    started = time.perf_counter()
    stub_dir = cann.build_stub(installed_spec, tmp_path)
    elapsed = time.perf_counter() - started
    assert stub_dir == tmp_path / installed_spec.key()
    manifest = json.loads((stub_dir / cann.MANIFEST_NAME).read_text())
    assert manifest["torch_npu_version"] == installed_spec.torch_npu_version
    assert manifest["total_symbols"] == installed_spec.symbol_count
    assert {s: m["symbols"] for s, m in manifest["libraries"].items()} == {
        s: len(v) for s, v in installed_spec.libraries.items()
    }
    assert 0 < manifest["build_seconds"] <= elapsed
    time.strptime(manifest["built_at"], "%Y-%m-%dT%H:%M:%SZ")
    for soname, symbols in installed_spec.libraries.items():
        built_soname, _, defined = elf_view(stub_dir / soname)
        assert built_soname == soname
        assert set(symbols) <= set(defined)
        assert all(defined[s][0] == "STT_FUNC" for s in symbols)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".cann-") and p.is_dir()]


@pytest.fixture
def small_spec(installed_spec) -> cann.StubSpec:
    """Two sonames, three functions: builds in a fraction of a second."""
    return dataclasses.replace(
        installed_spec,
        libraries={"libsmallA.so": ("smallInit", "smallGetDeviceCount"), "libsmallB.so": ("smallRun",)},
        data_symbols={},
    )


def test_cached_build_is_reused_without_the_compiler(small_spec, tmp_path, monkeypatch):
    log = tmp_path / "compiler.log"
    counting = write_script(tmp_path / "counting-cc", f'echo "$@" >> {log}\nexec cc "$@"\n')
    failing = write_script(
        tmp_path / "failing-cc", f'echo failing >> {log}\necho "boom: compiler exploded" >&2\nexit 1\n'
    )
    cache = tmp_path / "cache"

    first = cann.build_stub(small_spec, cache, compiler=counting)
    assert len(log.read_text().splitlines()) == len(small_spec.libraries) + 1  # and the device-call recorder

    assert cann.build_stub(small_spec, cache, compiler=failing) == first
    monkeypatch.setenv("CC", failing)
    assert cann.build_stub(small_spec, cache) == first
    assert "failing" not in log.read_text()

    changed = dataclasses.replace(small_spec, libraries={**small_spec.libraries, "libsmallC.so": ("extra",)})
    assert changed.key() != small_spec.key()
    with pytest.raises(cann.CannError, match="boom: compiler exploded"):
        cann.build_stub(changed, cache, compiler=failing)
    assert not (cache / changed.key()).exists()
    assert sorted(p.name for p in cache.iterdir() if p.is_dir()) == [small_spec.key()]  # no staging left over

    rebuilt = cann.build_stub(changed, cache, compiler=counting)
    assert rebuilt != first and (rebuilt / "libsmallC.so").is_file()
    assert (first / cann.MANIFEST_NAME).is_file()


def test_incomplete_stub_directory_is_rebuilt(small_spec, tmp_path):
    broken = tmp_path / small_spec.key()
    broken.mkdir()
    (broken / "libsmallA.so").write_text("truncated")
    stub_dir = cann.build_stub(small_spec, tmp_path)
    assert elf_view(stub_dir / "libsmallA.so")[0] == "libsmallA.so"


def test_concurrent_builders_share_one_build(small_spec, tmp_path):
    log = tmp_path / "compiler.log"
    slow = write_script(tmp_path / "slow-cc", f'echo "$@" >> {log}\nsleep 0.5\nexec cc "$@"\n')
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(small_spec.to_json())
    cache = tmp_path / "cache"
    code = textwrap.dedent(
        f"""
        from pathlib import Path
        from pytest_npu_lazy import cann
        spec = cann.StubSpec.from_json(Path({str(spec_file)!r}).read_text())
        print(cann.build_stub(spec, {str(cache)!r}, compiler={slow!r}))
        """
    )
    builders = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=clean_env())
        for _ in range(2)
    ]
    results = [b.communicate(timeout=120) for b in builders]
    assert [b.returncode for b in builders] == [0, 0], results
    paths = {out.strip() for out, _ in results}
    assert paths == {str(cache / small_spec.key())}
    assert len(log.read_text().splitlines()) == len(small_spec.libraries) + 1  # built once (and the recorder)
    for soname, symbols in small_spec.libraries.items():
        assert set(symbols) <= set(elf_view(cache / small_spec.key() / soname)[2])


def test_unwritable_cache_says_how_to_fix_it(small_spec, tmp_path):
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("")
    with pytest.raises(cann.CannError, match=r"not writable.*PYTEST_NPU_LAZY_CACHE"):
        cann.build_stub(small_spec, blocker / "cache")


def test_missing_compiler_says_what_to_install(small_spec, tmp_path, monkeypatch):
    with pytest.raises(cann.CannError, match="no-such-cc-for-npu-lazy") as named:
        cann.build_stub(small_spec, tmp_path / "a", compiler="no-such-cc-for-npu-lazy")
    assert "gcc" in str(named.value)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(cann.CannError, match=r"C compiler.*cc, gcc, clang.*apt-get install gcc"):
        cann.build_stub(small_spec, tmp_path / "b")


# --------------------------------------------------------------------------- activation


def test_stub_makes_torch_npu_import_without_a_device(installed_spec, stub_cache, shared_stub):
    answer = run_python(
        f"""
        import json, os, sys, time
        from pytest_npu_lazy import cann
        status = cann.activate("stub", cache_dir={str(stub_cache)!r})
        usable = cann.npu_device_usable()          # a child that gets the stub through LD_LIBRARY_PATH
        started = time.perf_counter()
        import torch                                # autoload on: this imports torch_npu as well
        autoloaded = "torch_npu" in sys.modules
        import torch_npu
        seconds = time.perf_counter() - started
        print(json.dumps({{
            "status": status.__dict__, "header": status.header(), "again": cann.activate() is status,
            "autoloaded": autoloaded, "torch_npu_file": torch_npu.__file__,
            "available": torch.npu.is_available(), "count": torch.npu.device_count(),
            "usable": usable, "mode_env": os.environ.get(cann.ENV_MODE),
            "ld_path": os.environ["LD_LIBRARY_PATH"].split(os.pathsep), "seconds": seconds,
        }}))
        """
    )
    status = answer["status"]
    assert status["active"] == "stub" and status["requested"] == "stub"
    assert status["stub_dir"] == str(shared_stub)
    assert answer["header"] == (
        f"CANN: host stub - no NPU device ({len(installed_spec.libraries)} sonames, "
        f"{installed_spec.symbol_count} symbols; {shared_stub})"
    )
    assert answer["again"] and answer["autoloaded"]
    assert Path(answer["torch_npu_file"]).parent == installed_dir("torch_npu")  # the real package's Python code
    assert answer["available"] is False and answer["count"] == 0
    assert answer["usable"][0] is False and "is_available() is False" in answer["usable"][1]
    assert answer["mode_env"] == "stub" and answer["ld_path"][0] == str(shared_stub)


def test_auto_falls_back_to_the_stub_without_cann(installed_spec, stub_cache, shared_stub):
    """A stub directory inherited on LD_LIBRARY_PATH must not pass for real CANN."""
    answer = run_python(
        f"""
        import json
        from pytest_npu_lazy import cann
        status = cann.activate(cache_dir={str(stub_cache)!r})
        print(json.dumps(status.__dict__))
        """,
        LD_LIBRARY_PATH=str(shared_stub),
    )
    assert answer["requested"] == "auto" and answer["active"] == "stub"
    assert "no real CANN" in answer["detail"]
    assert any(soname in answer["detail"] for soname in installed_spec.core_sonames)


def test_child_that_imported_torch_npu_through_ld_library_path_reports_the_stub(shared_stub, stub_cache):
    answer = run_python(
        f"""
        import json, sys
        import torch                                # autoload: torch_npu arrives before activation
        from pytest_npu_lazy import cann
        status = cann.activate(cache_dir={str(stub_cache)!r})
        print(json.dumps({{"status": status.__dict__, "torch_npu": "torch_npu" in sys.modules}}))
        """,
        LD_LIBRARY_PATH=str(shared_stub),
    )
    assert answer["torch_npu"]
    assert answer["status"]["active"] == "stub" and answer["status"]["stub_dir"] == str(shared_stub)


def test_off_leaves_the_original_failure(installed_spec, stub_cache):
    answer = run_python(
        f"""
        import json
        from pytest_npu_lazy import cann
        status = cann.activate("off", cache_dir={str(stub_cache)!r})
        try:
            import torch_npu
            error = None
        except Exception as exc:
            error = f"{{type(exc).__name__}}: {{exc}}"
        print(json.dumps({{"active": status.active, "header": status.header(), "error": error}}))
        """
    )
    assert answer["active"] == "off" and answer["header"].startswith("CANN: off")
    assert answer["error"] and "cannot open shared object file" in answer["error"]
    assert any(soname in answer["error"] for soname in installed_spec.libraries)


def test_real_mode_without_cann_explains_how_to_fix_it(installed_spec, stub_cache):
    answer = activation_error("real", stub_cache)
    message = answer["message"]
    assert message and "set_env.sh" in message and "--npu-lazy-cann=stub" in message
    assert any(f"{soname} (needed by" in message for soname in installed_spec.core_sonames)
    assert answer["mode_env"] is None


@pytest.fixture
def fake_toolkit(tmp_path, shared_stub) -> Path:
    """A directory laid out like CANN's toolkit, holding loadable libraries with CANN's sonames."""
    toolkit = tmp_path / "ascend-toolkit" / "8.1.RC1"
    (toolkit / "lib64").mkdir(parents=True)
    for library in shared_stub.glob("*.so"):
        shutil.copy(library, toolkit / "lib64" / library.name)
    (toolkit / "ascend_toolkit_install.info").write_text("package_name=Ascend-cann-toolkit\nversion=8.1.RC1\n")
    return toolkit


def test_auto_prefers_real_cann_and_reports_its_version(fake_toolkit, stub_cache):
    answer = run_python(
        f"""
        import json, os
        from pytest_npu_lazy import cann
        status = cann.activate(cache_dir={str(stub_cache)!r})
        print(json.dumps({{"status": status.__dict__, "header": status.header(),
                           "ld_path": os.environ["LD_LIBRARY_PATH"].split(os.pathsep)}}))
        """,
        ASCEND_HOME_PATH=str(fake_toolkit),
    )
    assert answer["status"]["active"] == "real" and answer["status"]["version"] == "8.1.RC1"
    assert answer["header"] == f"CANN: 8.1.RC1 ({fake_toolkit})"
    assert answer["ld_path"][0] == str(fake_toolkit / "lib64")


def test_real_mode_names_the_missing_library(fake_toolkit, stub_cache):
    (fake_toolkit / "lib64" / "libhccl.so").unlink()
    answer = activation_error("real", stub_cache, ASCEND_HOME_PATH=str(fake_toolkit))
    assert answer["message"] and "libhccl.so (needed by" in answer["message"]


def test_activation_is_idempotent_and_refuses_to_switch(stub_cache):
    answer = run_python(
        f"""
        import json
        from pytest_npu_lazy import cann
        first = cann.activate(cache_dir={str(stub_cache)!r})      # mode from the environment
        same = cann.activate("off") is first and cann.activate("auto") is first
        try:
            cann.activate("stub")
            refused = None
        except cann.CannError as exc:
            refused = str(exc)
        try:
            cann.activate("sideways")
        except cann.CannError as exc:
            unknown = str(exc)
        print(json.dumps({{"requested": first.requested, "same": same, "refused": refused, "unknown": unknown}}))
        """,
        PYTEST_NPU_LAZY_CANN="off",
    )
    assert answer["requested"] == "off" and answer["same"]
    assert answer["refused"] and "already active as 'off'" in answer["refused"]
    assert "auto, real, stub, emulate, compute, off" in answer["unknown"]


@pytest.mark.needs("torch")
def test_stub_refused_once_torch_is_imported(stub_cache):
    answer = activation_error("stub", stub_cache, first="import torch", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert answer["message"] and "before torch is imported" in answer["message"]


def test_device_check_reports_the_import_failure_without_cann(monkeypatch, installed_spec):
    for name, value in clean_env().items():
        monkeypatch.setenv(name, value)
    for name in set(os.environ) - set(clean_env()):
        monkeypatch.delenv(name)
    usable, reason = cann.npu_device_usable(timeout=120)
    assert usable is False
    assert reason.startswith("import torch_npu failed") and any(s in reason for s in installed_spec.libraries)


# --------------------------------------------------------------------------- status and versions


def test_status_header_and_env(tmp_path, monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", f"/opt/a{os.pathsep}{tmp_path}")
    stub = cann.CannStatus("auto", "stub", None, str(tmp_path), "d", sonames=9, symbols=190,
                           cache_dir="/c", library_dirs=(str(tmp_path),))
    assert "stub" in stub.header() and "no NPU device" in stub.header() and "9 sonames, 190 symbols" in stub.header()
    ld_path = f"/opt/a{os.pathsep}{tmp_path}"  # the stub dir is there already: not added twice
    assert stub.env() == {cann.ENV_MODE: "stub", cann.ENV_CACHE: "/c", "LD_LIBRARY_PATH": ld_path}
    fresh = cann.CannStatus("auto", "stub", None, "/s", "d", library_dirs=("/s",))
    assert fresh.env()["LD_LIBRARY_PATH"] == os.pathsep.join(["/s", "/opt/a", str(tmp_path)])
    assert cann.CannStatus("auto", "absent", None, None, "d").header() == "CANN: absent (torch_npu not installed)"
    assert cann.CannStatus("auto", "absent", None, None, "d").env() == {cann.ENV_MODE: "auto"}
    real = cann.CannStatus("auto", "real", None, None, "d", location="/opt/ascend")
    assert real.header() == "CANN: version unknown (/opt/ascend)"


def test_cann_version_sources(tmp_path):
    release = tmp_path / "ascend-toolkit" / "8.2.RC1"
    release.mkdir(parents=True)
    (tmp_path / "ascend-toolkit" / "latest").symlink_to(release)
    assert cann._cann_version([str(tmp_path / "ascend-toolkit" / "latest")]) == "8.2.RC1"
    (release / "x86_64-linux").mkdir()
    (release / "x86_64-linux" / "ascend_toolkit_install.info").write_text("version=8.2.RC1.alpha003\n")
    assert cann._cann_version([str(release)]) == "8.2.RC1.alpha003"
    plain = tmp_path / "plain"
    plain.mkdir()
    assert cann._cann_version([str(plain)]) is None
    (plain / "version.cfg").write_text("# version: 1.0\nruntime_running_version=[7.6.0.1.220:8.1.RC1]\n")
    assert cann._cann_version([str(plain)]) == "8.1.RC1"


def test_command_line_json_report(installed_spec, capsys):
    assert cann.main(["--json", "--build"]) == 0
    (report,) = json.loads(capsys.readouterr().out)
    assert report["torch_npu_version"] == installed_spec.torch_npu_version
    assert report["symbols"] == installed_spec.symbol_count
    assert report["libraries"] == {s: len(v) for s, v in installed_spec.libraries.items()}
    assert report["build"]["ok"] and report["build"]["cold"] and report["build"]["problems"] == []
