"""An outage longer than a lease, with the lease made short: the subscription's ack
deadline and the lease extension both 10 s, Valkey down for 25 s. The summary
worker (two handler slots and eight messages leased, so most of them wait in the
dispatcher's queue or behind their ordering key) holds what it leased: nothing
comes back (every delivery is attempt 1), nothing is handled twice, and all is
applied once, in order."""

from __future__ import annotations

from dataclasses import replace

from shared.bootstrap import make_valkey
from shared.bus.admin import TopologyAdmin
from shared.bus.dlq import DeadLetterQueues
from shared.bus.worker import PREFETCH_FACTOR, SubscriberRuntime
from shared.events import TurnRecorded
from shared.session_buffer import SessionBuffer, SessionKey
from tests.bus_helpers import attempts_spent, make_turn, summary_handler, watched_valkey
from tests.integration.test_outages import Attempts, own_valkey  # noqa: F401
from tests.support import stays, wait_for

SHORT = 10  # seconds: the shortest ack deadline and lease extension the settings take
OUTAGE_SECONDS = 25.0


def test_an_outage_longer_than_a_lease_redelivers_nothing(
    settings,
    publisher,
    ids,
    own_valkey,  # noqa: F811 - the fixture imported above
):
    settings = settings.model_copy(
        update={
            "ack_deadline_seconds": SHORT,
            "lease_extension_seconds": SHORT,
            "valkey_url": own_valkey.url,
        }
    )
    TopologyAdmin(settings).apply()
    client = make_valkey(settings)
    buffer = SessionBuffer(client, 3600)
    attempts = Attempts()
    real = summary_handler(settings, buffer)
    table = {TurnRecorded: replace(real, first=attempts.batch(real.first))}
    dependencies = watched_valkey(client)
    sessions = [dict(ids, session_id=f"{ids['session_id']}-{k}") for k in range(3)]

    def applied(session: dict[str, str]) -> list[str]:
        view = buffer.read(SessionKey(session["app"], session["user_id"], session["session_id"]))
        folded = [turn for version in sorted(view.folds) for turn in view.folds[version]]
        return folded + [t.turn_id for t in view.turns]

    spent = attempts_spent("turns-summary")
    own_valkey.process.kill()
    for n in range(1, 9):
        for session in sessions:
            publisher.publish(make_turn(session, n)).result(timeout=10)
    runtime = SubscriberRuntime(
        settings, "turns-summary", table, publisher, concurrency=2, dependencies=dependencies
    )
    leased = 2 * PREFETCH_FACTOR
    runtime.start()
    try:
        wait_for(lambda: "valkey" in dependencies.down(), 30, "the worker to see Valkey down")
        wait_for(lambda: runtime.in_flight() == leased, 30, "a pull's worth leased and held")
        # Well past the ack deadline and two lease extensions: nothing comes back.
        stays(lambda: runtime.in_flight() == leased, OUTAGE_SECONDS, "what it leased held")
        own_valkey.start()
        expected = [f"turn-{n:04d}" for n in range(1, 9)]
        for session in sessions:
            wait_for(lambda s=session: applied(s) == expected, 60, "each session, once, in order")
        wait_for(lambda: runtime.in_flight() == 0, 30, "every message settled")
    finally:
        runtime.stop(timeout=10)
        dependencies.close()
        client.close()
    assert set(attempts.seen) == {1}
    assert attempts_spent("turns-summary") == spent
    assert DeadLetterQueues(settings).peek("turns-summary") == []
