"""Traces, one per save, across the web, the dispatcher and the workers (docs/tracing.md): the only module that
imports OpenTelemetry, and only when tracing is on.

Tracing is on when the OpenTelemetry SDK's own settings name an OTLP endpoint (`Settings.tracing`, from
OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); the SDK reads the rest of its OTEL_* settings
itself. Off, `setup` imports nothing, `span` hands back one shared no-op context and `traceparent` is None: a save,
a claim and a call cost what they cost before.

Each process calls `setup` once after it is forked (gunicorn's worker after fork, RQ's pool child in its worker's
`work`, the dispatcher in its main): the SDK's advice for forking servers, since a batch span processor's export
thread does not survive a fork. The processor exports in the background on the SDK's schedule (OTEL_BSP_*); what is
left is exported when the process exits normally (the SDK's `atexit`), or, for RQ's pool children, which end with
`os._exit`, when their worker's loop ends (`shutdown`).

The context travels in PostgreSQL, not in the RQ message (bin/worker.py refuses messages with anything but task
ids): the save writes its W3C traceparent on the version (`versions.traceparent`, schema/0029), and the worker's
claim, the dispatcher and the webhook sender read it back as the parent of their spans.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, ContextManager, Iterator, Mapping

TRACER = "mediapipe"
_OFF: ContextManager[None] = contextlib.nullcontext()
_tracer: Any = None        # the SDK's tracer once `setup` turned tracing on in this process
_propagator: Any = None    # the W3C trace context propagator, likewise
_instrumented: set[str] = set()


def on() -> bool:
    """Whether this process traces (setup ran with tracing on)."""
    return _tracer is not None


def setup(tracing: bool, service: str) -> bool:
    """Turn tracing on in this process, as `service` (OTEL_SERVICE_NAME wins when set): the SDK's tracer provider
    with a batch span processor exporting OTLP over HTTP, and the requests instrumentation (a provider's HTTP call is
    a client span). Once per process; nothing is imported when `tracing` is False."""
    global _tracer, _propagator
    if not tracing or _tracer is not None:
        return _tracer is not None
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.requests import RequestsInstrumentor
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    if "requests" not in _instrumented:
        RequestsInstrumentor().instrument(tracer_provider=provider)
        _instrumented.add("requests")
    _propagator = TraceContextTextMapPropagator()
    _tracer = provider.get_tracer(TRACER)
    return True


def instrument_flask(app: Any) -> None:
    """Flask's instrumentation on `app` (a server span per request), when this process traces."""
    if _tracer is not None:
        from opentelemetry.instrumentation.flask import FlaskInstrumentor
        FlaskInstrumentor().instrument_app(app, tracer_provider=_tracer_provider())


def _tracer_provider() -> Any:
    from opentelemetry import trace
    return trace.get_tracer_provider()


def shutdown() -> None:
    """Export what this process still holds and stop its export thread: for a process that ends by a path that skips
    `atexit`, where the SDK's own shutdown runs (RQ's pool children end with `os._exit`)."""
    if _tracer is not None:
        _tracer_provider().shutdown()


def now_ns() -> int | None:
    """The time a span that is started later began (None when off: nothing is read)."""
    return time.time_ns() if _tracer is not None else None


def _parent(traceparent: str | None) -> Any:
    return None if not traceparent else _propagator.extract({"traceparent": traceparent})


def span(name: str, *, parent: str | None = None, start_ns: int | None = None, client: bool = False,
         attributes: Mapping[str, Any] | None = None) -> ContextManager[Any]:
    """A span around the block, current inside it: a child of `parent` (a W3C traceparent read from PostgreSQL)
    when given, else of the current span; `client` marks a call to another service. Off: a shared no-op."""
    if _tracer is None:
        return _OFF
    return _span(name, parent, start_ns, client, attributes)


@contextlib.contextmanager
def _span(name: str, parent: str | None, start_ns: int | None, client: bool,
          attributes: Mapping[str, Any] | None) -> Iterator[Any]:
    from opentelemetry.trace import SpanKind
    kind = SpanKind.CLIENT if client else SpanKind.INTERNAL
    with _tracer.start_as_current_span(name, context=_parent(parent), kind=kind, start_time=start_ns,
                                       attributes=_clean(attributes)) as current:
        yield current


def finished(name: str, start_ns: int | None, end_ns: int | None = None, *,
             attributes: Mapping[str, Any] | None = None) -> None:
    """A span from `start_ns` to `end_ns` (default: now), a child of the current span, recorded after the fact (a
    claim, whose answer carried the trace it belongs to)."""
    if _tracer is not None and start_ns is not None:
        _tracer.start_span(name, start_time=start_ns, attributes=_clean(attributes)).end(end_time=end_ns)


def traceparent() -> str | None:
    """The current span as a W3C traceparent, to write beside the work it caused; None when off or outside a
    span."""
    if _tracer is None:
        return None
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier.get("traceparent")


def _clean(attributes: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Attributes the SDK takes: None values left out; anything but a str, bool, int, float or a list of them as text."""
    if not attributes:
        return None
    return {k: v if isinstance(v, (str, bool, int, float)) or (isinstance(v, list) and all(
                isinstance(x, (str, bool, int, float)) for x in v)) else str(v)
            for k, v in attributes.items() if v is not None}
