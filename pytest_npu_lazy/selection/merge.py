"""``python -m pytest_npu_lazy.selection.merge``: the N maps of a sharded take as the map one run writes.

    pytest -p npu_lazy test/dynamo --npu-lazy-take-map --npu-lazy-shard=1/4 --npu-lazy-map=map-1.json   # machine 1
    ...                                                                                               # 2, 3, 4
    python -m pytest_npu_lazy.selection.merge map-1.json map-2.json map-3.json map-4.json --out .npu-lazy-map.json

The shards' tests are disjoint (a stable hash of each node id) and together every test collected. Each
shard's map keeps its tests as one run would: their phases, lineage and outcomes; the line sets are stored
once under their digests, so they join by key. What one run writes differently is combined:

- ``files``: the same inventory in every shard; a file's functions are parsed where a shard saw it run;
- ``tests``' ``process`` and ``order``: a sharded take names the process that collects (the pytest process,
  an xdist worker) alike in every shard, and orders its tests by their place in the whole collection; the
  merge makes each such process one, its tests counted 0, 1, ... in collection order, as one run counts them
  (an isolated test's child is a process of its own in either);
- ``taken``: the earliest shard's date, shard 1's command without ``--npu-lazy-shard``, the longest shard's
  seconds, and ``shards``: each shard's own date, command and seconds.

Maps of other versions, packages or format, a shard given twice or missing, are refused (exit 2), naming the fix.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

from ..shard import ShardError, check_complete, drop_shard_option, parse
from .map import SelectionMap
from .sources import SelectionError
from .tracer import SHARD_PROCESS

OPTION = "--npu-lazy-shard"


def merge_maps(maps: list[tuple[Path, SelectionMap]]) -> SelectionMap:
    """One run's map from the N shards' maps (any order)."""
    shards = []
    for path, smap in maps:
        if not smap.taken.get("shard"):
            raise SelectionError(f"{path} is not a shard's map (taken without {OPTION}): merge the N maps taken with "
                                 f"{OPTION}=K/N")
        shards.append(parse(str(smap.taken["shard"]), option=f"{path}: shard"))
    check_complete(shards, "maps")
    pairs = sorted(zip(shards, maps), key=lambda pair: pair[0].index)
    ordered = [smap for _shard, (_path, smap) in pairs]
    first = ordered[0]
    for _shard, (path, smap) in pairs[1:]:
        for what in ("packages", "versions"):
            if getattr(smap, what) != getattr(first, what):
                raise SelectionError(f"{path} was taken with other {what} ({getattr(smap, what)}) than shard 1 "
                                     f"({getattr(first, what)}): take every shard on the same versions, then merge")
    merged = SelectionMap(list(first.packages), dict(first.versions), {}, {}, {})
    for smap in ordered:
        for name, facts in smap.files.items():
            have = merged.files.get(name)
            if have is not None and have.blob != facts.blob:
                raise SelectionError(f"{name} differs between the shards' maps (blob {have.blob} and {facts.blob}): "
                                     "take every shard on the same installed sources, then merge")
            if have is None or have.functions is None:
                merged.files[name] = facts
        merged.evidence.update(smap.evidence)
        for nodeid, test in smap.tests.items():
            if nodeid in merged.tests:
                raise SelectionError(f"{nodeid} is in more than one shard's map: take each shard with the same "
                                     f"{OPTION}=K/N split of the same tests")
            merged.tests[nodeid] = test
    _one_run_processes(merged)
    merged.files = dict(sorted(merged.files.items()))
    merged.taken = _taken([(str(shard), smap.taken) for shard, (_path, smap) in pairs])
    return merged


def _one_run_processes(merged: SelectionMap) -> None:
    """A process each shard named alike becomes one process, its tests numbered in collection order."""
    groups: dict[str, list[str]] = {}
    for nodeid, test in merged.tests.items():
        if test.process and test.process.startswith(SHARD_PROCESS):
            groups.setdefault(test.process, []).append(nodeid)
    for name, nodeids in groups.items():
        token = hashlib.sha256(name.encode()).hexdigest()[:16]  # a token like a run's, the same in every merge
        for order, nodeid in enumerate(sorted(nodeids, key=lambda n: merged.tests[n].order)):
            merged.tests[nodeid].process, merged.tests[nodeid].order = token, order


def _taken(shards: list[tuple[str, dict]]) -> dict:
    first = shards[0][1]
    command = first.get("command", [])
    return {"date": min(str(taken.get("date", "")) for _, taken in shards),
            "command": drop_shard_option(list(command), (OPTION,)) if isinstance(command, list) else command,
            "seconds": max(float(taken.get("seconds") or 0) for _, taken in shards),
            "shards": [{"shard": shard, "date": taken.get("date"), "command": taken.get("command"),
                        "seconds": taken.get("seconds")} for shard, taken in shards]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_npu_lazy.selection.merge",
                                     description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("maps", nargs="+", type=Path, metavar="MAP", help=f"each shard's map ({OPTION}=K/N)")
    parser.add_argument("--out", type=Path, default=Path(".npu-lazy-map.json"),
                        help="the merged map (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        merged = merge_maps([(path, SelectionMap.read(path)) for path in args.maps])
    except (SelectionError, ShardError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    merged.write(args.out)
    print(f"{len(args.maps)} shards' maps merged into {args.out}: {len(merged.tests)} tests", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
