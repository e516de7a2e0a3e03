"""Entities, resolution and facts over time through the real API and the extraction
handler, with the offline providers (`offline` LLM, `hash` embeddings) on the
real Postgres: what a memory or a turn names becomes one entity per thing, a
changed fact closes the old one at the new one's time, a late one never closes a
newer, and the reads (`/v1/entities`, `as_of`) show it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.embeddings import make_embedder
from shared.llm import OfflineLLM
from tests.bus_helpers import extraction_worker, make_turn
from tests.support import wait_for
from tests.window_helpers import live_texts

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _write(client, user_id: str, text: str, project_id: str | None = None) -> dict:
    body = {"user_id": user_id, "text": text, "scope": "global", "kind": "fact"}
    if project_id:
        body |= {"scope": "project", "project_id": project_id}
    response = client.post("/v1/memories", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def _entities(client, user_id: str, **params: str) -> dict[str, dict]:
    response = client.get("/v1/entities", params={"user_id": user_id, **params})
    assert response.status_code == 200, response.text
    return {e["name"]: e for e in response.json()["entities"]}


def _detail(client, user_id: str, entity_id: str, **params: str) -> dict:
    response = client.get(f"/v1/entities/{entity_id}", params={"user_id": user_id, **params})
    assert response.status_code == 200, response.text
    return response.json()


def _say(extraction, ids, n: int, hours: int, text: str) -> None:
    turn = make_turn(ids, n, user=text, assistant="Noted.", created_at=T0 + timedelta(hours=hours))
    assert extraction.handle_turn(turn, None) == "applied"


def test_a_written_memory_names_its_entities_and_one_name_stays_one_entity(client, ids):
    user = ids["user_id"]
    first = _write(client, user, "Dana Lee works at Acme Corp.")["memory"]["id"]
    _write(client, user, "Bob Smith is a vegetarian.")
    # Case, a first name, a nickname and a typo of a known name: the same entities.
    _write(client, user, "DANA LEE prefers tea.")
    _write(client, user, "Dana plays the cello.")
    _write(client, user, "Robert Smith runs marathons.")
    _write(client, user, "Acme Corp is hiring.")
    found = _entities(client, user)
    assert {name: (e["kind"], e["memories"]) for name, e in found.items()} == {
        "Dana Lee": ("person", 3),
        "Acme Corp": ("organisation", 2),
        "Bob Smith": ("person", 2),
    }
    # Aliases are told apart by their normalised form: "DANA LEE" is "Dana Lee".
    assert found["Dana Lee"]["aliases"] == ["Dana", "Dana Lee"]
    assert found["Bob Smith"]["aliases"] == ["Bob Smith", "Robert Smith"]
    dana = _detail(client, user, found["Dana Lee"]["id"])
    assert {(a["alias"], a["how"]) for a in dana["alias_sources"]} == {
        ("Dana", "first name"),
        ("Dana Lee", "name"),
    }
    assert [(f["subject"], f["predicate"], f["object"], f["value"]) for f in dana["facts"]] == [
        ("Dana Lee", "employer", "Acme Corp", "acme corp"),
        ("Dana Lee", "prefer", None, "tea"),
    ]
    assert dana["facts"][0]["memory_id"] == first and dana["facts"][0]["valid_to"] is None
    assert len(dana["memories_mentioning"]) == 3
    # Another person of the same first name with another surname is another entity.
    _write(client, user, "Dana Smith lives in Oslo.")
    assert sorted(_entities(client, user)) == [
        "Acme Corp",
        "Bob Smith",
        "Dana Lee",
        "Dana Smith",
        "Oslo",
    ]


def test_entities_never_cross_users_projects_or_apps(client, ids, app_settings):
    user = ids["user_id"]
    _write(client, user, "Priya Patel leads the Heron project.", project_id="heron")
    _write(client, f"{user}-other", "Priya Patel is my dentist.")
    mine = _entities(client, user, project_id="heron")
    assert sorted(mine) == ["Heron", "Priya Patel"]
    assert _entities(client, user) == {}  # without the project: the user's own only
    assert sorted(_entities(client, f"{user}-other")) == ["Priya Patel"]
    priya = mine["Priya Patel"]["id"]
    for params in ({"user_id": f"{user}-other"}, {"user_id": user}):
        response = client.get(f"/v1/entities/{priya}", params=params)
        assert response.status_code == 404, response.text
        assert response.json()["error"]["code"] == "not_found"
    assert client.get("/v1/entities/not-an-id", params={"user_id": user}).status_code == 404
    assert _detail(client, user, priya, project_id="heron")["name"] == "Priya Patel"


def test_a_changed_fact_closes_the_old_one_and_a_late_one_closes_nothing_newer(
    extraction, client, ids
):
    user = ids["user_id"]
    _say(extraction, ids, 1, 1, "Remember that Dana lives in Paris.")
    _say(extraction, ids, 2, 5, "Remember that Dana moved to Berlin.")
    # Said at hour 3, arriving after hour 5's: it was true for a while, no more.
    _say(extraction, ids, 3, 3, "Remember that Dana lives in Lisbon.")
    dana = _entities(client, user)["Dana"]
    facts = [
        (f["value"], f["valid_from"], f["valid_to"])
        for f in _detail(client, user, dana["id"])["facts"]
    ]
    hour = {
        h: (T0 + timedelta(hours=h)).isoformat(timespec="microseconds")[:-6] + "Z"
        for h in (1, 3, 5)
    }
    assert facts == [
        ("paris", hour[1], hour[3]),
        ("lisbon", hour[3], hour[5]),
        ("berlin", hour[5], None),
    ]
    # What was true at a moment: the memory's text then, the fact then.
    at = (T0 + timedelta(hours=2)).isoformat()
    (memory,) = client.get("/v1/memories", params={"user_id": user, "as_of": at}).json()["memories"]
    assert memory["text"] == "Dana lives in Paris."
    then = _detail(client, user, dana["id"], as_of=at)
    assert [f["value"] for f in then["facts"]] == ["paris"]
    search = client.post(
        "/v1/memories:search", json={"user_id": user, "query": "where does Dana live", "as_of": at}
    ).json()
    assert [m["text"] for m in search["memories"]] == ["Dana lives in Paris."]
    before = client.get("/v1/memories", params={"user_id": user, "as_of": T0.isoformat()})
    assert before.json()["memories"] == []
    # The archived turns mention their entities too.
    assert dana["turns"] == 3


def _moment(hours: int) -> str:
    """T0 + `hours` as the API writes a time."""
    return (T0 + timedelta(hours=hours)).isoformat(timespec="microseconds")[:-6] + "Z"


KINDS = {"Acme Corp": "organisation", "Berlin": "place", "Dana Lee": "person", "Paris": "place"}


def test_a_memory_read_lists_the_facts_it_states_and_the_entities_it_names(
    client, app_settings, ids, pool, publisher
):
    """Turns recorded through the API, extracted by the extraction worker's own
    subscriptions: a memory points at the facts it states (the one its update
    ended too) and the entities its texts named, and each fact points back."""
    user, session = ids["user_id"], ids["session_id"]
    local = app_settings.model_copy(update={"extraction_window_turns": 1})
    acme = "Dana Lee works at Acme Corp."
    said = [
        (1, "Remember that Dana Lee works at Acme Corp.", [acme]),
        (2, "Remember that Dana lives in Paris.", [acme, "Dana lives in Paris."]),
        (5, "Remember that Dana moved to Berlin.", [acme, "Dana moved to Berlin."]),
    ]
    with extraction_worker(local, pool, OfflineLLM(), make_embedder(local), publisher):
        for n, (hours, text, texts) in enumerate(said, start=1):
            turn = {"user_id": user, "turn_id": f"t{n}", "user": text, "assistant": "Okay."}
            turn["created_at"] = _moment(hours)
            answer = client.post(f"/v1/sessions/{session}/turns", json=turn)
            assert answer.status_code == 202, answer.text
            wait_for(lambda texts=texts: live_texts(pool, ids) == texts, 60, f"turn {n}'s memory")
    listed = client.get("/v1/memories", params={"user_id": user}).json()["memories"]
    memory = {m["text"]: m["id"] for m in listed}
    entity = {name: e["id"] for name, e in _entities(client, user).items()}
    assert sorted(entity) == ["Acme Corp", "Berlin", "Dana Lee", "Paris"]

    def fact(predicate: str, obj: str, hours: tuple[int, int | None], text: str) -> dict:
        return {
            "subject_id": entity["Dana Lee"],
            "subject": "Dana Lee",
            "predicate": predicate,
            "object_id": entity[obj],
            "object": obj,
            "value": obj.lower(),
            "valid_from": _moment(hours[0]),
            "valid_to": _moment(hours[1]) if hours[1] is not None else None,
            "memory_id": memory[text],
        }

    def named(*names: str) -> list[dict]:
        return [{"id": entity[n], "name": n, "kind": KINDS[n], "project_id": None} for n in names]

    moved = client.get(f"/v1/memories/{memory['Dana moved to Berlin.']}", params={"user_id": user})
    assert moved.status_code == 200, moved.text
    facts = moved.json()["facts"]
    assert [{k: v for k, v in f.items() if k != "id"} for f in facts] == [
        fact("location", "Paris", (2, 5), "Dana moved to Berlin."),
        fact("location", "Berlin", (5, None), "Dana moved to Berlin."),
    ]
    # Every entity its texts named, the earlier text's too.
    assert moved.json()["entities"] == named("Berlin", "Dana Lee", "Paris")
    works = client.get(f"/v1/memories/{memory[acme]}", params={"user_id": user}).json()
    assert [{k: v for k, v in f.items() if k != "id"} for f in works["facts"]] == [
        fact("employer", "Acme Corp", (1, None), acme)
    ]
    assert works["entities"] == named("Acme Corp", "Dana Lee")
    # The other way: the entity's facts are these, by the same ids.
    dana = _detail(client, user, entity["Dana Lee"])["facts"]
    assert [f["id"] for f in dana] == [works["facts"][0]["id"], *(f["id"] for f in facts)]


def test_bad_times_are_422_naming_the_field(client, ids):
    user = ids["user_id"]
    cases = [
        ("get", "/v1/memories", {"user_id": user, "as_of": "2026-01-01T00:00:00"}, "as_of"),
        ("get", "/v1/memories", {"user_id": user, "as_of": "yesterday"}, "as_of"),
        ("get", "/v1/entities", {"user_id": user, "as_of": "2026-01-01"}, "as_of"),
        (
            "get",
            "/v1/memories",
            {
                "user_id": user,
                "observed_after": "2026-01-02T00:00:00Z",
                "observed_before": "2026-01-01T00:00:00Z",
            },
            "observed_before",
        ),
        (
            "post",
            "/v1/memories:search",
            {"user_id": user, "query": "x", "observed_after": "2026-01-01T00:00:00"},
            "observed_after",
        ),
        (
            "post",
            "/v1/context",
            {
                "user_id": user,
                "session_id": "s",
                "query": "x",
                "observed_after": "2026-01-01T00:00:00Z",
                "observed_before": "2026-01-01T00:00:00Z",
            },
            "observed_before",
        ),
    ]
    for method, path, values, field in cases:
        if method == "get":
            response = client.get(path, params=values)
        else:
            response = client.post(path, json=values)
        assert response.status_code == 422, (path, values, response.text)
        assert [f["field"] for f in response.json()["error"]["fields"]] == [field], response.text


def test_the_search_brings_a_turn_one_hop_away(extraction, client, ids):
    """The question names Ravi; the turn that answers, in another session, names
    only his dog: the full text cannot find it, the entity ranking can."""
    user = ids["user_id"]
    said = [
        ("first", "My friend Ravi adopted a dog called Pixel."),
        ("later", "Long day at work today."),
        ("later", "Pixel ate a whole birthday cake off the counter!"),
        ("later", "It rained all afternoon."),
    ]
    for n, (session, text) in enumerate(said, start=1):
        turn = make_turn(
            ids,
            n,
            session_id=f"{ids['session_id']}-{session}",
            user=text,
            assistant="Noted.",
            created_at=T0 + timedelta(hours=n),
        )
        assert extraction.handle_turn(turn, None) == "applied"
    body = {"user_id": user, "query": "What did Ravi's dog eat?", "k": 2}
    hits = client.post("/v1/archive:search", json=body).json()["episodes"]
    assert sorted((h["turn_id"], h["rankers"]) for h in hits) == [
        ("turn-0001", ["vector", "text"]),
        ("turn-0003", ["vector", "entity"]),
    ]


def test_a_merge_is_recorded_and_undone(client, ids):
    user = ids["user_id"]
    _write(client, user, "Liz Taylor plays chess.")
    _write(client, user, "Beth Taylor lives in Leeds.")  # the same person, unknown to rules
    before = _entities(client, user)
    liz, beth = before["Liz Taylor"]["id"], before["Beth Taylor"]["id"]
    beth_facts = _detail(client, user, beth)["facts"]
    assert [(f["subject"], f["predicate"], f["object"]) for f in beth_facts] == [
        ("Beth Taylor", "location", "Leeds")
    ]
    merged = client.post(f"/v1/entities/{beth}:merge", json={"user_id": user, "into": liz})
    assert merged.status_code == 200, merged.text
    after = _entities(client, user)
    assert sorted(after) == ["Leeds", "Liz Taylor"]
    assert after["Liz Taylor"]["aliases"] == ["Beth Taylor", "Liz Taylor"]
    assert after["Liz Taylor"]["memories"] == 2
    facts = _detail(client, user, liz)["facts"]
    assert [(f["subject"], f["predicate"], f["object"]) for f in facts] == [
        ("Liz Taylor", "location", "Leeds")
    ]
    # A second merge of the merged one, or into another user's, is refused.
    again = client.post(f"/v1/entities/{beth}:merge", json={"user_id": user, "into": liz})
    assert again.status_code == 409, again.text
    other = client.post(f"/v1/entities/{beth}:merge", json={"user_id": f"{user}-x", "into": liz})
    assert other.status_code == 404, other.text
    undone = client.post(f"/v1/entities/{beth}:unmerge", json={"user_id": user})
    assert undone.status_code == 200, undone.text
    assert undone.json()["merge_id"] == merged.json()["merge_id"]
    restored = _entities(client, user)
    assert {n: (e["aliases"], e["memories"]) for n, e in restored.items()} == {
        n: (e["aliases"], e["memories"]) for n, e in before.items()
    }
    assert _detail(client, user, beth)["facts"] == beth_facts
    assert _detail(client, user, liz)["facts"] == []
    assert client.post(f"/v1/entities/{beth}:unmerge", json={"user_id": user}).status_code == 409
