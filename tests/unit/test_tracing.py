"""Tracing is on only when the OpenTelemetry SDK's own settings name an OTLP endpoint, and off it costs nothing: none
of the SDK's tracing, its exporter or an instrumentation is imported, and spans are one shared no-op.

(redis-py 8 imports `opentelemetry.sdk.metrics` itself when it is installed, for metrics of its own that stay off
unless initialised: docs/tracing.md, "What it costs".)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pipeline import settings, tracing

ROOT = Path(__file__).resolve().parents[2]


def test_tracing_is_on_only_when_an_otlp_endpoint_is_set_and_the_sdk_is_not_disabled():
    assert settings.load({}).tracing is False
    assert settings.load({"OTEL_EXPORTER_OTLP_ENDPOINT": " "}).tracing is False
    assert settings.load({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}).tracing is True
    assert settings.load({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}).tracing is True
    assert settings.load({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
                          "OTEL_SDK_DISABLED": "true"}).tracing is False


def test_off_the_web_and_the_job_import_no_tracing_sdk_and_their_spans_are_one_shared_no_op():
    # given a fresh interpreter that loads the web app, the worker's job and the executor, with tracing off
    script = """
import sys
from pipeline import attempt, dispatch, executor, tracing, versions, webhook_delivery
import web
web.create_app({"SECRET_KEY": "x" * 40})
assert not tracing.setup(False, "test")
first, second = tracing.span("a", attributes={"k": 1}), tracing.span("b")
assert first is second
with first as span:
    assert span is None and tracing.traceparent() is None and tracing.now_ns() is None
tracing.finished("c", None)
print(sorted(m for m in sys.modules if m.startswith(("opentelemetry.sdk.trace", "opentelemetry.exporter",
                                                     "opentelemetry.instrumentation", "opentelemetry.propagate"))))
"""
    # when it runs
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    # then neither the SDK's tracing nor its exporter nor an instrumentation was imported
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


def test_a_span_attribute_the_sdk_cannot_take_is_sent_as_text_and_none_is_left_out():
    assert tracing._clean({"a": None, "b": 1, "c": [1, 2], "d": ("x",), "e": {"k": 1}}) == {
        "b": 1, "c": [1, 2], "d": "('x',)", "e": "{'k': 1}"}
