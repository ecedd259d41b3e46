"""Traces of one message's way through the daemon (DESIGN §18): the one seam the stages open their
spans through, a no-op when telemetry is off.

Off (no `telemetry.otlp_endpoint`, no OTEL_EXPORTER_OTLP_ENDPOINT) every call here tests one
module global and returns a shared do-nothing span: no OpenTelemetry module is imported (the SDK
and the exporter only come with `start`, from gateway.telemetry.otlp). Measured: a message's calls
cost 4 µs off, against 2.2–2.5 ms of main-thread CPU per message in bench/gateway.py, where off and
today's main are within the run-to-run noise; on adds ~0.55 ms per message (the SDK's spans and
instruments; OTEL_TRACES_SAMPLER samples them down). On, the spans follow a message:

    chinwag.inbound                  root: platform, chat type, whether it was a duplicate
      chinwag.queue                  the wait in the chat's lane (zero-length when there was none)
      chinwag.turn                   session, command or agent turn, outcome
        chat {model}                 GenAI: tokens, finish reasons, time to first token
        execute_tool {name}          GenAI; the MCP server when there is one
          chinwag.recall             candidates, sessions returned
        chinwag.send                 parts, retries, rate-limit waits

The inbound span's context travels with the message (`InboundMessage.trace`) and is stored with its
inbox entry as a W3C traceparent, so what a later process does for that entry is tied to it: a turn
taken up again continues the trace; a reply the outbox sends after a restart goes under a new root,
`chinwag.redelivery`, linked to the original one. A message its lane never runs (a redelivery the
inbox refused) leaves its queue span unended, so not exported: that trace is its inbound span alone. Attributes hold ids, names, counts and outcomes:
never message text, a prompt or an error's message (an exception is recorded by its type only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ContextManager, Mapping

from gateway.telemetry.spans import Attrs, MessageTrace, Registry, Span, Value

if TYPE_CHECKING:
    from gateway.telemetry.otlp import Exporting

__all__ = ["Attrs", "MessageTrace", "Registry", "Span", "Value"]

NOOP = Span()
_on: "Exporting | None" = None


def endpoint(configured: str, env: Mapping[str, str]) -> str:
    """The OTLP/HTTP base URL: `telemetry.otlp_endpoint`, else OTEL_EXPORTER_OTLP_ENDPOINT; '' is off."""
    return (configured or env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")).strip()


def start(base_url: str, metrics: Registry | None = None) -> None:
    """Export spans (and `metrics`) to `base_url` + /v1/traces (/v1/metrics), OTLP/HTTP protobuf."""
    global _on
    from gateway.telemetry.otlp import Exporting  # the SDK: imported only when telemetry is on

    stop()
    _on = Exporting(base_url, metrics)


def stop() -> None:
    """Flush what is pending (spans, a last metrics export) and turn telemetry off."""
    global _on
    exporting, _on = _on, None
    if exporting is not None:
        exporting.shutdown()


def span(name: str, attrs: Attrs | None = None) -> ContextManager[Span]:
    """A span, current inside the block, a child of the current span."""
    if _on is None:
        return NOOP
    return _on.span(name, attrs)


def inbound(platform: str, chat_type: str) -> ContextManager[Span]:
    """The root of one inbound message's trace (`message_trace` inside it gives its handle)."""
    if _on is None:
        return NOOP
    return _on.span("chinwag.inbound", {"messaging.system": platform, "chinwag.chat_type": chat_type}, root=True)


def message_trace() -> MessageTrace | None:
    """The current span as a message's trace (inside `inbound`); None when off."""
    return _on.message_trace() if _on is not None else None


def resumed(traceparent: str | None) -> MessageTrace | None:
    """A message's trace as its inbox entry stored it, for a process taking the entry up again."""
    return _on.resumed(traceparent) if _on is not None and traceparent else None


def queued(trace: MessageTrace | None) -> None:
    """The message joined its chat's lane: its `chinwag.queue` span starts."""
    if _on is not None and trace is not None and trace.queue is None:
        trace.queue = _on.start_queue(trace.context)


def turn(trace: MessageTrace | None, attrs: Attrs) -> ContextManager[Span]:
    """The message's job starts: its queue span ends (made zero-length if it never started) and the
    `chinwag.turn` span, a sibling under the inbound root, is current inside the block. A message
    with no trace (a scheduled run's) starts one: whatever the lane's task holds is not its parent."""
    if _on is None:
        return NOOP
    if trace is None:
        return _on.span("chinwag.turn", attrs, root=True)
    queued(trace)
    _on.end_queue(trace)
    return _on.span("chinwag.turn", attrs, trace.context)


def model_call(model: str) -> ContextManager[Span]:
    """One call of the chat model (GenAI semantic conventions; `Span.first_token` marks the first piece)."""
    if _on is None:
        return NOOP
    return _on.model_span(model)


def tool_call(name: str, call_id: str) -> ContextManager[Span]:
    if _on is None:
        return NOOP
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id}
    return _on.span(f"execute_tool {name}", attrs)


def send(platform: str, retries: int = 0) -> ContextManager[Span]:
    """One send of a reply or a notice to its platform (`chinwag.parts` is set by the caller)."""
    if _on is None:
        return NOOP
    attrs: Attrs = {"messaging.system": platform, "chinwag.retries": retries, "chinwag.rate_limit_waits": 0}
    return _on.span("chinwag.send", attrs)


def redelivery(traceparent: str | None, platform: str) -> ContextManager[Span]:
    """A new root for a reply a previous process committed and did not send, linked to its trace."""
    if _on is None:
        return NOOP
    return _on.span("chinwag.redelivery", {"messaging.system": platform}, root=True, link=traceparent)


def annotate(key: str, value: Value) -> None:
    """Set an attribute on the current span (a stage that holds no span of its own)."""
    if _on is not None:
        _on.annotate(key, value)


def rate_limited(seconds: float) -> None:
    """The platform made the current send wait (a 429): counted on the current span."""
    if _on is not None:
        _on.add("chinwag.rate_limit_waits", 1)
        _on.add("chinwag.rate_limit_wait_ms", round(seconds * 1000))


def log_ids() -> tuple[str, str] | None:
    """The current trace and span ids, hex, for a log line; None when off or outside a span."""
    return _on.log_ids() if _on is not None else None
