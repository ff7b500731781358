"""Which environment variables a run_python zygote is keyed on.

A zygote imports its preload once, under the environment of the call that
started it, and then serves later calls by forking. A later call may only
use it when everything that could have changed what the preload did is the
same in its environment. Two kinds of variables qualify:

* variables read before any Python code of ours runs, or read by native
  code, which no Python hook can observe: matched by the rules below
  (:data:`STARTUP_NAMES`, :data:`STARTUP_PREFIXES`);
* variables the preload read through ``os.environ`` / ``os.getenv`` while it
  was imported: recorded in the zygote (boot.py swaps the class of
  ``os.environ`` for the import) and sent back with its ``ready`` message. ``import torch`` 2.13 reads about 50 of
  them (``TORCH_DEVICE_BACKEND_AUTOLOAD``, ``TORCH_LOGS``,
  ``TORCHDYNAMO_*``, ``PYTORCH_JIT``, ``NPY_PROMOTION_STATE``,
  ``KINETO_USE_DAEMON``, ...), which the prefixes would partly miss.

Every other variable is set in the forked child before the code runs, so
``os.environ`` there equals the call's ``env`` exactly. A preload that
iterates over the environment (``dict(os.environ)``) makes the zygote
usable only by calls with an identical environment.

This module runs in the pytest process and in zygotes: standard library only.
"""

from __future__ import annotations

import ctypes
import os
from typing import Iterable, Mapping

#: Read by the interpreter or the C library when the process starts.
STARTUP_NAMES = frozenset({
    "LANG", "LANGUAGE",  # with LC_*: stdio and file system encodings
    "TZ",  # the time module calls tzset() when it is imported at start-up
    "HOME",  # site.py: the user site-packages directory on sys.path
    "GLIBC_TUNABLES",  # glibc, at start-up
})

#: Prefixes of variables read at start-up or by native code of the preload.
STARTUP_PREFIXES = (
    "PYTHON",  # the interpreter's own configuration: PYTHONPATH, PYTHONHASHSEED, PYTHONWARNINGS, ...
    "LD_",  # the dynamic linker: LD_LIBRARY_PATH and LD_PRELOAD decide which libraries load
    "LC_",
    "MALLOC_",
    "OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_",  # thread pools, configured when they load
    "TORCH", "PYTORCH_",  # torch's native code reads TORCH_* and PYTORCH_* outside Python
    "ASCEND_",  # CANN's location and options
    "PYTEST_NPU_LAZY_",  # this plugin's CANN host stub mode and cache
)

#: Marker in a zygote's read set: the preload iterated over the whole environment.
ALL = "*"


def is_startup_name(name: str) -> bool:
    return name in STARTUP_NAMES or name.startswith(STARTUP_PREFIXES)


def key_names(started: Mapping[str, str], wanted: Mapping[str, str], reads: Iterable[str]) -> set[str]:
    """The variables that must agree between a zygote's environment and a call's."""
    names = {name for name in (*started, *wanted) if is_startup_name(name)}
    names.update(name for name in reads if name != ALL)
    return names


def compatible(started: Mapping[str, str], wanted: Mapping[str, str], reads: Iterable[str]) -> bool:
    """Whether a zygote started under ``started`` that read ``reads`` may serve a call under ``wanted``."""
    reads = set(reads)
    if ALL in reads:
        return dict(started) == dict(wanted)
    return all(started.get(name) == wanted.get(name) for name in key_names(started, wanted, reads))


def startup_changes(launched: Mapping[str, str], started: Mapping[str, str]) -> dict[str, str | None]:
    """What the interpreter's start-up did to its own environment (None: removed).

    Python's locale coercion (PEP 538) sets LC_CTYPE=C.UTF-8 under the C
    locale, and `python -c` then shows it in os.environ. It depends only on
    key variables, so a call that uses the zygote would see the same change.
    """
    changes: dict[str, str | None] = {k: v for k, v in started.items() if launched.get(k) != v}
    changes.update({k: None for k in launched if k not in started})
    return changes


def as_started(env: Mapping[str, str], changes: Mapping[str, str | None]) -> dict[str, str]:
    """``env`` as `python -c` would see it in os.environ, after its start-up changes."""
    result = dict(env)
    for name, value in changes.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = value
    return result


def relative_pythonpath(env: Mapping[str, str]) -> bool:
    """PYTHONPATH entries that site.py makes absolute against the working directory at start-up."""
    value = env.get("PYTHONPATH", "")
    return bool(value) and any(not os.path.isabs(entry) for entry in value.split(os.pathsep))


def inherited() -> dict[str, str]:
    """The environment a child started without ``env`` gets: the C library's ``environ``.

    It can differ from ``os.environ``: ``os.putenv`` and native code change
    it behind Python's back (GNU readline, imported by pytest, exports LINES
    and COLUMNS), and ``subprocess.run(env=None)`` passes it on as it is.
    """
    try:
        from ..forks.processes import libc

        entries = ctypes.POINTER(ctypes.c_char_p).in_dll(libc(), "environ")
        found: dict[str, str] = {}
        index = 0
        while entries[index] is not None:
            name, sep, value = entries[index].partition(b"=")
            if sep:
                found.setdefault(os.fsdecode(name), os.fsdecode(value))
            index += 1
        return found
    except (OSError, ValueError, AttributeError):  # pragma: no cover - no C environ to read
        return dict(os.environ)
