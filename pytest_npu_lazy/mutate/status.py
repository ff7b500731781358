"""What became of a mutant, named once: the runner classifies, the configuration's verdicts excuse, the report
counts and sorts, all with these names (they are also the strings a record holds)."""

from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    CAUGHT = "caught"  #: a test failed, or was killed at its limit
    SURVIVED = "survived"  #: every selected test passed
    NOT_RUN = "not-run"  #: no test runs its function, or a verdict was recorded without a run
    TIMEOUT = "timeout"  #: the run was stopped at the mutant's limit with no test failed
    ERROR = "error"  #: pytest broke with no test failed: the harness, not a catch
    EQUIVALENT = "equivalent"  #: a verdict: no observable difference
    DEVICE_ONLY = "device-only"  #: a verdict: the difference shows only on an NPU

    def __str__(self) -> str:
        return self.value


#: the verdicts mutation.toml may give, and the statuses they turn a survivor into: excused from the score
VERDICTS = (Status.EQUIVALENT, Status.DEVICE_ONLY)
#: what the report lists under "Not caught, and why"
NOT_CAUGHT = (Status.SURVIVED, Status.NOT_RUN, Status.TIMEOUT, Status.ERROR)
