import json
import subprocess
import sys
import time

from testkit.system import ROOT


def soak(*args: str, timeout: float) -> tuple[int, dict]:
    result = subprocess.run([sys.executable, str(ROOT / "bin" / "soak"), *args, "--json"],
                            capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    return result.returncode, json.loads(result.stdout.strip().splitlines()[-1])


def test_a_small_chaos_soak_loses_nothing_and_pays_nothing_twice():
    # 8 lessons through the whole system while workers are SIGKILLed, Redis is flushed and PostgreSQL restarts
    returncode, report = soak("--lessons", "8", "--blocks", "2", "--kill-every", "1.5", "--time-limit", "150",
                              timeout=240)
    assert returncode == 0, report
    assert report["lost_tasks"] == 0 and report["keys_executed_twice_without_decision"] == 0
    assert report["admission_counters_disagree"] == {}   # the pending counts survived the crashes exactly
    assert report["tasks"] == report["expected_tasks"] == 40
    faults = [name for name, _ in report["recovery_seconds"]]
    assert "Redis FLUSHALL" in faults and "PostgreSQL restart" in faults
    assert all(after == after for _, after in report["recovery_seconds"])   # NaN: progress never resumed


def test_the_time_limit_bounds_the_whole_soak_and_names_the_phase_it_cut():
    # 150 tasks cannot finish in the one second the chaos gets out of 21: the soak must stop at its limit,
    # fail, and say where the time ran out, instead of running on until something outside kills it
    begun = time.monotonic()
    returncode, report = soak("--lessons", "30", "--blocks", "2", "--time-limit", "21", timeout=90)
    assert returncode == 1, report
    assert report["overran"] in ("start", "save", "chaos"), report
    assert time.monotonic() - begun < 21 + 15, report      # the limit, with the time to stop the servers
