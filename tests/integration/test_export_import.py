"""One user's memory exported and imported (shared.portability), on the real stack:
memories written and updated through the API and turns archived and extracted by
the extraction worker's handlers, exported by the route and the CLI, imported into
a fresh database and under another user; searches, revisions and the full-text
counts the same afterwards; importing twice changes nothing; bad lines reported
each with its number and reason, the good ones imported."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from services.api.app import create_app
from shared.db.migrate import migrate
from tests.bus_helpers import make_turn
from tests.conftest import EMBEDDING_DIM
from tests.support import run_cli

TURNS = [
    ("I prefer green tea in the morning.", "Noted: green tea.", ""),
    ("How was the pottery class?", "Loved it, the clay was so calming.", ""),
    ("For project atlas, the database is Postgres.", "Atlas uses Postgres then.", "atlas"),
    ("The atlas deploy failed on Friday.", "I will look at the deploy logs.", "atlas"),
]
MEMORY_QUERIES = [
    ("which editor theme does the user like?", None),
    ("what does atlas deploy on?", "atlas"),
    ("tea in the morning", None),
]
STRANGER = "0b6f4a3e-5d2c-4e8f-9a7b-0c3d2e1f4a5b"  # an id no row of the test has
ARCHIVE_QUERIES = [("the pottery class", None), ("atlas deploy failed", "atlas")]
FACTS = [
    "Dana lives in Paris.",
    "Dana moved to Berlin.",
    "Liz Taylor plays chess.",
    "Beth Taylor lives in Leeds.",
    "Kim Park owns a bakery.",
    "Sam Park plays the cello.",
]


KINDS = ("memory", "episode", "entity", "fact", "merge")


def kinds(path: Path) -> dict[str, int]:
    """How many lines of each kind the export holds."""
    lines = [json.loads(line) for line in path.read_text().splitlines()[1:-1]]
    return {kind: sum(line["type"] == kind for line in lines) for kind in KINDS}


def write(client, user, text, scope="global", kind="preference", **extra):
    body = {"user_id": user, "text": text, "scope": scope, "kind": kind, **extra}
    answer = client.post("/v1/memories", json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()


def populate(client, extraction, ids) -> None:
    """Memories in the three scopes, one updated, one edited and one deleted
    (revisions of every action and source), metadata, and turns archived and
    extracted by the worker's handlers."""
    user = ids["user_id"]
    first = write(client, user, "User prefers a dark theme in every editor", entity_name="theme")
    second = write(client, user, "User prefers a light theme in every editor", entity_name="theme")
    assert (first["action"], second["action"]) == ("CREATED", "UPDATED")
    write(
        client,
        user,
        "Atlas deploys on Fridays",
        "project",
        "fact",
        project_id="atlas",
        metadata={"team": "infra", "tags": ["deploy"]},
    )
    glazing = write(
        client, user, "This session is about glazing", "session", "event", session_id="s-1"
    )
    edit = {"user_id": user, "text": "This session is about glazing bowls", "metadata": {"n": 2}}
    edited = client.patch(f"/v1/memories/{glazing['memory']['id']}", json=edit)
    assert edited.status_code == 200, edited.text
    gone = write(client, user, "User drinks coffee at night", entity_name="drink")["memory"]
    assert client.delete(f"/v1/memories/{gone['id']}", params={"user_id": user}).status_code == 200
    for n, (said, answered, project) in enumerate(TURNS):
        turn = make_turn(ids, n, user=said, assistant=answered, project_id=project)
        assert extraction.handle_turn(turn, None) == "applied"
    populate_entities(client, user)


def populate_entities(client, user) -> None:
    """Facts that changed over time, a merge in place and one undone."""
    for text in FACTS:
        write(client, user, text, kind="fact")
    named = {e["name"]: e["id"] for e in entities(client, user)}
    for merged, into in (("Beth Taylor", "Liz Taylor"), ("Kim Park", "Sam Park")):
        body = {"user_id": user, "into": named[into]}
        answer = client.post(f"/v1/entities/{named[merged]}:merge", json=body)
        assert answer.status_code == 200, answer.text
    undone = client.post(f"/v1/entities/{named['Kim Park']}:unmerge", json={"user_id": user})
    assert undone.status_code == 200, undone.text


def entities(client, user) -> list[dict]:
    answer = client.get("/v1/entities", params={"user_id": user, "limit": 100})
    assert answer.status_code == 200, answer.text
    return answer.json()["entities"]


def searches(client, user) -> list[dict]:
    """What the user's searches answer, and each memory's revisions."""
    found = []
    for query, project in MEMORY_QUERIES:
        body = {"user_id": user, "query": query, "project_id": project, "k": 10}
        found.append(client.post("/v1/memories:search", json=body).json())
    for query, project in ARCHIVE_QUERIES:
        body = {"user_id": user, "query": query, "project_id": project, "k": 5}
        found.append(client.post("/v1/archive:search", json={**body, "context_turns": 1}).json())
    memories = client.get("/v1/memories", params={"user_id": user, "limit": 500}).json()
    for memory in memories["memories"]:
        found.append(client.get(f"/v1/memories/{memory['id']}", params={"user_id": user}).json())
    return found


def table_counts(database_url: str, app: str, user: str) -> dict[str, object]:
    """The user's rows by table, and their full-text counts (lexeme_counts)."""
    with psycopg.connect(database_url) as conn:
        counts: dict[str, object] = {
            table: conn.execute(
                f"SELECT count(*) FROM {table} WHERE app = %s AND user_id = %s", (app, user)
            ).fetchone()[0]
            for table in ("memories", "memory_revisions", "episodes")
        }
        # The entities, as names: a copy under another user has ids of its own.
        counts["entities"] = conn.execute(
            "SELECT e.name, e.kind, e.project_id, "
            "(SELECT array_agg(a.normalised ORDER BY a.normalised) FROM entity_aliases a "
            "WHERE a.entity_id = e.id), "
            "(SELECT count(*) FROM entity_mentions m WHERE m.entity_id = e.id), "
            "(SELECT array_agg(DISTINCT m.kind) FROM entity_mentions m WHERE m.entity_id = e.id) "
            "FROM entities e WHERE e.app = %s AND e.user_id = %s ORDER BY e.name, e.kind",
            (app, user),
        ).fetchall()
        counts["facts"] = conn.execute(
            "SELECT s.name, f.predicate, o.name, f.value, f.valid_from, f.valid_to "
            "FROM entity_facts f JOIN entities s ON s.id = f.subject_id "
            "LEFT JOIN entities o ON o.id = f.object_id "
            "WHERE f.app = %s AND f.user_id = %s ORDER BY 1, 2, 5",
            (app, user),
        ).fetchall()
        counts["merged"] = conn.execute(
            "SELECT e.name, i.name FROM entities e JOIN entities i ON i.id = e.merged_into "
            "WHERE e.app = %s AND e.user_id = %s ORDER BY 1",
            (app, user),
        ).fetchall()
        counts["merges"] = conn.execute(
            "SELECT m.name, i.name, g.undone_at IS NULL, g.merged_at, "
            "jsonb_array_length(g.moved -> 'mentions'), g.moved -> 'aliases', "
            "jsonb_array_length(g.moved -> 'subject_facts') "
            "FROM entity_merges g JOIN entities m ON m.id = g.merged_id "
            "JOIN entities i ON i.id = g.into_id WHERE g.app = %s AND g.user_id = %s ORDER BY 4",
            (app, user),
        ).fetchall()
        counts["lexeme_counts"] = conn.execute(
            "SELECT tbl, lexeme, rows FROM lexeme_counts WHERE app = %s AND user_id = %s "
            "ORDER BY tbl, lexeme",
            (app, user),
        ).fetchall()
    return counts


def table_ids(database_url: str, app: str, user: str, name: str) -> str:
    """The id of the user's entity of this name."""
    with psycopg.connect(database_url) as conn:
        return str(
            conn.execute(
                "SELECT id FROM entities WHERE app = %s AND user_id = %s AND name = %s",
                (app, user, name),
            ).fetchone()[0]
        )


def without_ids(value: object) -> object:
    """`value` with every row id left out (a copy under another user has its own)."""
    if isinstance(value, dict):
        return {
            k: without_ids(v)
            for k, v in value.items()
            if k not in ("id", "memory_id", "subject_id", "object_id")
        }
    if isinstance(value, list):
        return [without_ids(v) for v in value]
    return value


def exported(client, user) -> list[dict]:
    answer = client.get(f"/v1/users/{user}:export")
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/x-ndjson"
    return [json.loads(line) for line in answer.text.splitlines()]


@pytest.fixture
def populated(client, extraction, ids, tmp_path) -> Path:
    """The test's user populated, and its export (through the route) in a file."""
    populate(client, extraction, ids)
    answer = client.get(f"/v1/users/{ids['user_id']}:export")
    assert answer.status_code == 200, answer.text
    path = tmp_path / "export.jsonl"
    path.write_bytes(answer.content)
    return path


def test_the_export_holds_every_memory_revision_and_episode(client, populated, app_settings, ids):
    app, user = ids["app"], ids["user_id"]
    lines = [json.loads(line) for line in populated.read_text().splitlines()]
    header, records, end = lines[0], lines[1:-1], lines[-1]
    assert {k: v for k, v in header.items() if k != "exported_at"} == {
        "format": "agent-memory/user-export",
        "version": 1,
        "app": app,
        "user_id": user,
        "embedding_dim": EMBEDDING_DIM,
        "entities": True,
    }
    typed = {kind: [r for r in records if r["type"] == kind] for kind in KINDS}
    memories, episodes = typed["memory"], typed["episode"]
    # What a line points at comes before it.
    assert records == [r for kind in KINDS for r in typed[kind]]
    assert end == {
        "type": "end",
        "memories": len(memories),
        "episodes": len(episodes),
        "profiles": 0,
        "entities": len(typed["entity"]),
        "facts": len(typed["fact"]),
        "merges": 2,
    }
    # Kim's merge was undone: its moved mention is Kim's own again.
    assert [(g["undone_at"] is None, len(g["moved"]["mentions"])) for g in typed["merge"]] == [
        (True, 1),
        (False, 1),
    ]
    dana = next(e["id"] for e in typed["entity"] if e["name"] == "Dana")
    lived = [f for f in typed["fact"] if f["subject_id"] == dana]
    assert [(f["value"], f["valid_to"] is None) for f in lived] == [
        ("paris", False),
        ("berlin", True),
    ]
    assert len(episodes) == len(TURNS)
    assert {m["scope"] for m in memories} == {"global", "project", "session"}
    theme = next(m for m in memories if m["entity_name"] == "theme")
    assert [r["action"] for r in theme["revisions"]] == ["CREATED", "UPDATED"]
    drink = next(m for m in memories if m["entity_name"] == "drink")
    assert drink["valid_to"] is not None
    assert [r["action"] for r in drink["revisions"]] == ["CREATED", "DELETED"]
    for record in memories + episodes:
        assert len(record["embedding"]) == EMBEDDING_DIM
    detail = client.get(f"/v1/memories/{theme['id']}", params={"user_id": user}).json()
    assert [r["new_text"] for r in theme["revisions"]] == [
        r["new_text"] for r in detail["revisions"]
    ]
    # The CLI writes the same lines (the header's time aside).
    cli = run_cli(app_settings, "export", "--app", app, "--user", user)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.splitlines()[1:] == populated.read_text().splitlines()[1:]
    assert cli.stderr.splitlines()[-1] == (
        f"exported {len(memories)} memories, {len(episodes)} episodes, "
        f"{len(typed['entity'])} entities, {len(typed['fact'])} facts, 2 merges of user "
        f"{user!r} (app {app!r})"
    )


def test_a_round_trip_into_a_fresh_database_searches_the_same(
    client, populated, app_settings, ids, fresh_database
):
    app, user = ids["app"], ids["user_id"]
    migrate(fresh_database, EMBEDDING_DIM)
    fresh = app_settings.model_copy(update={"database_url": fresh_database})
    before = searches(client, user)
    records = len(populated.read_text().splitlines()) - 2
    n = kinds(populated)

    done = run_cli(fresh, "import", str(populated))
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout == (
        f"imported {n['memory']} memories, {n['episode']} episodes, 0 profile fields, "
        f"{n['entity']} entities, "
        f"{n['fact']} facts, {n['merge']} merges; skipped 0 already there; 0 bad lines "
        f"(user {user!r} of app {app!r})\n"
    )
    counts = table_counts(fresh_database, app, user)
    assert counts == table_counts(app_settings.database_url, app, user)
    assert ("Postgres", "other", "atlas") in [row[:3] for row in counts["entities"]]
    assert counts["merged"] == [("Beth Taylor", "Liz Taylor")]

    again = run_cli(fresh, "import", str(populated))
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(
        "imported 0 memories, 0 episodes, 0 profile fields, 0 entities, 0 facts, 0 merges; "
        f"skipped {records} already there; 0 bad lines"
    )
    assert table_counts(fresh_database, app, user) == counts
    with TestClient(create_app(fresh), raise_server_exceptions=False) as restored:
        assert searches(restored, user) == before
        assert entities(restored, user) == entities(client, user)  # ids, counts, times
        # The imported merge is undone as the original would be.
        into = next(e["id"] for e in entities(client, user) if e["name"] == "Liz Taylor")
        merged = table_ids(fresh_database, app, user, "Beth Taylor")
        undone = restored.post(f"/v1/entities/{merged}:unmerge", json={"user_id": user})
        assert undone.status_code == 200, undone.text
        facts = restored.get(f"/v1/entities/{merged}", params={"user_id": user}).json()["facts"]
        assert [(f["subject"], f["predicate"], f["object"]) for f in facts] == [
            ("Beth Taylor", "location", "Leeds")
        ]
        liz = restored.get(f"/v1/entities/{into}", params={"user_id": user}).json()
        assert liz["facts"] == []


def test_importing_under_another_user_through_the_route(client, populated, app_settings, ids):
    app, user, copy = ids["app"], ids["user_id"], f"{ids['user_id']}-copy"
    body = populated.read_bytes()
    records = len(body.splitlines()) - 2

    answer = client.post(f"/v1/users/{copy}:import", content=body)
    assert answer.status_code == 200, answer.text
    result = answer.json()
    n = kinds(populated)
    assert result == {
        "user_id": copy,
        "memories": n["memory"],
        "episodes": len(TURNS),
        "profiles": 0,
        "entities": n["entity"],
        "facts": n["fact"],
        "merges": 2,
        "skipped": 0,
        "bad_lines": 0,
        "complete": True,
    }
    assert sum(n.values()) == records
    assert without_ids(searches(client, copy)) == without_ids(searches(client, user))
    counts = table_counts(app_settings.database_url, app, copy)
    original = table_counts(app_settings.database_url, app, user)
    assert counts == original
    # The copy has ids of its own, and its export says it is the copy's.
    lines = exported(client, copy)
    assert lines[0]["user_id"] == copy
    original_ids = {json.loads(line)["id"] for line in body.splitlines()[1:-1]}
    assert not original_ids & {line["id"] for line in lines[1:-1]}

    again = client.post(f"/v1/users/{copy}:import", content=body)
    nothing = {"memories": 0, "episodes": 0, "entities": 0, "facts": 0, "merges": 0}
    assert again.json() == result | nothing | {"skipped": records}
    assert table_counts(app_settings.database_url, app, copy) == counts
    # Imported again from the copy's own export into the copy: the same rows.
    mine = "\n".join(json.dumps(line) for line in lines).encode()
    assert client.post(f"/v1/users/{copy}:import", content=mine).json()["skipped"] == records


def test_a_deleted_user_is_not_imported_into(client, populated, app_settings, ids):
    user = ids["user_id"]
    assert client.delete(f"/v1/users/{user}").status_code == 200

    refused = client.post(f"/v1/users/{user}:import", content=populated.read_bytes())
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "user_deleted"
    assert error["fields"][0]["field"] == "user_id"
    assert "was deleted (GDPR)" in error["message"]
    cli = run_cli(app_settings, "import", str(populated))
    assert cli.returncode == 1
    assert "was deleted (GDPR)" in cli.stderr and cli.stdout == ""
    counts = table_counts(app_settings.database_url, ids["app"], user)
    assert counts == {
        "memories": 0,
        "memory_revisions": 0,
        "episodes": 0,
        "entities": [],
        "facts": [],
        "merged": [],
        "merges": [],
        "lexeme_counts": [],
    }
    assert client.get(f"/v1/users/{user}:export").status_code == 404


def test_an_export_from_before_entities_derives_them_on_import(client, populated, ids):
    """A header without `entities` and no entity lines: the writes' own derivation."""
    user, copy = ids["user_id"], f"{ids['user_id']}-old"
    lines = [json.loads(line) for line in populated.read_text().splitlines()]
    header, rows, end = lines[0], lines[1:-1], lines[-1]
    old = [{k: v for k, v in header.items() if k != "entities"}]
    old += [r for r in rows if r["type"] in ("memory", "episode")]
    old += [{"type": "end", "memories": end["memories"], "episodes": end["episodes"]}]
    body = "\n".join(json.dumps(line) for line in old).encode()

    answer = client.post(f"/v1/users/{copy}:import", content=body)
    assert answer.status_code == 200, answer.text
    assert (answer.json()["entities"], answer.json()["merges"]) == (0, 0)
    original = sorted(e["name"] for e in entities(client, user))
    # Derived as the writes derived them: the merge is not in such a file.
    assert sorted(e["name"] for e in entities(client, copy)) == sorted([*original, "Beth Taylor"])
    dana = next(e["id"] for e in entities(client, copy) if e["name"] == "Dana")
    facts = client.get(f"/v1/entities/{dana}", params={"user_id": copy}).json()["facts"]
    assert [(f["object"], f["valid_to"] is None) for f in facts] == [
        ("Paris", False),
        ("Berlin", True),
    ]


def bad_file(populated: Path) -> tuple[bytes, list[tuple[int, str]]]:
    """An export with bad lines between good ones (and a blank line, which is no
    line of the export), and the reasons expected for them by number."""
    lines = populated.read_bytes().splitlines()
    header = lines[0]
    memories = [json.loads(line) for line in lines[1:-1] if b'"type" : "memory"' in line]
    episode = next(line for line in lines[1:-1] if b'"type" : "episode"' in line)
    theme = next(m for m in memories if m["entity_name"] == "theme")
    other = next(m for m in memories if m["entity_name"] == "drink")  # deleted: no rival
    unknown_kind = {**other, "kind": "opinion"}
    missing = {k: v for k, v in other.items() if k != "text"}
    short = {**other, "embedding": other["embedding"][:-1]}
    # Another live memory of the same entity and scope under another id.
    rival = {**theme, "id": "6b1f4a3e-5d2c-4e8f-9a7b-0c3d2e1f4a5b", "text": "A rival theme"}
    # Valid, but over what Postgres indexes (a btree entry is at most 2,704 bytes).
    noise = "".join(hashlib.sha256(bytes([i])).hexdigest() for i in range(94))  # incompressible
    huge = {**other, "id": "7c2f4a3e-5d2c-4e8f-9a7b-0c3d2e1f4a5b", "entity_name": noise}
    # Entity lines pointing at what the file does not bring.
    rest = [json.loads(line) for line in lines[1:-1]]
    fact, entity = (next(r for r in rest if r["type"] == kind) for kind in ("fact", "entity"))
    merge = next(r for r in rest if r["type"] == "merge")
    body = [
        header,
        json.dumps(theme).encode(),
        b"not json {",
        json.dumps(unknown_kind).encode(),
        b"",
        json.dumps(missing).encode(),
        json.dumps(short).encode(),
        b'{"type": "note"}',
        episode,
        json.dumps(rival).encode(),
        json.dumps(huge).encode(),
        json.dumps({**fact, "subject_id": STRANGER}).encode(),
        json.dumps({**entity, "kind": "alien"}).encode(),
        json.dumps(merge).encode(),
    ]
    expected = [
        (3, "not JSON (expected ident at column 2)"),
        (4, "kind: 'opinion' is not one of 'preference', 'fact', 'rule' or 'event'"),
        (6, "text: is missing"),
        (
            7,
            f"embedding: has {EMBEDDING_DIM - 1} numbers; this database's embeddings have "
            f"{EMBEDDING_DIM} (AM_EMBEDDING_DIM)",
        ),
        (8, "unknown type 'note' (memory, episode, profile, entity, fact, merge or end)"),
        # A line that does not read is reported as it is read; the others as written.
        (
            13,
            "kind: 'alien' is not one of 'person', 'organisation', 'project', 'place', "
            "'tool', 'pet', 'event' or 'other'",
        ),
        (
            10,
            "the user has a live memory of entity 'theme' in this scope under another id; "
            "not imported",
        ),
        (
            11,
            "refused by the database: index row size 6080 exceeds btree version 4 maximum "
            '2704 for index "memories_user_entity"',
        ),
        (12, f"subject_id: no entity {STRANGER} of this user; not imported"),
        (14, f"merged_id: no entity {merge['merged_id']} of this user; not imported"),
    ]
    return b"\n".join(body) + b"\n", expected


def test_bad_lines_are_reported_and_the_good_ones_imported_by_the_cli(
    populated, app_settings, ids, tmp_path
):
    app, user = ids["app"], f"{ids['user_id']}-cli"
    body, expected = bad_file(populated)
    path = tmp_path / "bad.jsonl"
    path.write_bytes(body)

    done = run_cli(app_settings, "import", str(path), "--as-user", user)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"agent-memory import: {path}: line {n}: {reason}" for n, reason in expected
    ]
    assert done.stdout == (
        "imported 1 memories, 1 episodes, 0 profile fields, 0 entities, 0 facts, 0 merges; "
        "skipped 0 already "
        "there; 10 bad lines "
        f"(user {user!r} of app {app!r})\n"
    )
    counts = table_counts(app_settings.database_url, app, user)
    assert (counts["memories"], counts["memory_revisions"], counts["episodes"]) == (1, 2, 1)
    again = run_cli(app_settings, "import", str(path), "--as-user", user)
    assert again.returncode == 2
    assert again.stdout.startswith(
        "imported 0 memories, 0 episodes, 0 profile fields, 0 entities, 0 facts, 0 merges; "
        "skipped 2 already there"
    )
    assert table_counts(app_settings.database_url, app, user) == counts


def test_bad_lines_answer_422_naming_them_and_the_good_ones_are_imported(
    client, populated, app_settings, ids
):
    app, user = ids["app"], f"{ids['user_id']}-api"
    body, expected = bad_file(populated)

    answer = client.post(f"/v1/users/{user}:import", content=body)
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["fields"] == [{"field": f"line {n}", "message": r} for n, r in expected]
    assert error["message"] == (
        "imported 1 memories, 1 episodes, 0 profile fields, 0 entities, 0 facts, 0 merges; "
        "skipped 0 already "
        "there; 10 bad lines: " + "; ".join(f"line {n}: {reason}" for n, reason in expected)
    )
    counts = table_counts(app_settings.database_url, app, user)
    assert (counts["memories"], counts["memory_revisions"], counts["episodes"]) == (1, 2, 1)
    live = client.get("/v1/memories", params={"user_id": user}).json()["memories"]
    assert [m["entity_name"] for m in live] == ["theme"]


def test_the_routes_refuse_what_they_cannot_do(client, populated, app_settings, ids):
    user = ids["user_id"]
    nobody = client.get("/v1/users/nobody:export")
    assert nobody.status_code == 404
    assert nobody.json()["error"] | {"request_id": ""} == {
        "code": "not_found",
        "message": "this app has nothing of user 'nobody'",
        "fields": [{"field": "user_id", "message": "this app has nothing of user 'nobody'"}],
        "request_id": "",
    }
    # Another app's key sees nothing of this app's user.
    other = app_settings.model_copy(update={"default_app": f"{ids['app']}-other"})
    with TestClient(create_app(other), raise_server_exceptions=False) as stranger:
        assert stranger.get(f"/v1/users/{user}:export").status_code == 404
    bad_id = client.get("/v1/users/bad%07id:export")
    assert bad_id.status_code == 422
    assert bad_id.json()["error"]["fields"][0]["field"] == "user_id"
    for body, reason in [
        (b"", "missing: an export begins with its header line"),
        (b"\n\n", "missing: an export begins with its header line"),
        (
            b'{"format": "csv", "version": 1, "app": "a", "user_id": "u", "exported_at": '
            b'"2026-01-01T00:00:00Z", "embedding_dim": 768}',
            "not an agent-memory user export (format 'csv')",
        ),
        (
            populated.read_bytes().split(b"\n", 1)[1],
            "not an export's header line: this is a memory line; an export begins with its header",
        ),
    ]:
        refused = client.post(f"/v1/users/{user}-x:import", content=body)
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["fields"][0]["message"] == reason
    assert table_counts(app_settings.database_url, ids["app"], f"{user}-x")["memories"] == 0


def test_the_commands_refuse_bad_arguments(app_settings, ids, tmp_path):
    nobody = run_cli(app_settings, "export", "--app", ids["app"], "--user", "nobody")
    assert (nobody.returncode, nobody.stdout) == (2, "")
    assert (
        nobody.stderr == f"agent-memory export: app {ids['app']!r} has nothing of user 'nobody'\n"
    )
    missing = run_cli(app_settings, "import", str(tmp_path / "none.jsonl"))
    assert missing.returncode == 2
    assert missing.stderr == (
        f"agent-memory import: {tmp_path / 'none.jsonl'}: No such file or directory\n"
    )
    control = run_cli(app_settings, "export", "--user", "bad\x07id")
    assert control.returncode == 2
    assert control.stderr == ("agent-memory export: --user: must not contain control characters\n")
