"""Paths in chains and reports name packages, never a machine's directories: site-packages, Debian's
dist-packages and the standard library are all cut at the package."""

from __future__ import annotations

import os
import sysconfig
import threading

from pytest_npu_lazy.probe.recorder import _short_path


def test_installed_packages_and_the_standard_library_are_shown_from_the_package_down():
    assert _short_path(os.path.join(os.sep, "opt", "venv", "lib", "python3.12", "site-packages", "torch",
                                    "__init__.py")) == os.path.join("torch", "__init__.py")
    assert _short_path(os.path.join(os.sep, "usr", "lib", "python3", "dist-packages", "torch",
                                    "__init__.py")) == os.path.join("torch", "__init__.py")
    assert _short_path(threading.__file__) == "threading.py"
    assert not _short_path(os.path.join(sysconfig.get_paths()["stdlib"], "json", "decoder.py")).startswith(os.sep)
