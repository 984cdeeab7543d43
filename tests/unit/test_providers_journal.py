"""The local providers' memory: journal + lookup by idempotency key, and armed faults."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from providers.base import Found, GenerateRequest, NoRecord, Unsupported
from providers.errors import Ambiguous, Busy, Permanent, ProviderConfigError, Transient
from providers.journal import CRASH_EXIT_CODE, FaultPlan
from providers.local_image import LocalImageProvider
from providers.local_tts import LocalSpeechProvider
from providers.registry import ProviderConfig, build_provider

ROOT = Path(__file__).resolve().parents[2]
KEY = "3f2a9c1e-5b7d-4e2f-9a10-7c3b5d9e1f20"


def image_request(text: str = "a paper boat on a pond", key: str = KEY) -> GenerateRequest:
    return GenerateRequest("image", text, {"size": "160x120"}, key)


@pytest.fixture
def image(tmp_path):
    return LocalImageProvider(tmp_path)


def entry_file(journal_dir: Path, key: str = KEY) -> Path:
    return journal_dir / "local-image" / "entries" / f"{key}.result"


def test_lookup_finds_nothing_before_and_the_same_bytes_after_generate(image):
    assert image.lookup(KEY) == NoRecord()
    made = image.generate(image_request())
    answer = image.lookup(KEY)
    assert isinstance(answer, Found)
    assert answer.result.data == made.data
    assert (answer.result.media_type, answer.result.provider_request_id) == (made.media_type, made.provider_request_id)


def test_a_repeated_key_replays_the_journal_without_rendering_again(image, tmp_path):
    first = image.generate(image_request())
    inode = entry_file(tmp_path).stat().st_ino
    again = image.generate(image_request())
    # a new render would carry a new request id and rewrite (replace) the entry
    assert again.provider_request_id == first.provider_request_id
    assert entry_file(tmp_path).stat().st_ino == inode
    assert again.data == first.data


def test_the_journal_outlives_the_provider_object(tmp_path):
    made = LocalImageProvider(tmp_path).generate(image_request())
    answer = LocalImageProvider(tmp_path).lookup(KEY)
    assert isinstance(answer, Found) and answer.result.data == made.data


def test_a_key_reused_for_different_input_is_permanent(image):
    image.generate(image_request("first text"))
    with pytest.raises(Permanent, match="different request"):
        image.generate(image_request("second text"))


@pytest.mark.parametrize("key", ["", "../escape", "a/b", ".hidden", "x" * 129, "ключ", "key with space", "k\x00"])
def test_a_key_that_is_not_a_safe_file_name_is_permanent_and_writes_nothing(image, tmp_path, key):
    before = sorted(p for p in tmp_path.rglob("*"))
    with pytest.raises(Permanent, match="idempotency key"):
        image.generate(image_request(key=key))
    with pytest.raises(Permanent):
        image.lookup(key)
    assert sorted(p for p in tmp_path.rglob("*")) == before


def test_a_damaged_journal_entry_is_reported_not_trusted(image, tmp_path):
    image.generate(image_request())
    path = entry_file(tmp_path)
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(Ambiguous, match="damaged"):
        image.lookup(KEY)


def test_the_speech_provider_journals_and_replays_too(tmp_path):
    speech = LocalSpeechProvider(tmp_path)
    request = GenerateRequest("audio", "journal me", {"locale": "en"}, KEY)
    assert speech.lookup(KEY) == NoRecord()
    made = speech.generate(request)
    assert speech.generate(request).provider_request_id == made.provider_request_id
    assert speech.lookup(KEY) == Found(made)


@pytest.mark.parametrize("fault, error", [
    ("fail_before_send", Transient), ("permanent_error", Permanent), ("rate_limited", Busy),
])
def test_a_fault_before_the_work_fires_once_and_leaves_nothing_done(image, fault, error):
    image.arm(fault)
    with pytest.raises(error) as caught:
        image.generate(image_request())
    assert image.lookup(KEY) == NoRecord()
    assert image.armed_faults() == []
    assert isinstance(image.generate(image_request()).data, bytes)  # the next call is normal
    if fault == "rate_limited":
        assert caught.value.retry_after == 2


def test_accept_then_lose_does_the_work_then_reports_an_unknown_outcome(image):
    image.arm("accept_then_lose")
    with pytest.raises(Ambiguous):
        image.generate(image_request())
    found = image.lookup(KEY)
    assert isinstance(found, Found)
    assert image.generate(image_request()).provider_request_id == found.result.provider_request_id


def test_armed_faults_fire_in_arming_order(image):
    image.arm("rate_limited")
    image.arm("fail_before_send")
    assert image.armed_faults() == ["rate_limited", "fail_before_send"]
    with pytest.raises(Busy):
        image.generate(image_request())
    with pytest.raises(Transient):
        image.generate(image_request())


def test_an_unknown_fault_is_refused_with_the_choices(image):
    with pytest.raises(ProviderConfigError, match="fail_before_send"):
        image.arm("meteor_strike")


def test_disarm_all_drops_every_armed_fault(image):
    image.arm("permanent_error")
    image.arm("rate_limited")
    assert image.disarm_all() == 2
    assert image.generate(image_request()).media_type == "image/webp"


def test_a_fault_armed_for_a_scope_strikes_only_a_request_whose_text_carries_it(image):
    image.arm("permanent_error", scope="demo 1a2b3c4d")
    # another lesson's call passes untouched, and the fault stays armed
    assert image.generate(image_request("a kite over the sea", key="other-key")).media_type == "image/webp"
    assert image.armed_faults() == ["permanent_error"]
    with pytest.raises(Permanent):
        image.generate(image_request("a paper boat (demo 1a2b3c4d)"))
    assert image.armed_faults() == []


def test_disarming_a_scope_leaves_the_faults_of_other_scopes_armed(image):
    image.arm("permanent_error", scope="demo aaaa0000")
    image.arm("rate_limited", scope="demo bbbb1111")
    assert image.disarm_all(scope="demo aaaa0000") == 1
    assert image.armed_faults() == ["rate_limited"]


def test_a_fault_armed_before_scopes_existed_strikes_the_next_call(tmp_path):
    plan = FaultPlan(tmp_path)
    (tmp_path / "faults" / "00000000000000000001-abcdef12-fail_before_send").write_bytes(b"fail_before_send")
    assert plan.take("any text") == "fail_before_send"


def test_one_armed_fault_is_consumed_by_exactly_one_of_many_racing_callers(tmp_path):
    FaultPlan(tmp_path).arm("fail_before_send")
    barrier = threading.Barrier(8)
    taken: list = []

    def claim() -> None:
        plan = FaultPlan(tmp_path)
        barrier.wait()
        taken.append(plan.take())

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(taken) == 8
    assert taken.count("fail_before_send") == 1 and taken.count(None) == 7


def run_generate_in_another_process(journal_dir: Path, text: str) -> subprocess.CompletedProcess:
    code = (
        "import sys; from pathlib import Path; from providers.local_image import LocalImageProvider; "
        "from providers.base import GenerateRequest; "
        "LocalImageProvider(Path(sys.argv[1])).generate("
        "GenerateRequest('image', sys.argv[2], {'size': '160x120'}, sys.argv[3])); print('returned')"
    )
    return subprocess.run([sys.executable, "-c", code, str(journal_dir), text, KEY], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_crash_mid_call_kills_the_worker_after_the_work_is_journaled_and_fires_once(tmp_path):
    # given: the fault is armed by this process (as the web app would)
    build_provider("image", ProviderConfig(backend="local"), journal_dir=tmp_path).arm("crash_mid_call")
    # when: a worker process runs the call
    crashed = run_generate_in_another_process(tmp_path, "a paper boat on a pond")
    # then: it died with 137 before returning, but the provider remembers the work
    assert crashed.returncode == CRASH_EXIT_CODE and "returned" not in crashed.stdout
    assert isinstance(LocalImageProvider(tmp_path).lookup(KEY), Found)
    # and the fault is spent: the next worker returns normally
    again = run_generate_in_another_process(tmp_path, "a paper boat on a pond")
    assert again.returncode == 0 and "returned" in again.stdout


def test_a_fault_armed_in_one_process_fires_in_another(tmp_path):
    code = ("import sys; from pathlib import Path; from providers.local_image import LocalImageProvider; "
            "LocalImageProvider(Path(sys.argv[1])).arm('permanent_error')")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, check=True, timeout=60)
    with pytest.raises(Permanent, match="armed fault"):
        LocalImageProvider(tmp_path).generate(image_request())


def test_journal_files_are_written_whole_with_no_temp_files_left(image, tmp_path):
    image.generate(image_request())
    entries = os.listdir(entry_file(tmp_path).parent)
    assert entries == [f"{KEY}.result"]


def test_accept_then_lose_untraced_does_the_work_but_its_lookup_cannot_tell(image):
    # the demo's provider_unknown: nothing can find out what happened, so only a person decides
    image.arm("accept_then_lose_untraced")
    with pytest.raises(Ambiguous):
        image.generate(image_request())
    assert image.lookup(KEY) == Unsupported()
    # a retry the editor consents to is answered with the first result (the key is honoured)
    assert isinstance(image.generate(image_request()).data, bytes)
