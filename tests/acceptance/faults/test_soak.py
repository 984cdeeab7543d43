import json
import subprocess
import sys

from testkit.system import ROOT


def test_a_small_chaos_soak_loses_nothing_and_pays_nothing_twice():
    # 8 lessons through the whole system while workers are SIGKILLed, Redis is flushed and PostgreSQL restarts
    result = subprocess.run([sys.executable, str(ROOT / "bin" / "soak"), "--lessons", "8", "--blocks", "2",
                             "--kill-every", "1.5", "--time-limit", "150", "--json"],
                            capture_output=True, text=True, timeout=240, cwd=ROOT)
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert result.returncode == 0, report
    assert report["lost_tasks"] == 0 and report["keys_executed_twice_without_decision"] == 0
    assert report["admission_counters_disagree"] == {}   # the pending counts survived the crashes exactly
    assert report["tasks"] == report["expected_tasks"] == 40
    faults = [name for name, _ in report["recovery_seconds"]]
    assert "Redis FLUSHALL" in faults and "PostgreSQL restart" in faults
    assert all(after == after for _, after in report["recovery_seconds"])   # NaN: progress never resumed
