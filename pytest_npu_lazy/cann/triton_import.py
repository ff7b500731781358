"""Does ``import triton`` succeed here? Asked of a fresh interpreter, never of this one, and cached per environment.

Finding Triton is not importing it: with triton-ascend installed and pybind11 missing,
``importlib.util.find_spec("triton")`` finds the package while ``import triton`` fails
(its Ascend backend imports pybind11), and stock torch's ``has_triton_package()`` then says
no Triton. A test that expects Triton to come with the wrapper must ask whether it imports.
Importing it here would load it into the pytest process, and so into every zygote forked from
it, before any test starts: the one question must go to another interpreter.

The answer is kept in the plugin's cache directory (``$PYTEST_NPU_LAZY_CACHE``, as the CANN
host stub is), per interpreter, with the file behind every top-level module the import
loaded or missed (its path and modification time, found without importing it): the answer
is asked again when one of them changes (a package installed, removed, upgraded, or
shadowed by a directory on ``PYTHONPATH``). In one process it is asked at most once.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .build import default_cache_dir

#: run by a fresh interpreter: ``import triton`` as stock torch's ``has_triton_package()`` does it, then the
#: top-level modules the attempt loaded or missed, so the answer can be checked against the files behind them
_CHECK = """
import json, sys, traceback
before = set(sys.modules)
answer = {"imports": True, "error": None, "missing": None}
try:
    import triton
except BaseException as error:
    frames = [f for f in traceback.extract_tb(error.__traceback__) if "importlib" not in f.filename]
    answer = {"imports": False, "error": f"{type(error).__name__}: {error}".splitlines()[0][:300],
              "missing": getattr(error, "name", None)}
answer["touched"] = sorted({name.split(".")[0] for name in set(sys.modules) - before}
                           | ({answer["missing"].split(".")[0]} if answer["missing"] else set()))
print(json.dumps(answer))
"""

#: bump when the check or the record changes
_FORMAT = 1
#: answers kept per interpreter (one per state of its packages: with and without a shadowing PYTHONPATH, ...)
_KEPT = 8


@dataclass(frozen=True)
class TritonImport:
    """What ``import triton`` does in a fresh interpreter of this environment."""

    #: whether ``import triton`` succeeded
    imports: bool
    #: the exception, ``"ModuleNotFoundError: No module named 'pybind11'"``, where it failed
    error: str | None = None
    #: the module it missed, where the exception names one
    missing: str | None = None


def triton_imports() -> bool:
    """Whether ``import triton`` succeeds in this environment (a fresh interpreter of this Python, with this
    process's environment variables), without importing Triton here.

    Use it where an expectation depends on Triton: stock torch's Dynamo imports Triton when it loads only
    where ``import triton`` works, and ``importlib.util.find_spec("triton")`` also finds a Triton that fails
    to import (triton-ascend without pybind11). Cached per environment, so asking is cheap after the first
    time (the first costs one interpreter importing Triton, about 2 s). Modules a test blocks
    (``block=["triton"]``) are the test's own: the answer is the environment's.
    """
    return triton_import().imports


@lru_cache(maxsize=None)
def triton_import() -> TritonImport:
    """``triton_imports()`` with the reason where Triton does not import."""
    if _path_spec("triton") is None and importlib.util.find_spec("triton") is None:
        return TritonImport(False, "Triton is not installed", "triton")
    record = _cache_file()
    cached = _read(record)
    if cached is not None:
        return cached
    answer = _ask()
    if answer is None:
        return TritonImport(False, "the check that imports Triton in a fresh interpreter did not answer")
    _write(record, answer)
    return TritonImport(answer["imports"], answer["error"], answer["missing"])


def _ask() -> dict | None:
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")  # torch, if Triton imports it, must not load torch_npu
    try:
        done = subprocess.run([sys.executable, "-c", _CHECK], capture_output=True, text=True, env=env, timeout=300)
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
    return answer if isinstance(answer, dict) and "imports" in answer else None


def _path_spec(name: str):
    """The spec the path finders give a top-level module, without importing it or reading ``sys.modules``
    (where a test's block puts None)."""
    try:
        return importlib.machinery.PathFinder.find_spec(name)
    except (ImportError, ValueError):
        return None


def _fingerprint(names) -> dict[str, list]:
    """Per top-level module: the file behind it and that file's modification time, or None where none is
    found. Standard-library and built-in modules do not move with packages, and are left out."""
    skip = set(getattr(sys, "stdlib_module_names", ())) | set(sys.builtin_module_names)
    found = {}
    for name in sorted(set(names) - skip):
        if name.startswith("__"):
            continue
        spec = _path_spec(name)
        origin = None if spec is None else (spec.origin if spec.has_location else
                                            next(iter(spec.submodule_search_locations or ()), None))
        try:
            stamp = os.stat(origin).st_mtime_ns if origin else None
        except OSError:
            stamp = None
        found[name] = [origin, stamp]
    return found


def _cache_file() -> Path:
    key = hashlib.sha256(f"{_FORMAT}\0{sys.executable}\0{sys.version}".encode()).hexdigest()[:16]
    return default_cache_dir() / f"triton-import-{key}.json"


def _records(path: Path) -> list[dict]:
    try:
        records = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return [r for r in records if isinstance(r, dict) and r.get("format") == _FORMAT] if isinstance(records, list) else []


def _read(path: Path) -> TritonImport | None:
    """The answer recorded for an environment whose files are those of this one, or None."""
    for record in _records(path):
        try:
            if _fingerprint(record["fingerprint"]) == record["fingerprint"]:
                return TritonImport(bool(record["imports"]), record["error"], record["missing"])
        except (KeyError, TypeError, AttributeError):
            continue
    return None


def _write(path: Path, answer: dict) -> None:
    """Beside the other environments' answers (the newest few), atomically (a temporary file renamed over the
    record), and not at all where the directory is not writable: the answer is then asked again next time."""
    names = {"triton", *(answer.get("touched") or ())}
    record = {"format": _FORMAT, "imports": bool(answer["imports"]), "error": answer.get("error"),
              "missing": answer.get("missing"), "fingerprint": _fingerprint(names)}
    kept = [r for r in _records(path) if r.get("fingerprint") != record["fingerprint"]][-(_KEPT - 1):]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".triton-import.")
        with os.fdopen(handle, "w") as out:
            json.dump([*kept, record], out)
        os.replace(temporary, path)
    except OSError:
        pass
