"""What a ``sitecustomize`` of this package does last: import the one the environment had.

The mutation runner and the selection map each put a folder holding a ``sitecustomize.py`` first on
``PYTHONPATH`` for the processes they watch (``mutate/site``, ``selection/site``). Python imports only
the first ``sitecustomize`` it finds, so each, having done its work, imports the next one on the path
in its place: the environment's own (or the other folder's, when both are on the path).
"""

from __future__ import annotations

import os
import sys


def chain_to_the_next_sitecustomize(here: str) -> None:
    """Import the ``sitecustomize`` that the one in folder ``here`` hides, if any."""
    this = sys.modules.pop("sitecustomize", None)
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        import sitecustomize  # type: ignore[import-not-found]  # noqa: F401 - the environment's own, if any: found at run time
    except ImportError:
        pass
    finally:
        sys.path[:] = saved
        # the import system reads this name back once the caller's file has run: put back its module where no
        # other sitecustomize took its place (else Python prints "Error in sitecustomize: KeyError")
        if this is not None:
            sys.modules.setdefault("sitecustomize", this)
