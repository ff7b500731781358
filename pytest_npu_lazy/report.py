"""Reports for people and CI: terminal summary, JSON, JUnit properties (work in progress)."""

from __future__ import annotations

import pytest


def add_options(parser: pytest.Parser) -> None:
    """Options and ini keys of the reports."""


class Reporter:
    """Collects the ``npu_lazy`` data of every test report and writes the reports at session end."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
