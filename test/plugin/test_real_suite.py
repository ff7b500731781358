"""A real third-party suite gives every test the same outcome in-process and isolated.

The suite is pinned with its hash in requirements/real-suite.txt and comes
from its sdist (which ships its tests), downloaded once into the plugin's
cache directory. It runs twice under ``-W error``: without the plugin, and
with every test isolated in a bare zygote (``--npu-lazy-isolate=all
--npu-lazy-preload=``). Any test whose outcome differs fails this check by
its node id.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from pytest_npu_lazy.cann import default_cache_dir

REQUIREMENT = Path(__file__).resolve().parents[2] / "requirements" / "real-suite.txt"
MIN_TESTS = 150  # the pinned release has 180; far fewer means the suite was not really run


def _pinned() -> tuple[str, str, str]:
    line = next(line for line in REQUIREMENT.read_text().splitlines() if line and not line.startswith("#"))
    match = re.fullmatch(r"(\S+)==(\S+) --hash=sha256:([0-9a-f]{64})", line.strip())
    assert match, f"{REQUIREMENT}: expected 'name==version --hash=sha256:...', got {line!r}"
    return match.group(1), match.group(2), match.group(3)


def _sdist() -> Path:
    """The pinned sdist from the cache, downloaded (and its hash checked by pip) the first time."""
    name, version, digest = _pinned()
    folder = default_cache_dir() / "sdists"
    for path in folder.glob(f"{name}-{version}.tar.gz"):
        if hashlib.sha256(path.read_bytes()).hexdigest() == digest:
            return path
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
               "--no-binary", ":all:", "--require-hashes", "-r", str(REQUIREMENT), "-d", str(folder)]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, f"could not download {name}=={version}: {' '.join(command)}\n{done.stderr}"
    return folder / f"{name}-{version}.tar.gz"


def _outcomes(junit: Path) -> dict[str, str]:
    outcomes = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcomes[f"{case.get('classname')}::{case.get('name')}"] = kinds[0] if kinds else "passed"
    return outcomes


def test_real_suite_outcomes_match_test_by_test(tmp_path):
    name, version, _ = _pinned()
    with tarfile.open(_sdist()) as archive:
        archive.extractall(tmp_path, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    source = tmp_path / f"{name}-{version}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(source), *filter(None, [os.environ.get("PYTHONPATH")])]))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as on a developer's machine: children reuse compiled modules
    runs = {"in-process": ("-p", "no:npu_lazy"), "isolated": ("--npu-lazy-isolate=all", "--npu-lazy-preload=")}
    outcomes, times = {}, {}
    for mode, args in runs.items():
        junit = tmp_path / f"{mode}.xml"
        command = [sys.executable, "-m", "pytest", "-W", "error", "-p", "no:cacheprovider", "-p", "no:randomly",
                   "-q", f"--junitxml={junit}", *args, name]
        started = time.monotonic()
        done = subprocess.run(command, cwd=source, env=env, capture_output=True, text=True, timeout=600)
        times[mode] = time.monotonic() - started
        assert junit.exists(), f"{mode}: {' '.join(command)}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        outcomes[mode] = _outcomes(junit)
        print(f"{mode}: {len(outcomes[mode])} tests in {times[mode]:.1f} s, exit {done.returncode}: "
              f"{done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ''}")
    differing = sorted(k for k in {*outcomes["in-process"], *outcomes["isolated"]}
                       if outcomes["in-process"].get(k) != outcomes["isolated"].get(k))
    assert not differing, "outcomes differ (in-process -> isolated):\n" + "\n".join(
        f"  {k}: {outcomes['in-process'].get(k, 'absent')} -> {outcomes['isolated'].get(k, 'absent')}"
        for k in differing)
    assert len(outcomes["isolated"]) >= MIN_TESTS, outcomes["isolated"]
