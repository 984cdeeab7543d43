"""The worker process's one heartbeat thread (pipeline/runtime.py, Heartbeats): each watched attempt beats on
its own interval, a forgotten one never again, and forgetting waits for a beat in progress; a watch wakes the
thread only when its first beat is due before the one the thread sleeps towards."""

import threading
import time

from pipeline.runtime import Heartbeats


class Attempt:
    def __init__(self, gate: threading.Event | None = None, fails: bool = False) -> None:
        self.times: list[float] = []
        self.gate, self.fails = gate, fails
        self.in_tick = threading.Event()
        self.ticked = threading.Condition()

    def tick(self) -> None:
        self.in_tick.set()
        if self.gate is not None:
            self.gate.wait(10)
        with self.ticked:
            self.times.append(time.monotonic())
            self.ticked.notify_all()
        if self.fails:
            raise RuntimeError("a beat that fails in a way nobody expected")

    def wait_for(self, count: int, seconds: float = 10.0) -> bool:
        with self.ticked:
            return self.ticked.wait_for(lambda: len(self.times) >= count, timeout=seconds)


def test_each_attempt_beats_on_its_own_interval_and_a_forgotten_one_stops():
    beats = Heartbeats()
    fast, slow = Attempt(), Attempt()
    started = time.monotonic()
    beats.watch(fast, 0.05)
    beats.watch(slow, 0.3)
    assert slow.wait_for(2)
    assert fast.times[0] - started >= 0.05 and slow.times[0] - started >= 0.3   # a beat is due one interval in
    assert len(fast.times) >= 6 * len(slow.times) - 6 and len(fast.times) >= 6
    beats.forget(fast)
    after = len(fast.times)
    assert slow.wait_for(len(slow.times) + 2)   # the thread went on beating for the other one
    assert len(fast.times) == after
    beats.forget(slow)


def test_forget_returns_only_once_the_beat_in_progress_ended():
    beats = Heartbeats()
    gate = threading.Event()
    held = Attempt(gate)
    beats.watch(held, 0.01)
    assert held.in_tick.wait(10)
    forgetting = threading.Thread(target=beats.forget, args=(held,))
    forgetting.start()
    forgetting.join(0.3)
    assert forgetting.is_alive() and held.times == []   # still inside the beat: forget waits
    gate.set()
    forgetting.join(10)
    assert not forgetting.is_alive() and len(held.times) == 1
    other = Attempt()
    beats.watch(other, 0.01)
    assert other.wait_for(10)   # the thread went on beating: a forgotten attempt is not among its beats
    assert len(held.times) == 1
    beats.forget(other)


def test_a_beat_that_raises_does_not_stop_the_thread():
    beats = Heartbeats()
    failing, steady = Attempt(fails=True), Attempt()
    beats.watch(failing, 0.01)
    beats.watch(steady, 0.01)
    assert failing.wait_for(3) and steady.wait_for(3)   # the failing one is beaten again, and the other goes on
    beats.forget(failing)
    beats.forget(steady)


def test_a_watch_due_before_the_beat_the_thread_waits_for_wakes_it_and_a_later_one_is_not_late():
    beats = Heartbeats()
    slow, fast = Attempt(), Attempt()
    beats.watch(slow, 30.0)   # the thread now sleeps until 30 s from now
    time.sleep(0.05)
    started = time.monotonic()
    beats.watch(fast, 0.1)    # due long before that: the watch must wake it
    assert fast.wait_for(1, seconds=5)
    assert 0.1 <= fast.times[0] - started < 2.0
    beats.forget(fast)
    beats.forget(slow)
    later = Attempt()
    started = time.monotonic()
    beats.watch(later, 0.2)   # the thread may still sleep towards the forgotten ones' beats, due later than this
    assert later.wait_for(1, seconds=5)
    assert 0.2 <= later.times[0] - started < 2.0
    beats.forget(later)
