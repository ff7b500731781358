"""Installs the mutation hook as each interpreter of a mutation run starts (see pytest_npu_lazy.mutate.hook).

This folder is first on PYTHONPATH only during a mutation run. A
``sitecustomize`` that the environment had before is still imported after.
"""

import os
import sys


def _chain_to_the_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    this = sys.modules.pop("sitecustomize", None)
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        import sitecustomize  # noqa: F401 - the environment's own, if any
    except ImportError:
        pass
    finally:
        sys.path[:] = saved
        # the import system reads this name back once this file has run: put back this module where no other
        # sitecustomize took its place (else Python prints "Error in sitecustomize: KeyError")
        if this is not None:
            sys.modules.setdefault("sitecustomize", this)


try:
    from pytest_npu_lazy.mutate.hook import install_from_env

    install_from_env()
finally:
    _chain_to_the_next_sitecustomize()
