"""``--shard K/N``: one of N machines' part of a long run, chosen by a stable hash of each item's key.

The mutation pass shards its mutants by id (``module:line:col:operator``), taking a selection map shards
its tests by node id. An item's shard depends on its key alone (the first 8 bytes of its SHA-256, modulo
N), never on its place in a list: a mutant added elsewhere, or a test added to another file, moves no
other item to another shard. The N shards are disjoint and together hold every item; their records merge
into the one a single run writes (``--merge`` of the mutation pass, ``python -m
pytest_npu_lazy.selection.merge`` of maps), which :func:`check_complete` checks first.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass
from typing import Iterable

#: what a shard is written as
FORMAT = "K/N"


class ShardError(ValueError):
    """A ``--shard`` value, or a set of shard records, that cannot be used; the message names the fix."""


@dataclass(frozen=True)
class Shard:
    index: int  #: K, from 1
    count: int  #: N

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def holds(self, key: str) -> bool:
        return shard_of(key, self.count) == self.index


def shard_of(key: str, count: int) -> int:
    """The shard (1..count) that holds ``key``: the same on every machine, Python and run (no ``hash()``)."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") % count + 1


def parse(text: str, option: str = "--shard") -> Shard:
    """``"2/4"`` -> Shard(2, 4); anything else is refused, saying what is wrong and what to write."""
    fix = f"write {option} K/N with whole numbers 1 <= K <= N, e.g. {option} 1/4 ... {option} 4/4 on four machines"
    match = re.fullmatch(r"\s*(-?\d+)\s*/\s*(-?\d+)\s*", str(text))
    if not match:
        raise ShardError(f"{option} {text!r} is not of the form {FORMAT}: {fix}")
    index, count = int(match[1]), int(match[2])
    if count < 1:
        raise ShardError(f"{option} {text!r}: N must be at least 1 (the number of shards), got {count}: {fix}")
    if not 1 <= index <= count:
        raise ShardError(f"{option} {text!r}: K must be between 1 and N={count} (shards are counted from 1), "
                         f"got {index}: {fix}")
    return Shard(index, count)


def argparse_type(text: str) -> Shard:
    """For argparse's ``type=``: a bad value becomes argparse's usage error, with this module's message."""
    import argparse

    try:
        return parse(text)
    except ShardError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix(f"--shard {text!r}: ")) from None


def check_complete(shards: Iterable[Shard], what: str = "records") -> None:
    """The shards of one run, each once, all N of them: else their merge is not what one run writes."""
    shards = list(shards)
    if not shards:
        raise ShardError(f"no shard {what} to merge: name the N records the shards wrote")
    counts = sorted({s.count for s in shards})
    if len(counts) > 1:
        raise ShardError(f"the {what} are shards of different splits ({', '.join(f'N={n}' for n in counts)}): "
                         "merge the records of one split, all run with the same N")
    count = counts[0]
    seen: dict[int, int] = {}
    for s in shards:
        seen[s.index] = seen.get(s.index, 0) + 1
    twice = sorted(k for k, n in seen.items() if n > 1)
    if twice:
        raise ShardError(f"shard {', '.join(f'{k}/{count}' for k in twice)} is given more than once: name each "
                         "shard's record once")
    missing = [k for k in range(1, count + 1) if k not in seen]
    if missing:
        many = len(missing) > 1
        raise ShardError(f"shard{'s' if many else ''} {', '.join(f'{k}/{count}' for k in missing)} of {count} "
                         f"{'are' if many else 'is'} missing: merge all "
                         f"{count} records (run the missing shard first), or the merge lacks its part")


def without_shard(command: str, options: tuple[str, ...] = ("--shard",)) -> str:
    """A shard's command as one run's: ``--shard K/N`` (or ``--shard=K/N``) dropped."""
    return " ".join(shlex.quote(word) for word in drop_shard_option(shlex.split(command), options))


def drop_shard_option(words: list[str], options: tuple[str, ...] = ("--shard",)) -> list[str]:
    """Command-line words without the shard option and its value (``--shard K/N`` or ``--shard=K/N``)."""
    kept: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in options:
            skip = True
        elif not any(word.startswith(option + "=") for option in options):
            kept.append(word)
    return kept
