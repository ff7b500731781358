"""``--shard K/N`` (pytest_npu_lazy/shard.py): disjoint shards that cover everything, keyed by a stable hash,
and bad values refused with the fix named, by the mutation pass's command line and by pytest."""

from __future__ import annotations

import pytest

from pytest_npu_lazy.mutate import operators
from pytest_npu_lazy.shard import Shard, ShardError, check_complete, parse, shard_of, without_shard

from mutate_library import LIBRARY

IDS = [m.id for m in operators.generate(LIBRARY, "lazylib", {"run_once", "setup", "load_heavy", "untested"})]
NODEIDS = [f"test/dynamo/test_{name}.py::test_{case}[{p}]" for name in ("import", "wrapper", "npugraphs")
           for case in ("first", "second", "third") for p in range(4)]


@pytest.mark.parametrize("keys", [IDS, NODEIDS], ids=["mutant ids", "node ids"])
@pytest.mark.parametrize("count", [1, 2, 3, 4, 7])
def test_shards_are_disjoint_and_cover_every_key(keys, count):
    shards = [[k for k in keys if Shard(index, count).holds(k)] for index in range(1, count + 1)]
    assert sorted(k for part in shards for k in part) == sorted(keys)  # every key, and each once
    assert sum(len(part) for part in shards) == len(keys)
    if count <= 4:
        assert all(shards), [len(part) for part in shards]  # the hash spreads them


def test_a_keys_shard_is_its_own_not_its_place():
    """Stable across runs, machines and Python (sha256, no hash() salt), and a key added elsewhere moves none."""
    before = {k: shard_of(k, 4) for k in IDS}
    after = {k: shard_of(k, 4) for k in ["lazylib:1:0:new-mutant", *reversed(IDS)]}
    assert all(after[k] == shard for k, shard in before.items())
    assert shard_of("lazylib:34:4:delete-statement", 2) == 1 and shard_of("lazylib:37:4:remove-return", 2) == 2


@pytest.mark.parametrize("value, problem", [
    ("0/2", "K must be between 1 and N=2"), ("3/2", "K must be between 1 and N=2"),
    ("1/0", "N must be at least 1"), ("-1/2", "K must be between 1 and N=2"),
    ("2", "is not of the form K/N"), ("a/b", "is not of the form K/N"), ("1/2/3", "is not of the form K/N"),
    ("", "is not of the form K/N"), ("1.5/2", "is not of the form K/N"),
])
def test_a_bad_shard_names_the_problem_and_the_fix(value, problem):
    with pytest.raises(ShardError) as raised:
        parse(value)
    assert problem in str(raised.value) and "write --shard K/N with whole numbers 1 <= K <= N" in str(raised.value)


def test_good_shards_parse():
    assert parse("1/1") == Shard(1, 1) and str(parse(" 3 / 4 ")) == "3/4"


@pytest.mark.parametrize("value", ["0/4", "5/4", "x"])
def test_the_mutation_pass_refuses_a_bad_shard_as_a_usage_error(value, capsys):
    from pytest_npu_lazy.mutate.__main__ import parse_args

    with pytest.raises(SystemExit) as stopped:
        parse_args(["--shard", value])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "argument --shard" in err and "1 <= K <= N" in err, err


def test_a_merge_needs_every_shard_of_one_split_once():
    check_complete([Shard(2, 3), Shard(1, 3), Shard(3, 3)])
    for shards, message in (([Shard(1, 3), Shard(3, 3)], "shard 2/3 of 3 is missing"),
                            ([Shard(1, 2), Shard(1, 2), Shard(2, 2)], "shard 1/2 is given more than once"),
                            ([Shard(1, 2), Shard(2, 3)], "different splits (N=2, N=3)"), ([], "no shard records")):
        with pytest.raises(ShardError, match=message.replace("(", r"\(").replace(")", r"\)")):
            check_complete(shards)


def test_a_shards_command_without_its_shard_is_one_runs():
    assert without_shard("python -m pytest_npu_lazy.mutate --shard 2/4 --json 'a b.json'") == \
        "python -m pytest_npu_lazy.mutate --json 'a b.json'"
    assert without_shard("x --shard=2/4 -n 2") == "x -n 2"
