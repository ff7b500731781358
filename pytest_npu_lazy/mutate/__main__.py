"""``python -m pytest_npu_lazy.mutate``: the mutation pass over installed code, from one configuration file.

    python -m pytest_npu_lazy.mutate                          # every mutant of test/dynamo/mutation.toml
    python -m pytest_npu_lazy.mutate --list                   # the mutants, without running anything
    python -m pytest_npu_lazy.mutate --only <id-or-prefix>    # some of them
    python -m pytest_npu_lazy.mutate --sample                 # the configuration's fixed sample (what CI runs)
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
import time
from pathlib import Path

from . import report
import dataclasses

from ..shard import ShardError, argparse_type

from .config import ConfigError, load
from .session import BaselineFailed, MutantResult, MutationPass, PassOptions, log

DEFAULT_CONFIG = Path("test/dynamo/mutation.toml")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m pytest_npu_lazy.mutate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="the mutation.toml (default: %(default)s)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--only", action="append", default=[], metavar="ID",
                        help="run the mutants whose id is or starts with ID (repeatable)")
    parser.add_argument("--function", action="append", default=[], metavar="NAME",
                        help="run the mutants of this function (qualified name, nested ones included; repeatable)")
    parser.add_argument("--shard", type=argparse_type, metavar="K/N",
                        help="run only shard K of N (1 <= K <= N): the mutants whose id hashes to K, so N machines "
                             "each run one part; --report-only --json ALL --merge each shard's --json makes the "
                             "record one run writes")
    parser.add_argument("--sample", action="store_true", help="run the configuration's [sample] against its tests")
    parser.add_argument("--tests", action="append", default=[], metavar="PATH",
                        help="run against these test files or folders instead of the configuration's [run] tests "
                             "(repeatable): say, the tests written for some survivors, with --only")
    parser.add_argument("-x", "--exitfirst", dest="exitfirst", action="store_true", default=True,
                        help="stop each mutant's run at its first failing test (default)")
    parser.add_argument("--no-exitfirst", dest="exitfirst", action="store_false",
                        help="run every selected test of each mutant (slower; names every test that catches it)")
    parser.add_argument("-n", "--workers", type=int, default=0, metavar="N",
                        help="pytest-xdist workers for each mutant's run when it selects more than 2N tests")
    parser.add_argument("--retake-coverage", action="store_true", help="take coverage again even if it is cached")
    parser.add_argument("--json", type=Path, help="write every result as JSON here")
    parser.add_argument("--markdown", type=Path, help="write the score and tables as markdown here")
    parser.add_argument("--report-only", action="store_true", help="run nothing: write --markdown from --json")
    parser.add_argument("--merge", action="append", default=[], type=Path, metavar="FILE",
                        help="with --report-only: add the results of another record of the same configuration (a "
                             "part run side by side with --function) to --json (repeatable); the N records of "
                             "--shard 1/N ... N/N merge into the record one run writes (--json may then be new)")
    parser.add_argument("--resume", action="store_true", help="keep the results already in --json and run the rest "
                        "(and those --only names again); the JSON is rewritten after every mutant")
    parser.add_argument("--expect", choices=("recorded",), help="with --sample: fail unless each sampled mutant "
                        "ends as the JSON given with --against recorded it")
    parser.add_argument("--against", type=Path, help="the recorded JSON that --expect compares with")
    parser.add_argument("--without-verdicts", action="store_true",
                        help="judge every mutant by its run, ignoring mutation.toml's verdicts (for a source the "
                             "verdicts were not written against)")
    return parser.parse_args(argv)


class Stopped(Exception):
    """SIGTERM or SIGHUP reached the pass: raised so the running suite's ``finally`` kills its process group."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _stop_on_signal(signum, _frame):
    raise Stopped(signum)


def main(argv: list[str] | None = None) -> int:
    # each run lives in a session of its own (so one kill ends it and its zygotes); a pass killed by a signal
    # without a handler would leave that session running, so a signal becomes an exception that unwinds it
    previous = {signum: signal.signal(signum, _stop_on_signal) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return _main(argv)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _main(argv: list[str] | None) -> int:
    args = parse_args(argv)
    try:
        config = _config(args)
        session = MutationPass(config, PassOptions(exitfirst=args.exitfirst, workers=args.workers, only=args.only,
                                                   sample=args.sample, functions=args.function, tests=args.tests,
                                                   retake_coverage=args.retake_coverage, shard=args.shard),
                               progress=log)
        if args.list:
            for mutant in session.mutants():
                print(f"{mutant.id}\t{mutant.function}\t{mutant.description}")
            return 0
        session.check_verdicts()
        recorded, earlier = _recorded(args, session)
        if args.report_only:
            return _report_only(args, config, session, recorded, earlier)
        command = "python -m pytest_npu_lazy.mutate " + " ".join(
            shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
        results, coverage, seconds = _run_pass(args, config, session, recorded, earlier, command.strip())
    except (ConfigError, BaselineFailed, ShardError) as error:
        print(f"pytest_npu_lazy.mutate: {error}", file=sys.stderr)
        return 2
    except Stopped as stop:
        print(f"pytest_npu_lazy.mutate: stopped by {stop}; the record in --json holds every mutant finished "
              "(carry on with --resume)", file=sys.stderr)
        return 128 + stop.signum
    _write_results(args, config, session, results, coverage, seconds, earlier, command.strip())
    if args.expect == "recorded":
        return _compare_with_record(results, args.against)
    return 0


def _config(args: argparse.Namespace):
    """mutation.toml, and the options that only make sense together, checked before anything runs."""
    config = load(args.config.resolve())
    if args.without_verdicts:
        config = dataclasses.replace(config, verdicts={}, blocks=[])
    if args.expect and not (args.against and args.against.exists()):
        raise ConfigError("--expect recorded compares with a recorded run: give it with --against FILE "
                          "(e.g. --against docs/mutation.json)")
    if args.expect and not (args.sample or args.only):
        raise ConfigError("--expect recorded checks a few mutants against the record: add --sample or --only")
    if args.shard and args.report_only:
        raise ConfigError(f"--shard {args.shard} splits a run, and --report-only runs nothing: drop --shard (merge "
                          "the shards' records with --report-only --json ALL --merge SHARD.json ...)")
    if args.merge and not args.report_only:
        raise ConfigError("--merge adds other records to --json without running anything: use it with "
                          "--report-only")
    return config


def _recorded(args: argparse.Namespace, session: MutationPass) -> tuple[dict[str, MutantResult], dict]:
    """What earlier runs recorded (--resume, --report-only, --merge): results by mutant id and provenance,
    each refused unless taken on the sources installed now."""
    recorded: dict[str, MutantResult] = {}
    earlier: dict = {}
    records = []
    if args.resume or args.report_only:
        if not args.json or not (args.json.exists() or (args.merge and args.report_only)):
            raise ConfigError("--resume and --report-only read the run recorded in --json FILE; give an existing file")
    if args.json and args.json.exists() and (args.resume or args.report_only):
        results, earlier = _read_record(args.json)
        _check_same_sources(args.json, earlier, session.digests)
        if args.resume and args.shard and earlier.get("shard") not in (None, str(args.shard)):
            raise ConfigError(f"{args.json} is the record of shard {earlier['shard']}, not of --shard {args.shard}: "
                              "resume each shard from its own record")
        recorded = {r.mutant.id: r for r in results}
        records.append((args.json, results, earlier))
    for other in args.merge:
        if not other.exists():
            raise ConfigError(f"--merge {other}: no such file; name a record written with --json")
        results_there, there = _read_record(other)
        _check_same_sources(other, there, session.digests)
        records.append((other, results_there, there))
        if not there.get("shard"):
            earlier = report.merge(recorded, earlier, results_there, there)
    if any(prov.get("shard") for _path, _results, prov in records) and args.merge:
        # the N shards' records: what one run writes
        recorded, earlier = report.combine_shards(records)
    elif args.report_only and not (args.json and args.json.exists()):
        raise ConfigError(f"--report-only --merge adds to the record in --json, and {args.json} does not exist: "
                          "name an existing record (a new --json is for merging the N records of --shard K/N)")
    return recorded, earlier


def _report_only(args, config, session: MutationPass, recorded: dict, earlier: dict) -> int:
    """--report-only: the record judged by the verdicts as they are now, written again; nothing runs."""
    if not args.markdown and not args.merge:
        raise ConfigError("--report-only writes --markdown FILE; name one")
    results = sorted(session.rejudge(list(recorded.values())), key=session.source_order)
    not_run = [m for m in session.mutants() if m.id not in recorded]
    earlier = {**earlier, "sources": session.digests}  # checked above: the same, or a legacy record's
    if args.markdown:
        report.write_text(args.markdown, report.markdown(results, earlier, not_run, config))
    report.write_json(args.json, results, earlier)
    return 0


def _run_pass(args, config, session: MutationPass, recorded: dict, earlier: dict, command: str):
    """The pass, writing the record after each mutant (--json) so that an interrupted run resumes."""
    session.rejudge(list(recorded.values()))  # in place: the verdicts as mutation.toml says them now
    started = time.monotonic()  # what partial() counts from: set before the pass, not by it

    def partial(results):
        if args.json:
            spent = earlier.get("wall_seconds", 0) + time.monotonic() - started
            prov = report.provenance(command, config.root, spent, session.coverage_map, earlier, session.digests,
                                     _shard_of(args))
            report.write_json(args.json, results, {**prov, "partial": True})

    return session.run(recorded, partial)


def _write_results(args, config, session: MutationPass, results, coverage, seconds: float, earlier: dict,
                   command: str) -> None:
    prov = report.provenance(command, config.root, seconds + earlier.get("wall_seconds", 0), coverage,
                             earlier, session.digests, _shard_of(args))
    if args.json:
        report.write_json(args.json, results, prov)
    if args.markdown:
        done = {r.mutant.id for r in results}
        not_run = [m for m in MutationPass(config, PassOptions(), progress=log).mutants() if m.id not in done]
        report.write_text(args.markdown, report.markdown(results, prov, not_run, config))
    s = report.score(results)
    log(f"score: {s['caught']} of {s['judged']} caught ({s['score_pct']} %); survived {s['survived']}, "
        f"not run {s['not_run']}, timeout {s['timeout']}, error {s['error']}, equivalent {s['equivalent']}, "
        f"device-only {s['device_only']}; {seconds / 60:.1f} min")


def _shard_of(args: argparse.Namespace) -> str | None:
    return str(args.shard) if args.shard else None


def _check_same_sources(path: Path, provenance: dict, digests: dict[str, str]) -> None:
    """A record goes on (resumed, merged, rewritten) only with the sources it was taken with: its ids are
    positions. A record older than the sources key is taken at its torch_npu version's word."""
    recorded = provenance.get("sources")
    if recorded is None:
        installed = report.installed_version("torch-npu")
        if provenance.get("torch_npu") not in (None, installed):
            raise ConfigError(f"{path} was taken with torch_npu {provenance.get('torch_npu')}, and {installed} is "
                              "installed: its mutant ids name places in another source; start a new record (another "
                              "--json)")
        return
    changed = sorted(module for module, value in recorded.items() if digests.get(module, value) != value)
    if changed:
        raise ConfigError(f"{path} was taken with other sources of {', '.join(changed)} (recorded "
                          f"{', '.join(recorded[m] for m in changed)}; installed "
                          f"{', '.join(digests[m] for m in changed)}): its mutant ids name places in those sources; "
                          "start a new record (another --json)")


def _read_record(path: Path) -> tuple[list[MutantResult], dict]:
    """A record written with --json: its results and its provenance."""
    data = json.loads(path.read_text())
    return [MutantResult.from_dict(r) for r in data["mutants"]], data.get("provenance", {})


def _compare_with_record(results, against: Path | None) -> int:
    if against is None or not against.exists():
        print("pytest_npu_lazy.mutate: --expect recorded needs --against <the committed JSON>", file=sys.stderr)
        return 2
    recorded = {m["mutant"]["id"]: m["status"] for m in json.loads(against.read_text())["mutants"]}
    differ = [(r.mutant.id, recorded.get(r.mutant.id, "absent"), r.status) for r in results
              if recorded.get(r.mutant.id) != r.status]
    for ident, was, now in differ:
        print(f"pytest_npu_lazy.mutate: {ident}: recorded {was}, now {now}", file=sys.stderr)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
