from services.extraction_worker.handlers import TURNS_SUBSCRIPTION
from shared.embeddings import make_embedder
from shared.events import TurnRecorded
from shared.llm import OfflineLLM
from shared.session_buffer import SessionBuffer, SessionKey
from tests.bus_helpers import (
    Recorder,
    inline_extraction,
    make_turn,
    running,
    summary_handler,
)
from tests.conftest import both_pull_modes
from tests.support import wait_for


@both_pull_modes
def test_the_same_event_published_three_times_is_applied_once(
    settings, topology, publisher, valkey_client, pool, ids
):
    buffer = SessionBuffer(valkey_client, 3600)
    summary, extraction = Recorder(), Recorder()
    turn = make_turn(ids, 1)
    for _ in range(3):
        publisher.publish(turn).result(timeout=10)
    summary_table = {TurnRecorded: summary.wrap(summary_handler(settings, buffer))}
    extraction_table = {
        TurnRecorded: extraction.wrap(
            inline_extraction(pool, OfflineLLM(), make_embedder(settings), settings).handle_turn
        )
    }
    with (
        running(settings, "turns-summary", summary_table, publisher),
        running(settings, "turns-extraction", extraction_table, publisher),
    ):
        wait_for(lambda: summary.count() == 3 and extraction.count() == 3, 30, "3 deliveries each")

    assert sorted(summary.outcomes("turn-0001")) == ["applied", "duplicate", "duplicate"]
    assert sorted(extraction.outcomes("turn-0001")) == ["applied", "duplicate", "duplicate"]
    view = buffer.read(SessionKey(ids["app"], ids["user_id"], ids["session_id"]))
    assert [t.turn_id for t in view.turns] == ["turn-0001"]
    assert view.turns_total == 1
    with pool.connection() as conn:
        episodes = conn.execute(
            "SELECT count(*) FROM episodes WHERE app = %s AND user_id = %s",
            (ids["app"], ids["user_id"]),
        ).fetchone()[0]
        ledger = conn.execute(
            "SELECT count(*) FROM processed_events WHERE consumer = %s AND event_id = %s",
            (TURNS_SUBSCRIPTION, turn.event_id),
        ).fetchone()[0]
    assert (episodes, ledger) == (1, 1)


def test_a_turn_sent_again_under_a_new_event_id_is_still_one_turn(valkey_client, pool, ids):
    # An agent that publishes directly may re-send a turn with a fresh event_id.
    buffer = SessionBuffer(valkey_client, 3600)
    first, again = make_turn(ids, 7), make_turn(ids, 7)
    assert first.event_id != again.event_id
    key = SessionKey(ids["app"], ids["user_id"], ids["session_id"])
    assert buffer.append(key, _buffered(first)).added is True
    assert buffer.append(key, _buffered(again)).added is False
    assert len(buffer.read(key).turns) == 1


def _buffered(turn):
    from shared.session_buffer import BufferedTurn

    return BufferedTurn.from_event(turn)
