"""Command line: ``python -m pytest_npu_lazy.cann`` shows what torch_npu needs from CANN, and builds the stub."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .analysis import StubSpec, analyse, analyse_wheel
from .build import build_stub
from .common import MANIFEST_NAME, CannError
from .elf import _read_elf_path

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


def _report(spec: StubSpec, build: str | os.PathLike | None, do_build: bool, emulate: bool = False) -> dict:
    result: dict[str, Any] = {
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
                stub_dir = build_stub(spec, build if build is not None else scratch, emulate=emulate)
                seconds = time.perf_counter() - started
                problems = [] if emulate else _missing_exports(spec, stub_dir)
                if emulate:
                    manifest = json.loads((stub_dir / MANIFEST_NAME).read_text())
                    result["emulation"] = manifest["emulation"]
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
    emulated = report.get("emulation")
    if emulated:
        print(f"  emulated NPU {emulated['model']['soc_name']}: {len(emulated['emulated'])} calls emulated, "
              f"{len(emulated['refused'])} refused (need the device to compute), "
              f"{len(emulated['not_emulated'])} not emulated; trace with PYTEST_NPU_LAZY_CANN_TRACE=1")
        print(f"    emulated: {', '.join(emulated['emulated'])}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_npu_lazy.cann",
        description="Show what the installed torch_npu (or a wheel) needs from CANN; optionally build the stub.",
    )
    parser.add_argument("--wheel", action="append", default=[], help="analyse this .whl instead (repeatable)")
    parser.add_argument("--build", action="store_true", help="also compile the stub (cold, temp dir) and time it")
    parser.add_argument("--cache-dir", help="build into this cache instead of a throwaway directory")
    parser.add_argument("--emulate", action="store_true",
                        help="build the emulated NPU instead of the stub (implies --build) and list what it emulates")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = parser.parse_args(argv)
    reports = []
    try:
        specs = [analyse_wheel(w) for w in args.wheel] if args.wheel else [analyse()]
    except CannError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for spec in specs:
        reports.append(_report(spec, args.cache_dir, args.build or args.emulate, args.emulate))
        if not args.json:
            _print_report(reports[-1])
    if args.json:
        print(json.dumps(reports, indent=2))
    return 0 if all(r.get("build", {"ok": True})["ok"] for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
