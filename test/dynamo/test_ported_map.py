"""The map of torch_npu's guarantee file onto this suite stays true: every test it names exists, and
docs/torch_npu-tests.md has a row for every test of theirs and names every test of ours."""

from __future__ import annotations

import re
from pathlib import Path

from ported import DEVICE_PORTED, PORTED, V2_12_ONLY

DYNAMO = Path(__file__).resolve().parent
DOC = DYNAMO.parent.parent / "docs" / "torch_npu-tests.md"
#: torch_npu's file has 25 tests on master and two more on the v2.12.0 branch
THEIR_TEST_COUNT = 27


def _doc_rows(first_column: str = r"`?(test_\w+)`?[^|]*") -> dict[str, str]:
    """The table rows of the document whose first column matches (group 1: the key), and the rest of each."""
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\|\s*" + first_column + r"\|(.*)", line)
        if match:
            rows[match.group(1)] = match.group(2)
    return rows


def test_every_mapped_test_function_exists():
    missing = []
    for theirs, ours in PORTED.items():
        for node in ours:
            file, function = node.split("::")
            source = (DYNAMO / file).read_text(encoding="utf-8") if (DYNAMO / file).exists() else ""
            if not re.search(rf"^def {re.escape(function)}\(", source, re.MULTILINE):
                missing.append(f"{theirs} -> {node}")
    assert not missing, "ported.py names test functions that do not exist:\n" + "\n".join(missing)


def test_the_map_covers_every_test_of_theirs():
    assert len(PORTED) == THEIR_TEST_COUNT, f"{len(PORTED)} of their {THEIR_TEST_COUNT} tests are mapped"
    assert set(V2_12_ONLY) <= set(PORTED)


def test_the_document_has_a_row_per_test_of_theirs_naming_ours():
    rows = _doc_rows()
    assert set(rows) == set(PORTED), (f"rows missing: {sorted(set(PORTED) - set(rows))}; "
                                      f"rows not in ported.py: {sorted(set(rows) - set(PORTED))}")
    unnamed = [f"{theirs}: {node}" for theirs, ours in PORTED.items() for node in ours
               if node.split("::")[1] not in rows[theirs]]
    assert not unnamed, "docs/torch_npu-tests.md does not name these tests of ours:\n" + "\n".join(unnamed)


def test_the_device_side_map_names_existing_tests_and_the_document_explains_each():
    missing = [f"{theirs} -> {node}" for theirs, ours in DEVICE_PORTED.items() for node in ours
               if not re.search(rf"^def {re.escape(node.split('::')[1])}\(",
                                (DYNAMO / node.split("::")[0]).read_text(encoding="utf-8"), re.MULTILINE)]
    assert not missing, "ported.DEVICE_PORTED names test functions that do not exist:\n" + "\n".join(missing)
    rows = _doc_rows(r"`(test/[^`]+)`\s*")  # their tests in other files: a path
    assert set(rows) == set(DEVICE_PORTED), (f"rows missing: {sorted(set(DEVICE_PORTED) - set(rows))}; "
                                             f"rows not in ported.py: {sorted(set(rows) - set(DEVICE_PORTED))}")
    unnamed = [f"{theirs}: {node}" for theirs, ours in DEVICE_PORTED.items() for node in ours
               if node.split("::")[1] not in rows[theirs]]
    assert not unnamed, "docs/torch_npu-tests.md does not name these tests of ours:\n" + "\n".join(unnamed)
    unexplained = [theirs for theirs, ours in DEVICE_PORTED.items() if not ours and "not ported" not in rows[theirs]]
    assert not unexplained, f"rows that port nothing must say why (\"not ported: ...\"): {unexplained}"
