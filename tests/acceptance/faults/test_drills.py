"""The fault drills (testkit/drill_cases.py, run by testkit/drills.py), each case on a whole stack of processes: the definitions `bin/drill`
runs, checked here; a case passes only with what it checks holding and no input run twice by the provider."""

import pytest

from testkit import drills
from testkit.drill_cases import CASES


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name.replace(" ", "-"))
def test_the_drill_passes_with_its_evidence(case, make_stack, fake):
    record = drills.run_case(case, make_stack, fake)
    assert record.outcome == drills.PASSED, f"{record.reason}\n{record.states.get('traceback')}"
    assert record.started_at < record.ended_at
