"""``python -m pytest_npu_lazy.selection``: the tests a change selects, printed, for a CI that runs tests its way.

    python -m pytest_npu_lazy.selection --changed origin/master...HEAD              # node ids
    python -m pytest_npu_lazy.selection --changed origin/master...HEAD --as files   # test files (their run_test.py)
    python -m pytest_npu_lazy.selection --changed - --as explain < change.diff      # each test with its reason

Node ids are relative to ``--rootdir`` (default: here), as pytest names them. Nothing runs and no test
is collected: a test the map does not know is only known by its file, so ``--as files`` adds the
changed test files the map has no test of. Where nothing can be ruled out, every test of the map is
printed and stderr says why; where nothing is selected, stderr says so, with each changed file's note.
Exit status 0 unless the input is refused (2).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .changes import SPEC_HELP, resolve
from .map import SelectionMap, installed_versions
from .rule import DEFAULT_IGNORE, select
from .sources import SelectionError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_npu_lazy.selection", description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--changed", required=True, metavar="CHANGE", help=SPEC_HELP)
    parser.add_argument("--map", default=".npu-lazy-map.json", type=Path,
                        help="the selection map (default: .npu-lazy-map.json in --rootdir)")
    parser.add_argument("--rootdir", default=".", type=Path, help="pytest's rootdir: node ids are relative to it")
    parser.add_argument("--as", dest="form", choices=("nodeids", "files", "explain", "json"), default="nodeids")
    parser.add_argument("--ignore", action="append", default=None, metavar="GLOB",
                        help=f"a changed path no test can observe (repeatable; default {' '.join(DEFAULT_IGNORE)})")
    args = parser.parse_args(argv)
    rootdir = args.rootdir.resolve()
    map_path = args.map if args.map.is_absolute() or args.map.exists() else rootdir / args.map
    try:
        smap = SelectionMap.read(map_path)
        changes = resolve(args.changed, rootdir, sys.stdin.read)
    except SelectionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    selection = select(smap, changes, installed_versions(tuple(smap.packages)), changes.rootdir_within(rootdir),
                       tuple(args.ignore) if args.ignore else DEFAULT_IGNORE)
    nodeids = list(smap.tests) if selection.everything else [n for n in smap.tests if n in selection.selected]
    if selection.everything:
        print(f"every test: {selection.everything}", file=sys.stderr)
    elif not nodeids and not selection.new_test_files:
        print(f"no test of the map ({len(smap.tests)} tests) can see this change ({changes.source}):", file=sys.stderr)
        for note in selection.notes or ["no changed file"]:
            print(f"  {note}", file=sys.stderr)
    if args.form == "nodeids":
        print("\n".join(nodeids))
    elif args.form == "files":
        files = dict.fromkeys([n.split("::")[0] for n in nodeids] + selection.new_test_files)
        print("\n".join(files))
    elif args.form == "explain":
        print(f"{changes.source}: {len(nodeids)} of {len(smap.tests)} tests")
        for note in selection.notes:
            print(f"  {note}")
        for nodeid in nodeids:
            print(f"{nodeid}\n    {selection.selected.get(nodeid) or selection.everything}")
    else:
        print(json.dumps({"change": changes.to_dict(), "everything": selection.everything, "notes": selection.notes,
                          "selected": {n: selection.selected.get(n) or selection.everything for n in nodeids},
                          "new_test_files": selection.new_test_files, "map_tests": len(smap.tests)}, indent=1))
    return 0


def _main_quietly_into_a_closed_pipe() -> int:
    """``... --as explain | head``: a reader that stops early is no error."""
    try:
        return main()
    except BrokenPipeError:
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(_main_quietly_into_a_closed_pipe())
