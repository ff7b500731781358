"""The regression zoo (test/dynamo/test_regression_zoo.py): each known regression breaks its check.

Each regression runs the one check it breaks in one process, with the
regression installed first (test/dynamo/regressions.py). As in test/dynamo,
the same checks without a regression, run by the rest of the suite, are
the control.
"""

from __future__ import annotations

import pytest

from .conftest import DYNAMO, run_code
from .test_first_call import matches_eager_code
from .test_import import IMPORT_DEFERS
from .test_triton import TRITON_HELPERS
from .test_wrapper import wrapper_code

ZOO = {
    "eager_inductor_setup": wrapper_code({}),
    "eager_dynamo_import": IMPORT_DEFERS,
    "triton_helpers_at_wrap": TRITON_HELPERS,
    "wrong_first_call": matches_eager_code("sin_cos"),
}


def _with_regression(name: str) -> str:
    return (f"sys.path[:0] = [{str(DYNAMO)!r}, {str(DYNAMO.parent)!r}]\n"  # regressions.py, and breakage.py it uses
            f"from regressions import REGRESSIONS\n"
            f"REGRESSIONS[{name!r}]()\n")


@pytest.mark.parametrize("regression", list(ZOO))
def test_regression_is_caught_and_explained(regression):
    result = run_code(ZOO[regression], prefix=_with_regression(regression))
    assert result.returncode != 0, f"{regression} was not caught:\n{result.stdout}\n{result.stderr}"
    assert "Traceback (most recent call last)" in result.stderr, result.stderr
