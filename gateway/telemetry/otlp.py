"""Telemetry on: the OpenTelemetry SDK's tracer and meter, exporting over OTLP/HTTP (protobuf).
Imported by gateway.telemetry.start only, so a daemon with telemetry off never loads the SDK.

Spans go through a batch processor (one export per 512 spans or 5 s, OTEL_BSP_* tune it), so a
message costs the event loop a few span objects and never a network call. Exceptions are recorded
by type only: the SDK's own recording would export the message, and an error's message may quote
what a person wrote. The tracer and meter providers are this module's own, never the global ones a
library (the MCP SDK speaks the OpenTelemetry API) would then export through.

Metrics: the Prometheus registry (gateway.service.metrics) mirrors every count and observation here,
and its gauges are read at each export; the names are the Prometheus ones without `_total`, which
OTLP's counters do not carry. The periodic reader exports every 60 s (OTEL_METRIC_EXPORT_INTERVAL),
and `shutdown` exports once more: a graceful stop loses nothing counted.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Any, Iterator, Mapping

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.telemetry.spans import Attrs, MessageTrace, Registry, Span, Value

_PROPAGATOR = TraceContextTextMapPropagator()
_ENDED = object()  # a message's queue span once its turn started


class _Live(Span):
    def __init__(self, span: trace.Span) -> None:
        self.span = span

    def set(self, key: str, value: Value) -> None:
        self.span.set_attribute(key, value)


class _ModelCall(_Live):
    def __init__(self, span: trace.Span) -> None:
        super().__init__(span)
        self.started = time.monotonic()
        self.first: float | None = None

    def first_token(self) -> None:
        if self.first is None:
            self.first = time.monotonic()
            self.span.set_attribute("chinwag.time_to_first_token_ms", round((self.first - self.started) * 1000, 1))


class Exporting:
    def __init__(self, base_url: str, metrics: Registry | None) -> None:
        base = base_url.rstrip("/")
        name = os.environ.get("OTEL_SERVICE_NAME") or "chinwag"
        resource = Resource.create({"service.name": name})
        self.tracer_provider = TracerProvider(resource=resource)
        self.tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=base + "/v1/traces")))
        self.tracer = self.tracer_provider.get_tracer("chinwag")
        self.meter_provider: MeterProvider | None = None
        self.metrics = metrics
        if metrics is not None:
            reader = PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=base + "/v1/metrics"))
            self.meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
            metrics.mirror = MetricsMirror(self.meter_provider.get_meter("chinwag"), metrics)

    def shutdown(self) -> None:
        if self.metrics is not None:
            self.metrics.mirror = None
        if self.meter_provider is not None:
            self.meter_provider.shutdown()  # one last export
        self.tracer_provider.shutdown()  # the batch's spans go out

    # -- spans ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def span(
        self,
        name: str,
        attrs: Attrs | None,
        parent: otel_context.Context | None = None,
        *,
        root: bool = False,
        link: str | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        live: type[_Live] = _Live,
    ) -> Iterator[Span]:
        if root:
            parent = otel_context.Context()  # whatever is current, this starts a trace
        links = []
        if link:
            linked = trace.get_current_span(_PROPAGATOR.extract({"traceparent": link})).get_span_context()
            if linked.is_valid:
                links.append(Link(linked))
        span = self.tracer.start_span(
            name,
            context=parent,
            kind=kind,
            attributes=attrs,
            links=links,
            record_exception=False,
            set_status_on_exception=False,
        )
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            yield live(span)
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__name__)
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise
        finally:
            otel_context.detach(token)
            span.end()

    def model_span(self, model: str) -> contextlib.AbstractContextManager[Span]:
        attrs = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": model}
        return self.span(f"chat {model}", attrs, kind=SpanKind.CLIENT, live=_ModelCall)

    def message_trace(self) -> MessageTrace | None:
        current = otel_context.get_current()
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, current)
        traceparent = carrier.get("traceparent")
        return MessageTrace(current, traceparent) if traceparent else None

    def resumed(self, traceparent: str) -> MessageTrace | None:
        found = _PROPAGATOR.extract({"traceparent": traceparent})
        if not trace.get_current_span(found).get_span_context().is_valid:
            return None
        return MessageTrace(found, traceparent)

    def start_queue(self, parent: otel_context.Context) -> trace.Span:
        return self.tracer.start_span("chinwag.queue", context=parent)

    def end_queue(self, trace_: MessageTrace) -> None:
        if trace_.queue is not _ENDED:
            trace_.queue.end()
            trace_.queue = _ENDED

    def annotate(self, key: str, value: Value) -> None:
        trace.get_current_span().set_attribute(key, value)

    def add(self, key: str, by: int) -> None:
        span = trace.get_current_span()
        attributes: Mapping[str, Any] = getattr(span, "attributes", None) or {}
        span.set_attribute(key, int(attributes.get(key, 0)) + by)

    def log_ids(self) -> tuple[str, str] | None:
        context = trace.get_current_span().get_span_context()
        if not context.is_valid:
            return None
        return format(context.trace_id, "032x"), format(context.span_id, "016x")


class MetricsMirror:
    """The Prometheus registry's counts, observations and gauges as OTLP instruments."""

    def __init__(self, meter: Any, metrics: Registry) -> None:
        self.meter, self.metrics = meter, metrics
        self.instruments: dict[str, Any] = {}
        self.lock = threading.Lock()  # (the writer thread records too: an instrument is made once)
        for name in metrics.names("gauge"):
            self.gauge(name)

    def inc(self, name: str, labels: Mapping[str, str] | None, by: float) -> None:
        self._instrument(name, "counter").add(by, dict(labels or {}))

    def observe(self, name: str, value: float, labels: Mapping[str, str] | None) -> None:
        self._instrument(name, "histogram").record(value, dict(labels or {}))

    def gauge(self, name: str) -> None:
        self._instrument(name, "gauge")

    def _instrument(self, name: str, kind: str) -> Any:
        made = self.instruments.get(name)
        if made is not None:
            return made
        with self.lock:
            if name not in self.instruments:
                self.instruments[name] = self._make(name, kind)
            return self.instruments[name]

    def _make(self, name: str, kind: str) -> Any:
        full, description = self.metrics.prefix + name.removesuffix("_total"), self.metrics.describe(name)
        if kind == "counter":
            return self.meter.create_counter(full, description=description)
        if kind == "histogram":
            return self.meter.create_histogram(
                full, unit="s", description=description, explicit_bucket_boundaries_advisory=self.metrics.buckets
            )

        def read(options: CallbackOptions) -> list[Observation]:
            value = self.metrics.gauge(name)
            if value is None:
                return []
            if isinstance(value, dict):
                return [Observation(v, {"platform": k}) for k, v in value.items()]
            return [Observation(value)]

        return self.meter.create_observable_gauge(full, callbacks=[read], description=description)
