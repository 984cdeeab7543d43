"""An OTLP receiver for the tests and bench/: a real HTTP server on 127.0.0.1 that takes what the OpenTelemetry SDK's
OTLP/HTTP exporter sends (protobuf POSTs on /v1/traces), decodes it with the opentelemetry-proto package's own
classes, as a collector would, and keeps every span it got.
"""

from __future__ import annotations

import gzip
import threading
import zlib
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (ExportTraceServiceRequest,
                                                                      ExportTraceServiceResponse)

TRACES_PATH = "/v1/traces"


@dataclass(frozen=True)
class Span:
    trace_id: str        # 32 hex digits
    span_id: str         # 16 hex digits
    parent_id: str       # 16 hex digits, "" for a root span
    name: str
    service: str         # the resource's service.name: which process sent it
    kind: int            # opentelemetry.proto.trace.v1.Span.SpanKind
    attributes: dict


def _value(any_value) -> object:
    which = any_value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, which) if which else None


def decode(body: bytes) -> list[Span]:
    """The spans of one OTLP/HTTP protobuf export request."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for s in scope_spans.spans:
                spans.append(Span(s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(), s.name,
                                  str(resource.get("service.name")), s.kind,
                                  {a.key: _value(a.value) for a in s.attributes}))
    return spans


class Receiver:
    """Start it, point OTEL_EXPORTER_OTLP_ENDPOINT at `url`, read `spans()`."""

    def __init__(self) -> None:
        self._spans: list[Span] = []
        self._lock = threading.Lock()
        self.requests = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:   # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                encoding = self.headers.get("Content-Encoding", "")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                if self.path != TRACES_PATH:
                    self.send_response(404)
                    self.end_headers()
                    return
                spans = decode(body)
                with receiver._lock:
                    receiver._spans.extend(spans)
                    receiver.requests += 1
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True

    @property
    def url(self) -> str:
        """The endpoint, as OTEL_EXPORTER_OTLP_ENDPOINT takes it (the exporter appends /v1/traces)."""
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> "Receiver":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def spans(self, trace_id: str | None = None) -> list[Span]:
        with self._lock:
            return [s for s in self._spans if trace_id is None or s.trace_id == trace_id]
