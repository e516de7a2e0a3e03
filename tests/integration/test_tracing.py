"""One trace from the caller through the read API and Pub/Sub to the worker."""

import pytest
from fastapi.testclient import TestClient
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from services.api.app import create_app
from shared import tracing
from shared.events import TurnRecorded
from shared.session_buffer import SessionBuffer
from tests.bus_helpers import Recorder, running, summary_handler
from tests.support import wait_for

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
CALLER_SPAN = 0x00F067AA0BA902B7


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_provider(provider)
    yield exporter
    tracing.use_provider(None)
    provider.shutdown()


def _record_a_turn(settings, publisher, valkey_client, ids, wait_for_span=None):
    """One turn through the API (called with the caller's trace context), handled by
    the summary worker's runtime. Returns the API's answer and the recorder."""
    recorder = Recorder()
    buffer = SessionBuffer(valkey_client, settings.session_ttl_seconds)
    table = {TurnRecorded: recorder.wrap(summary_handler(settings, buffer))}
    body = {"user_id": ids["user_id"], "turn_id": "t-1", "user": "hello", "assistant": "hi"}
    caller = {"traceparent": f"00-{TRACE_ID:032x}-{CALLER_SPAN:016x}-01"}
    with (
        TestClient(create_app(settings), raise_server_exceptions=False) as client,
        running(settings, "turns-summary", table, publisher),
    ):
        posted = client.post(f"/v1/sessions/{ids['session_id']}/turns", json=body, headers=caller)
        assert posted.status_code == 202, posted.text
        wait_for(lambda: recorder.outcomes("t-1") == ["duplicate"], 30, "the worker's delivery")
        if wait_for_span is not None:
            # The consumer span ends right after the handler, with the message's settling.
            wait_for(wait_for_span, 10, "the worker's span")
    return posted, recorder


def test_the_worker_continues_the_trace_the_caller_started_at_the_api(
    spans, settings, topology, publisher, valkey_client, ids
):
    posted, recorder = _record_a_turn(
        settings,
        publisher,
        valkey_client,
        ids,
        wait_for_span=lambda: any(s.kind == SpanKind.CONSUMER for s in spans.get_finished_spans()),
    )

    finished = spans.get_finished_spans()
    (server,) = [s for s in finished if s.kind == SpanKind.SERVER]
    (consumer,) = [s for s in finished if s.kind == SpanKind.CONSUMER]
    assert server.name == "POST /v1/sessions/{session_id}/turns"
    assert server.context.trace_id == TRACE_ID
    assert server.parent.span_id == CALLER_SPAN
    assert server.attributes["http.response.status_code"] == 202
    assert consumer.name == "turns-summary process"
    assert consumer.context.trace_id == TRACE_ID
    assert consumer.parent.span_id == server.context.span_id
    assert consumer.attributes["agent_memory.outcome"] == "duplicate"
    assert consumer.attributes["messaging.message.id"] == posted.json()["event_id"]
    # The message carried the context as attributes; nothing else was added but the
    # figures' mark of a publisher that reports (shared.bus.attributes.COUNTED).
    (delivery,) = recorder.deliveries
    assert delivery.attributes["traceparent"].split("-")[1] == f"{TRACE_ID:032x}"
    assert {k for k in delivery.attributes if not k.startswith("goog")} == {
        "event_id",
        "event_type",
        "schema_version",
        "app",
        "traceparent",
        "figures_counted",
    }


def test_without_a_provider_no_span_is_made_and_no_context_is_added(
    settings, topology, publisher, valkey_client, ids
):
    _posted, recorder = _record_a_turn(settings, publisher, valkey_client, ids)

    (delivery,) = recorder.deliveries
    assert "traceparent" not in delivery.attributes
