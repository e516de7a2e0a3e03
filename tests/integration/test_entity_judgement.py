"""The model's judgement in entity resolution, for each model provider (`gemini`,
`openai`) through its real client against its fake endpoint, on the real
Postgres: the extraction prompt lists the known entities a name of the turns may
be, the model answers which one it is (or none), and the memory's mention
resolves so; without the judgement the rules decide as before. The fake's model
decides like the offline rules, so each judgement is scripted
(`ModelEndpoint.answer_as_rules(judged=...)`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import REGISTRY

from shared.db.entities import Entities, Owner
from shared.db.unit_of_work import UnitsOfWork
from shared.embeddings import make_embedder
from shared.entities.judging import Judgement
from shared.entities.names import Mention
from tests.bus_helpers import inline_extraction, make_turn
from tests.model_endpoints import PROVIDERS, ModelEndpoint, model_endpoint

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(params=PROVIDERS)
def endpoint(request):
    with model_endpoint(request.param) as found:
        yield found


def _say(endpoint: ModelEndpoint, app_settings, pool, ids, said: list[str]) -> None:
    """Each text a turn an hour after the last, extracted by the extraction handler
    with the endpoint's provider."""
    llm = endpoint.llm(endpoint.settings(app_settings))
    extraction = inline_extraction(pool, llm, make_embedder(app_settings), app_settings)
    for n, text in enumerate(said, start=1):
        turn = make_turn(ids, n, user=text, assistant="Okay.", created_at=T0 + timedelta(hours=n))
        assert extraction.handle_turn(turn, None) == "applied"


def _entities(client, user: str) -> dict[str, dict]:
    answer = client.get("/v1/entities", params={"user_id": user})
    assert answer.status_code == 200, answer.text
    return {e["name"]: e for e in answer.json()["entities"]}


def _detail(client, user: str, text: str) -> dict:
    """The detail of the user's live memory of `text`."""
    listed = client.get("/v1/memories", params={"user_id": user}).json()["memories"]
    (memory,) = [m for m in listed if m["text"] == text]
    return client.get(f"/v1/memories/{memory['id']}", params={"user_id": user}).json()


def _mentioned(client, user: str, text: str) -> list[str]:
    """The names of the entities the memory of `text` mentions."""
    return [e["name"] for e in _detail(client, user, text)["entities"]]


def _facts(client, user: str, text: str) -> list[tuple[str, str, str | None]]:
    return [
        (f["subject"], f["predicate"], f["object"]) for f in _detail(client, user, text)["facts"]
    ]


def _unknown_ids(provider: str) -> float:
    labels = {"provider": provider, "purpose": "extract", "fault": "unknown_id"}
    return REGISTRY.get_sample_value("agent_memory_llm_invalid_answers_total", labels) or 0.0


TWO_DANAS = [
    "Remember that my friend Dana Lee plays the cello.",
    "Remember that Dana Smith lives in Oslo.",
    "Remember that Dana moved to Berlin.",
]
BERLIN = "Dana moved to Berlin."


def test_the_prompt_lists_the_known_entities_a_name_may_be(
    endpoint, client, app_settings, pool, ids
):
    endpoint.answer_as_rules()
    _say(endpoint, app_settings, pool, ids, TWO_DANAS)
    prompts = [endpoint.messages(n)[0][1] for n in range(len(endpoint.calls()))]
    extractions = [p for p in prompts if "Turns, oldest first:" in p]
    assert len(extractions) == 3
    # Nothing known yet, then one Dana near "Dana Smith", then both near a bare "Dana"
    # (the one seen last first); "Berlin" is near none.
    assert "Known entities" not in extractions[0]
    assert (
        'Known entities a name in the turns may be:\n- "Dana Smith": e1 Dana Lee (person)\n'
        in (extractions[1])
    )
    assert (
        'Known entities a name in the turns may be:\n- "Dana": e1 Dana Smith (person), '
        "e2 Dana Lee (person)\n\nTurns, oldest first:"
    ) in extractions[2]


@pytest.mark.parametrize(
    ("judged", "mentioned", "subject"),
    [
        # No judgement: the rules take the Dana seen last.
        ({}, ["Berlin", "Dana Smith"], "Dana Smith"),
        # The model knows this Dana is the cellist.
        ({"Dana": "Dana Lee"}, ["Berlin", "Dana Lee"], "Dana Lee"),
        # Neither of them: a third Dana.
        ({"Dana": "distinct"}, ["Berlin", "Dana"], "Dana"),
    ],
    ids=["rules", "same-as", "distinct"],
)
def test_two_people_of_one_first_name_resolve_as_the_model_judges(
    endpoint, client, app_settings, pool, ids, judged, mentioned, subject
):
    user = ids["user_id"]
    endpoint.answer_as_rules(judged)
    _say(endpoint, app_settings, pool, ids, TWO_DANAS)
    assert _mentioned(client, user, BERLIN) == mentioned
    assert _facts(client, user, BERLIN) == [(subject, "location", "Berlin")]
    names = sorted(_entities(client, user))
    assert names == sorted({"Berlin", "Dana Lee", "Dana Smith", "Oslo", subject})
    if judged.get("Dana") == "Dana Lee":
        sources = client.get(
            f"/v1/entities/{_entities(client, user)['Dana Lee']['id']}", params={"user_id": user}
        ).json()["alias_sources"]
        assert sources == [
            {"alias": "Dana", "how": "model"},
            {"alias": "Dana Lee", "how": "name"},
        ]


@pytest.mark.parametrize("judged", [False, True], ids=["rules", "same-as"])
def test_a_nickname_the_table_does_not_know_is_one_person_when_the_model_says_so(
    endpoint, client, app_settings, pool, ids, judged
):
    user = ids["user_id"]
    endpoint.answer_as_rules({"Beth Taylor": "Liz Taylor"} if judged else {})
    said = ["Remember that Liz Taylor plays chess.", "Remember that Beth Taylor moved to Leeds."]
    _say(endpoint, app_settings, pool, ids, said)
    found = _entities(client, user)
    if not judged:
        assert {n: (e["aliases"], e["memories"], e["turns"]) for n, e in found.items()} == {
            "Beth Taylor": (["Beth Taylor"], 1, 1),
            "Leeds": (["Leeds"], 1, 1),
            "Liz Taylor": (["Liz Taylor"], 1, 1),
        }
        return
    # The memory's mention is Liz's; the entity the turn made of the name before the
    # model was asked is merged into hers, recorded.
    assert {n: (e["aliases"], e["memories"], e["turns"]) for n, e in found.items()} == {
        "Leeds": (["Leeds"], 1, 1),
        "Liz Taylor": (["Beth Taylor", "Liz Taylor"], 2, 2),
    }
    assert _facts(client, user, "Beth Taylor moved to Leeds.") == [
        ("Liz Taylor", "location", "Leeds")
    ]
    liz = found["Liz Taylor"]["id"]
    sources = client.get(f"/v1/entities/{liz}", params={"user_id": user}).json()["alias_sources"]
    assert sources == [
        {"alias": "Beth Taylor", "how": "model"},
        {"alias": "Liz Taylor", "how": "name"},
    ]
    # Undoing the merge gives the turn's entity back, with its turn.
    merged = _merged(pool, ids)
    undone = client.post(f"/v1/entities/{merged}:unmerge", json={"user_id": user})
    assert undone.status_code == 200, undone.text
    after = _entities(client, user)
    assert {n: (e["memories"], e["turns"]) for n, e in after.items()} == {
        "Beth Taylor": (0, 1),
        "Leeds": (1, 1),
        "Liz Taylor": (2, 1),
    }


def _merged(pool, ids) -> str:
    with pool.connection() as conn:
        (row,) = conn.execute(
            "SELECT merged_id::text FROM entity_merges WHERE app = %s AND user_id = %s",
            (ids["app"], ids["user_id"]),
        ).fetchall()
    return row[0]


def test_an_entity_the_request_did_not_list_is_ignored_and_counted(
    endpoint, client, app_settings, pool, ids
):
    """An invented label, another user's entity and another project's: never taken
    (the rules decide), each counted as an invalid answer's unknown id."""
    user = ids["user_id"]
    others = {"user_id": f"{user}-other", "text": "Dana Lee is my dentist.", "scope": "global"}
    assert client.post("/v1/memories", json={**others, "kind": "fact"}).status_code == 201
    project = {"user_id": user, "text": "Dana Lee leads Heron.", "kind": "fact"}
    project |= {"scope": "project", "project_id": "heron"}
    assert client.post("/v1/memories", json=project).status_code == 201
    strangers = [
        _entities(client, f"{user}-other")["Dana Lee"]["id"],
        client.get("/v1/entities", params={"user_id": user, "project_id": "heron"}).json()[
            "entities"
        ][0]["id"],
        "e9",
    ]
    before = _unknown_ids(endpoint.provider)
    for n, stranger in enumerate(strangers):
        endpoint.answer_as_rules({"Dana": stranger})
        case = {**ids, "user_id": f"{user}-{n}"}
        _say(endpoint, app_settings, pool, case, TWO_DANAS)
        assert _mentioned(client, case["user_id"], BERLIN) == ["Berlin", "Dana Smith"]
    assert _unknown_ids(endpoint.provider) - before == 3


def test_the_write_takes_no_judged_entity_of_another_partition(pool, ids):
    """Checked again under the lock: an entity the listing held that is not the
    memory's project's (or merged since) is not taken."""
    owner = Owner(ids["app"], ids["user_id"], "")
    heron = Owner(ids["app"], ids["user_id"], "heron")
    with UnitsOfWork(pool, "test")() as uow:
        assert uow.conn is not None
        entities = Entities(uow.conn)
        theirs = entities.resolve_all(heron, [Mention("Dana Lee", "person")], T0)["dana lee"]
        mine = entities.resolve_all(owner, [Mention("Dana Lee", "person")], T0)["dana lee"]
        judged = [Judgement("Dana", same_as=theirs)]
        at = T0 + timedelta(hours=1)
        named = entities.resolve_all(owner, [Mention("Dana", "person")], at, judged)
        assert named == {"dana": mine}  # the rules' first name: the user's own Dana Lee
        taken = entities.resolve_all(heron, [Mention("Dana", "person")], at, judged)
        assert taken == {"dana": theirs}
