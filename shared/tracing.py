"""OpenTelemetry tracing, optional (`pip install 'agent-memory[tracing]'`).

One trace follows a turn through the pipeline: the API continues the
caller's trace (a W3C `traceparent` request header) in a server span per
request; the events it publishes carry that context in their message attributes
(`traceparent`, `tracestate`); the worker that handles an event continues it in
a consumer span per message, which ends with the message's outcome.

`AM_TRACING` chooses the exporter: `off` (the default: no spans are made and
nothing is imported), `otlp` (OTLP over HTTP; the standard `OTEL_EXPORTER_OTLP_*`
variables say where, e.g. a collector that forwards to Cloud Trace) or
`console` (spans as JSON on stdout, for a look by hand). A process whose
tracer provider was set by someone else (a test, a host application) uses it
as it is, with `AM_TRACING` left `off`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import cache
from typing import Any

_TRACER = "agent_memory"


@cache
def _api() -> Any:
    """The opentelemetry API module, or None when it is not installed."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace


def configure(mode: str, service: str) -> None:
    """Install a tracer provider exporting to `mode` (see the module's notes)."""
    if mode == "off":
        return
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError as exc:
        raise RuntimeError(
            f"AM_TRACING={mode} needs the tracing extra: pip install 'agent-memory[tracing]'"
        ) from exc
    if mode == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter: Any = OTLPSpanExporter()
    else:
        exporter = ConsoleSpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)


_override: Any = None  # a provider set by `use_provider`, before the global one


def use_provider(provider: Any) -> None:
    """Trace with `provider` instead of the global one (None: back to the global);
    for tests and host applications that keep their own provider."""
    global _override
    _override = provider


def _tracer() -> Any:
    """A tracer when a real provider is installed; None otherwise (no spans)."""
    trace = _api()
    if trace is None:
        return None
    provider = _override or trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    global _cached
    cached_provider, tracer = _cached  # one tuple: read whole, whatever other threads do
    if cached_provider is not provider:  # one tracer per provider, not one per span
        tracer = provider.get_tracer(_TRACER)
        _cached = (provider, tracer)
    return tracer


_cached: tuple[Any, Any] = (None, None)  # the provider `_tracer` saw last, and its tracer


def with_trace_context(attributes: Mapping[str, str]) -> dict[str, str]:
    """`attributes` plus the current span's context, if there is one."""
    found = dict(attributes)
    trace = _api()
    if trace is not None and trace.get_current_span().get_span_context().is_valid:
        from opentelemetry import propagate

        propagate.inject(found)
    return found


@contextmanager
def server_span(scope: Mapping[str, Any]) -> Iterator[Any]:
    """A span for one API request (an ASGI scope), continuing the caller's trace if
    its headers carry one. Yields the span (None when tracing is off)."""
    tracer = _tracer()
    if tracer is None:
        yield None
        return
    from opentelemetry import propagate
    from opentelemetry.trace import SpanKind

    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", ())}
    with tracer.start_as_current_span(
        scope["method"], context=propagate.extract(headers), kind=SpanKind.SERVER
    ) as span:
        yield span


def start_consumer_span(subscription: str, attributes: Mapping[str, str]) -> Any:
    """A span for one message, a child of the context its attributes carry; the
    caller ends it (`end_span`). None when tracing is off."""
    tracer = _tracer()
    if tracer is None:
        return None
    from opentelemetry import propagate
    from opentelemetry.trace import SpanKind

    return tracer.start_span(
        f"{subscription} process",
        context=propagate.extract(attributes),
        kind=SpanKind.CONSUMER,
        attributes={
            "messaging.system": "gcp_pubsub",
            "messaging.destination.subscription.name": subscription,
            "messaging.message.id": attributes.get("event_id", ""),
            "agent_memory.event_type": attributes.get("event_type", ""),
        },
    )


@contextmanager
def current(span: Any) -> Iterator[None]:
    """Make `span` the current span (so what runs inside continues it)."""
    if span is None:
        yield
        return
    from opentelemetry import trace

    with trace.use_span(span, end_on_exit=False):
        yield


def end_span(span: Any, outcome: str, error: str = "") -> None:
    if span is None:
        return
    span.set_attribute("agent_memory.outcome", outcome)
    if error:
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR, error[:200]))
    span.end()
