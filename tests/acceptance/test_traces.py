"""Issue 52's traces, on the stack the README starts (`bin/dev`, the Procfile's lines: gunicorn's forked web workers,
RQ's worker pools and their forked children, the dispatcher), with OTEL_EXPORTER_OTLP_ENDPOINT pointing at a real
OTLP/HTTP receiver on 127.0.0.1 that decodes what it gets with the opentelemetry-proto classes: one save is one
trace, from the web request through each worker's job, claim, provider call (the image's over HTTP to a fake
OpenAI-compatible server, traced by the requests instrumentation), receipts and completion, to the webhook the
version's completion sends; and what the processes still hold when the stack stops (a bulk save's messages sent by
the dispatcher among it) reaches the collector in the save's trace before they exit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bin.embedded import free_port
from pipeline.db import connect
from testkit import otlp
from testkit.fakeprovider import FakeProviderServer
from testkit.helpers import wait_until
from testkit.receiver import Receiver
from testkit.stack import DevStack, lesson

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ENV = {"WEBHOOK_ALLOW_NETWORKS": "127.0.0.0/8", "WEBHOOK_WORKERS": "1", "IMAGE_WORKERS": "1", "TTS_WORKERS": "1",
       "OTEL_BSP_SCHEDULE_DELAY": "200"}
WORKER_SPANS = {"run_task image", "run_task tts", "run_task bundle", "claim", "provider call", "receipt intent",
                "receipt result", "complete"}


def test_one_save_is_one_trace_across_the_web_the_workers_and_the_webhook_sender(database_url, redis_url, tmp_path):
    collector, hooks, fake = otlp.Receiver().start(), Receiver().start(), FakeProviderServer().start()
    # given the whole stack tracing to a collector on this machine, images from an HTTP provider, and an endpoint
    # that wants completions
    stack = DevStack.start(database_url=database_url, redis_url=redis_url, media_dir=tmp_path / "media",
                           port=free_port(), log=tmp_path / "dev.log", OTEL_EXPORTER_OTLP_ENDPOINT=collector.url,
                           IMAGE_PROVIDER="openai", IMAGE_BASE_URL=f"{fake.base_url}/v1", IMAGE_API_KEY="sk-traces",
                           IMAGE_DAILY_BUDGET="unlimited", **ENV)
    try:
        stack.wait_ready()
        added = subprocess.run([sys.executable, str(ROOT / "bin" / "webhooks"), "add", hooks.url, "--team", "default",
                                "--by", "ops", "--events", "version.completed"], cwd=ROOT, capture_output=True,
                               text=True, timeout=60, env={**stack.env, "PATH": os.environ["PATH"]})
        assert added.returncode == 0, added.stderr
        hooks.secret = added.stdout.strip().splitlines()[-1]

        # when an editor saves a lesson and its media are made
        _, saved = stack.save(lesson(1, "traces"))
        with connect(database_url, autocommit=True) as conn:
            version = conn.execute("SELECT traceparent FROM versions WHERE content_id = %s AND version = %s",
                                   (saved["content_id"], saved["version"])).fetchone()
            task_ids = {r["id"] for r in conn.execute("SELECT id FROM tasks WHERE content_id = %s AND version = %s",
                                                      (saved["content_id"], saved["version"])).fetchall()}
        assert version["traceparent"], "the save wrote no traceparent on its version"
        trace_id = version["traceparent"].split("-")[1]

        def complete():
            names = {s.name for s in collector.spans(trace_id)}
            return WORKER_SPANS <= names and {"save", "outbox send", "webhook send"} <= names
        try:
            wait_until(complete, timeout=90, message="the save's whole trace at the collector")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; it has {sorted({s.name for s in collector.spans(trace_id)})}\n"
                                 f"{stack.tail()}") from None

        # then every span of it is in the save's trace, in the processes that did the work, joined parent to child
        spans = collector.spans(trace_id)
        by_service = {service: {s.name for s in spans if s.service == service} for service in {s.service for s in spans}}
        [request] = [s for s in spans if s.service == "mediapipe-web" and s.kind == 2]   # SPAN_KIND_SERVER
        assert request.parent_id == "" and request.name == "POST /api/contents", request
        assert {"save", "outbox send"} <= by_service["mediapipe-web"]
        assert WORKER_SPANS <= by_service["mediapipe-worker"], by_service
        assert "webhook send" in by_service["mediapipe-webhook"], by_service
        ids = {s.span_id for s in spans}
        assert all(s.parent_id in ids for s in spans if s is not request), \
            [s for s in spans if s is not request and s.parent_id not in ids]
        calls = [s for s in spans if s.name == "provider call"]
        assert sorted(s.attributes["task.kind"] for s in calls) == ["image", "tts"]
        assert all(s.kind == 3 for s in calls)   # SPAN_KIND_CLIENT
        jobs = {s.span_id: s for s in spans if s.name.startswith("run_task ")}
        assert all(jobs[s.parent_id].attributes["task.id"] == s.attributes["task.id"] for s in calls)
        [image] = [s for s in calls if s.attributes["task.kind"] == "image"]
        http = [s for s in spans if s.parent_id == image.span_id and s.kind == 3]
        assert len(http) == 1 and any(fake.base_url in str(v) for v in http[0].attributes.values()), http
        # and no span of this version's tasks went to a trace of its own
        strays = [s for s in collector.spans() if s.attributes.get("task.id") in task_ids and s.trace_id != trace_id]
        assert strays == []
    finally:
        stack.stop()
        hooks.stop()
        collector.stop()
        fake.stop()


def test_spans_the_workers_and_the_dispatcher_still_hold_are_exported_when_the_stack_stops(database_url, redis_url,
                                                                                          tmp_path):
    collector = otlp.Receiver().start()
    # given a stack whose span processors export only every ten minutes (or at exit), and a bulk save, whose messages
    # only the dispatcher sends
    stack = DevStack.start(database_url=database_url, redis_url=redis_url, media_dir=tmp_path / "media",
                           port=free_port(), log=tmp_path / "dev.log", OTEL_EXPORTER_OTLP_ENDPOINT=collector.url,
                           **{**ENV, "OTEL_BSP_SCHEDULE_DELAY": "600000"})
    try:
        stack.wait_ready()
        _, saved = stack.save(lesson(1, "held spans"), priority="bulk")
        stack.wait_done(saved["content_id"], saved["version"])
        with connect(database_url, autocommit=True) as conn:
            trace_id = conn.execute("SELECT traceparent FROM versions WHERE content_id = %s AND version = %s",
                                    (saved["content_id"], saved["version"])).fetchone()["traceparent"].split("-")[1]
        assert not [s for s in collector.spans() if s.service == "mediapipe-worker"]   # held by the workers
        # when the stack stops as Ctrl-C stops it (RQ's pool children end with os._exit, past the SDK's atexit)
        assert stack.stop() == []
        # then each worker and the dispatcher exported what it held before it exited, in the save's trace
        names = {s.name for s in collector.spans(trace_id) if s.service == "mediapipe-worker"}
        assert WORKER_SPANS <= names, names
        assert "save" in {s.name for s in collector.spans(trace_id) if s.service == "mediapipe-web"}
        sent = [s for s in collector.spans(trace_id) if s.service == "mediapipe-dispatcher"]
        assert sent and {s.name for s in sent} == {"outbox send"}, sent
    finally:
        stack.stop()
        collector.stop()
