"""The JSON report's versioned schema: what a test's result looks like as data, and reading it back.

The pytest side (:mod:`.reporter`) builds documents with :func:`result_entry`
and :func:`document`; the matrix and the HTML view read them with
:func:`load_report`, which says clearly what is wrong with a file instead
of failing on a missing key. docs/reports.md describes every key.

Compatibility: readers accept unknown keys. ``SCHEMA_VERSION`` goes up when
a key changes meaning or goes away; a reader refuses a newer version.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import tempfile
from collections.abc import Mapping
from typing import Any

from ..probe.summary import Summary

SCHEMA = "pytest-npu-lazy-report"
SCHEMA_VERSION = 1
BASELINE_SCHEMA = "pytest-npu-lazy-baseline"
BASELINE_SCHEMA_VERSION = 1

OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")



class ReportError(ValueError):
    """A report or baseline file that cannot be used; the message names the file and the problem."""


def environment_label(env: dict) -> str:
    """torch / torch_npu / Triton flavour, and the CANN mode: what tells two environments apart; without
    torch_npu (and CANN), torch / Triton flavour / device."""
    flavour = env.get("triton_flavour")
    if flavour == "absent":
        triton = "no triton"
    else:
        triton = "triton" if flavour == "upstream" else str(flavour)
        triton += f" {env['triton']}" if env.get("triton") else ""
    cann = env.get("cann_mode") or "?"
    if env.get("cann_version"):
        cann += f" {env['cann_version']}"
    if env.get("torch_npu") is None and env.get("cann_mode") in ("off", "absent"):
        # PyTorch alone (test/upstream): the device tells a CUDA run from a CPU run of one release
        device = "cuda" if str(env.get("device", "")).startswith("cuda") else "cpu"
        return f"torch {env.get('torch')} / {triton} / {device}"
    return f"torch {env.get('torch')} / torch_npu {env.get('torch_npu')} / {triton} / CANN {cann}"


def phase_entry(phase: Mapping[str, Any], with_modules: bool) -> dict:
    """One phase of a test's summary as the JSON report has it."""
    entry = {
        "name": phase["name"],
        "parent": phase.get("parent"),
        "start": phase.get("start", 0.0),
        "duration": phase["duration"],
        "module_count": phase.get("module_count", len(phase.get("modules", []))),
        "watched": phase.get("watched", []),
        "device_calls": phase.get("device_calls", []),
        "computed": phase.get("computed", []),
        "unfinished": bool(phase.get("unfinished", False)),
    }
    if with_modules:
        entry["modules"] = phase.get("modules", [])
    return entry


def result_entry(nodeid: str, outcome: str, duration: float, *, message: str | None = None,
               violation: dict | None = None, budget: list[dict] | None = None, not_judged: str | None = None,
               worker: str | None = None, summary: Summary | None = None, with_modules: bool = False) -> dict:
    """A test as the JSON report has it; ``summary``: what its child reported (None: not isolated)."""
    return {
        "nodeid": nodeid,
        "outcome": outcome,
        "duration": duration,
        "message": message,
        "violation": violation,
        "budget": budget,
        "budget_not_judged": not_judged,
        "worker": worker,
        **(_summary_keys(summary, with_modules) if summary is not None else _NOT_ISOLATED),
    }


#: the summary's keys of a test that ran in the pytest process
_NOT_ISOLATED: dict[str, Any] = {"inductor_cache": None, "inductor_cache_policy": None, "isolation": None, "baseline": None, "preload": [], "blocked": [],
                 "device_calls_unavailable": None, "device_calls_dropped": 0, "records": {}, "phases": [],
                 "checks": [], "cann_mode": None}


def _summary_keys(summary: Summary, with_modules: bool) -> dict:
    return {"inductor_cache": summary.inductor_cache, "inductor_cache_policy": summary.inductor_cache_policy,
            "isolation": summary.isolation, "baseline": summary.baseline,
            "preload": list(summary.preload), "blocked": list(summary.blocked),
            "device_calls_unavailable": summary.device_calls_unavailable,
            "device_calls_dropped": summary.device_calls_dropped, "records": dict(summary.records),
            "checks": list(summary.checks), "cann_mode": summary.cann_mode,
            "phases": [phase_entry(p, with_modules) for p in summary.phases]}


def counts(tests: list[dict]) -> dict:
    """The run's totals, so that a CI reads them instead of counting: tests per outcome, and compiled values
    compared with eager per what produced them (``checked``: the ledger's ``by``, e.g. "Triton interpreter")."""
    outcomes = {outcome: 0 for outcome in OUTCOMES}
    checked: dict[str, int] = {}
    for test in tests:
        outcomes[test["outcome"]] = outcomes.get(test["outcome"], 0) + 1
        for check in test.get("checks") or []:
            for row in (*check.get("outputs", ()), *check.get("gradients", ())):
                checked[row["by"]] = checked.get(row["by"], 0) + 1
    return {"tests": len(tests), **outcomes, "checked": checked}


def document(environment: dict, run: dict, tests: list[dict]) -> dict:
    """The whole report: header, run facts, totals, and tests in the order they finished."""
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "environment": environment,
        "run": run,
        "counts": counts(tests),
        "tests": tests,
    }


def relative_paths(value: Any, roots: list[str]) -> Any:
    """``value`` with every absolute path under one of ``roots`` written relative to that root ("." for a
    root itself), so that a report committed or shared names no machine's directories. Roots are tried in
    the order given (the most specific first); strings, lists and dicts are rewritten, the rest kept."""
    if isinstance(value, dict):
        return {key: relative_paths(item, roots) for key, item in value.items()}
    if isinstance(value, list):
        return [relative_paths(item, roots) for item in value]
    if not isinstance(value, str):
        return value
    for root in roots:
        root = root.rstrip(os.sep)
        if root:
            value = re.sub(re.escape(root) + r"(?:" + re.escape(os.sep) + r"|(?![\w.-]))",
                           lambda match: "" if match.group(0).endswith(os.sep) else ".", value)
    return value


def write_json(path: str | os.PathLike, data: Any) -> None:
    """Write atomically: a reader (or a crash) never sees half a file."""
    write_text(path, json.dumps(data, indent=1) + "\n")


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write to a temporary file beside ``path``, then rename it over ``path``."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=".npu-lazy-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as open() would have made it, not mkstemp's 0600
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _read(path: str | os.PathLike, schema: str, version: int, what: str, how: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file; {how}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportError(f"{path}: cannot be read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}: not JSON ({exc}); expected {what}") from None
    if not isinstance(data, dict) or data.get("schema") != schema:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise ReportError(f"{path}: not {what} (schema is {found!r}, expected {schema!r}); {how}")
    found_version = data.get("schema_version")
    if not isinstance(found_version, int):
        raise ReportError(f"{path}: schema_version is {found_version!r}, expected an integer")
    if found_version > version:
        raise ReportError(f"{path}: schema_version {found_version} is newer than this pytest-npu-lazy reads "
                          f"({version}); upgrade pytest-npu-lazy")
    return data


def load_report(path: str | os.PathLike) -> dict:
    """Read and check a JSON report; :class:`ReportError` says what is wrong with it."""
    data = _read(path, SCHEMA, SCHEMA_VERSION, "a pytest-npu-lazy JSON report",
                 "write one with pytest --npu-lazy-json=PATH")
    for key, kind in (("environment", dict), ("run", dict), ("tests", list)):
        if not isinstance(data.get(key), kind):
            raise ReportError(f"{path}: key {key!r} must be a {kind.__name__}, found {type(data.get(key)).__name__}")
    for index, test in enumerate(data["tests"]):
        if not isinstance(test, dict) or not isinstance(test.get("nodeid"), str):
            raise ReportError(f"{path}: tests[{index}] has no nodeid")
        if test.get("outcome") not in OUTCOMES:
            raise ReportError(f"{path}: tests[{index}] ({test['nodeid']}) has outcome {test.get('outcome')!r}; "
                              f"expected one of {', '.join(OUTCOMES)}")
        if not isinstance(test.get("phases", []), list):
            raise ReportError(f"{path}: tests[{index}] ({test['nodeid']}): phases must be a list")
    return data


def load_baseline(path: str | os.PathLike) -> dict:
    """Read and check an import-budget baseline."""
    data = _read(path, BASELINE_SCHEMA, BASELINE_SCHEMA_VERSION, "a pytest-npu-lazy import baseline",
                 "create it with pytest --npu-lazy-save-baseline=PATH")
    if not isinstance(data.get("tests"), dict):
        raise ReportError(f"{path}: key 'tests' must be an object of node id -> phases")
    return data
