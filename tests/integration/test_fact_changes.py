"""A changed fact through the real API and the extraction handler, with the
offline providers (`offline` LLM, `hash` embeddings) on the real Postgres: the
newer statement updates the memory (one live memory, with a revision), and an
unrelated fact is kept beside it."""

from datetime import UTC, datetime, timedelta

from tests.bus_helpers import make_turn

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _write(client, user_id: str, text: str) -> dict:
    body = {"user_id": user_id, "text": text, "scope": "global", "kind": "fact"}
    response = client.post("/v1/memories", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def _live_texts(client, user_id: str) -> list[str]:
    response = client.get("/v1/memories", params={"user_id": user_id})
    assert response.status_code == 200, response.text
    return sorted(m["text"] for m in response.json()["memories"])


def test_a_changed_fact_leaves_one_live_memory_with_the_new_text_and_a_revision(client, ids):
    user = ids["user_id"]
    first = _write(client, user, "The Heron build uses gcc 12.")
    assert first["action"] == "CREATED"
    memory_id = first["memory"]["id"]
    second = _write(client, user, "The Heron build now uses gcc 14.")
    assert second["action"] == "UPDATED" and second["memory"]["id"] == memory_id
    detail = client.get(f"/v1/memories/{memory_id}", params={"user_id": user}).json()
    assert detail["text"] == "The Heron build now uses gcc 14."
    assert detail["deleted_at"] is None
    assert [
        (r["revision"], r["action"], r["old_text"], r["new_text"]) for r in detail["revisions"]
    ] == [
        (1, "CREATED", None, "The Heron build uses gcc 12."),
        (2, "UPDATED", "The Heron build uses gcc 12.", "The Heron build now uses gcc 14."),
    ]
    assert _live_texts(client, user) == ["The Heron build now uses gcc 14."]
    # The same fact again is a duplicate; another build's is a memory of its own.
    assert _write(client, user, "The Heron build uses gcc 14.")["action"] == "NONE"
    assert _write(client, user, "The Osprey build uses gcc 12.")["action"] == "CREATED"
    assert _live_texts(client, user) == [
        "The Heron build now uses gcc 14.",
        "The Osprey build uses gcc 12.",
    ]


def test_each_change_of_the_issue_updates_its_own_memory(client, ids):
    user = ids["user_id"]
    olds = ["Alice lives in Paris.", "The deadline is Friday.", "The team uses Jenkins."]
    written = {text: _write(client, user, text)["memory"]["id"] for text in olds}
    news = {
        "Alice lives in Paris.": "Alice moved to Berlin.",
        "The deadline is Friday.": "The deadline moved to Monday.",
        "The team uses Jenkins.": "The team switched to GitHub Actions.",
    }
    for old, new in news.items():
        applied = _write(client, user, new)
        assert (applied["action"], applied["memory"]["id"]) == ("UPDATED", written[old])
    assert _live_texts(client, user) == sorted(news.values())


def test_a_changed_fact_said_in_two_turns_is_updated_by_extraction(extraction, client, ids):
    def turn(n: int, text: str):
        created_at = T0 + timedelta(hours=n)
        return make_turn(ids, n, user=text, assistant="Noted.", created_at=created_at)

    assert extraction.handle_turn(turn(1, "Remember that the deadline is Friday."), None) == (
        "applied"
    )
    assert extraction.handle_turn(turn(2, "Remember that the deadline moved to Monday."), None) == (
        "applied"
    )
    (memory,) = client.get("/v1/memories", params={"user_id": ids["user_id"]}).json()["memories"]
    assert memory["text"] == "The deadline moved to Monday."
    detail = client.get(f"/v1/memories/{memory['id']}", params={"user_id": ids["user_id"]}).json()
    assert [(r["action"], r["new_text"]) for r in detail["revisions"]] == [
        ("CREATED", "The deadline is Friday."),
        ("UPDATED", "The deadline moved to Monday."),
    ]
