"""A fake OpenTelemetry collector on 127.0.0.1: OTLP/HTTP with protobuf bodies, as Jaeger, Tempo or
the OpenTelemetry Collector take them, decoded with the official `opentelemetry-proto` messages.

    async with FakeCollector() as collector:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector.url     # /v1/traces, /v1/metrics appended
        ...
        collector.spans            # every span received, decoded (`Span`)
        collector.metric_names     # every metric name received
        collector.bodies           # every request body as it arrived (gunzipped): what left the daemon

Every received byte is kept, so a test can say what was never exported (a message's text, a secret).
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.fakes.loopback import Served, serve


@dataclass
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root
    attributes: dict[str, Any]
    links: list[str]  # the trace ids linked to
    start_ns: int
    end_ns: int
    service: str
    status: int  # 0 unset, 1 ok, 2 error

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


@dataclass
class FakeCollector:
    spans: list[Span] = field(default_factory=list)
    metric_names: list[str] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    _served: Served | None = None

    @property
    def url(self) -> str:
        assert self._served is not None
        return self._served.url

    async def __aenter__(self) -> "FakeCollector":
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        app.router.add_post("/v1/metrics", self._metrics)
        self._served = await serve(app)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._served is not None:
            await self._served.close()

    async def _body(self, request: web.Request) -> bytes:
        assert request.content_type == "application/x-protobuf", request.content_type
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        self.bodies.append(body)
        return body

    async def _traces(self, request: web.Request) -> web.Response:
        message = ExportTraceServiceRequest.FromString(await self._body(request))
        for resource_spans in message.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    self.spans.append(
                        Span(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            links=[link.trace_id.hex() for link in span.links],
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            service=str(resource.get("service.name")),
                            status=span.status.code,
                        )
                    )
        return web.Response(body=b"", content_type="application/x-protobuf")

    async def _metrics(self, request: web.Request) -> web.Response:
        message = ExportMetricsServiceRequest.FromString(await self._body(request))
        for resource_metrics in message.resource_metrics:
            for scope in resource_metrics.scope_metrics:
                self.metric_names.extend(metric.name for metric in scope.metrics)
        return web.Response(body=b"", content_type="application/x-protobuf")

    def named(self, name: str) -> list[Span]:
        return [s for s in self.spans if s.name == name]

    def trace(self, trace_id: str) -> list[Span]:
        return [s for s in self.spans if s.trace_id == trace_id]
