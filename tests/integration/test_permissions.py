"""The tool-permission guardrail through the API, on the real Postgres and Valkey.

Every outcome is asserted exactly (the reference's test accepted "allow" or
"PROMPT_USER", so it could not fail)."""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import re2
from fastapi.testclient import TestClient

from services.api.app import create_app
from services.api.permission_models import EvaluateResponse
from services.dev.localstack.postgres import LocalPostgres
from services.dev.localstack.process import free_port
from services.dev.localstack.valkey_server import LocalValkey
from shared.db.migrate import migrate
from shared.permissions import grant_key
from tests.support import wait_for

PROJECT = "CloudRetail"
TOOL = "run_shell"


@pytest.fixture
def client(app_settings):
    with TestClient(create_app(app_settings), raise_server_exceptions=False) as c:
        yield c


def add_rule(client, user_id, pattern, action, project=PROJECT, tool=TOOL):
    body = {
        "user_id": user_id,
        "project_id": project,
        "tool_name": tool,
        "pattern": pattern,
        "action": action,
    }
    response = client.post("/v1/permissions/rules", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def call_body(ids, command, project=PROJECT, tool=TOOL, session=None):
    args = command if isinstance(command, dict) else {"CommandLine": command}
    body = {
        "user_id": ids["user_id"],
        "session_id": session or ids["session_id"],
        "tool_name": tool,
        "tool_args": args,
    }
    if project is not None:
        body["project_id"] = project
    return body


def evaluate(client, ids, command, **where):
    response = client.post("/v1/permissions:evaluate", json=call_body(ids, command, **where))
    assert response.status_code == 200, response.text
    verdict = response.json()
    # The route serialises the verdict as it is: it must be what the model lays out.
    assert EvaluateResponse.model_validate(verdict).model_dump() == verdict
    return verdict


def outcome(verdict):
    return verdict["decision"], verdict["tier"], verdict["rule_id"]


def grant(client, ids, command, tool=TOOL, session=None, **extra):
    body = call_body(ids, command, project=None, tool=tool, session=session)
    response = client.post("/v1/permissions/grants", json={**body, **extra})
    assert response.status_code == 201, response.text
    return response.json()


def field_of(response):
    assert response.status_code == 422, response.text
    return [f["field"] for f in response.json()["error"]["fields"]]


def error_of(response):
    """The error's code, message and fields (other keys, such as a request id, aside)."""
    error = response.json()["error"]
    return error["code"], error["message"], error.get("fields")


def rule_body(ids, pattern, action="BLOCK", project=PROJECT, tool=TOOL):
    return {
        "user_id": ids["user_id"],
        "project_id": project,
        "tool_name": tool,
        "pattern": pattern,
        "action": action,
    }


def stored_rules(pool, ids, project=None):
    """How many rules of the test's user are in the table (of one project: '' global)."""
    sql = "SELECT count(*) FROM permission_rules WHERE app = %s AND user_id = %s"
    params = [ids["app"], ids["user_id"]]
    if project is not None:
        sql += " AND project_id = %s"
        params.append(project)
    with pool.connection() as conn:
        return conn.execute(sql, params).fetchone()[0]


def fill(pool, ids, project, count):
    """`count` harmless ALLOW rules in the scope, written straight to the table (fast)."""
    with pool.connection() as conn:
        conn.execute(
            "INSERT INTO permission_rules (app, user_id, project_id, tool_name, pattern, action) "
            "SELECT %s, %s, %s, %s, '^filler' || n || '$', 'ALLOW' FROM generate_series(1, %s) n",
            (ids["app"], ids["user_id"], project, TOOL, count),
        )


# -- tiers ---------------------------------------------------------------------------


def test_the_reference_scenario(client, ids):
    allow = add_rule(client, ids["user_id"], "pytest.*--timeout=30", "ALLOW")
    block = add_rule(client, ids["user_id"], "rm -rf.*", "BLOCK")

    assert outcome(evaluate(client, ids, "pytest --timeout=30")) == (
        "ALLOW",
        "project",
        allow["id"],
    )
    assert outcome(evaluate(client, ids, "rm -rf /tmp/data")) == ("BLOCK", "project", block["id"])
    pending = evaluate(client, ids, "ls")
    assert outcome(pending) == ("PENDING", "none", None)
    assert pending["reason"] == "needs human confirmation: no rule matches"
    exempt = evaluate(client, ids, {"query": "deploy"}, tool="search_archived_memory")
    assert outcome(exempt) == ("ALLOW", "exempt", None)
    # Project rules apply inside their project only.
    assert outcome(evaluate(client, ids, "pytest --timeout=30", project=None)) == (
        "PENDING",
        "none",
        None,
    )
    assert outcome(evaluate(client, ids, "rm -rf /", project="Other")) == ("PENDING", "none", None)


def test_a_project_allow_beats_a_global_block(client, ids):
    add_rule(client, ids["user_id"], "^make deploy", "BLOCK", project="global")
    allow = add_rule(client, ids["user_id"], "^make deploy$", "ALLOW")
    assert outcome(evaluate(client, ids, "make deploy")) == ("ALLOW", "project", allow["id"])
    # Elsewhere the global rule decides.
    verdict = evaluate(client, ids, "make deploy", project="Other")
    assert verdict["decision"] == "BLOCK" and verdict["tier"] == "global"


@pytest.mark.parametrize("project", [PROJECT, "global"])
def test_within_a_tier_block_beats_allow(client, ids, project):
    tier = "global" if project == "global" else "project"
    allow = add_rule(client, ids["user_id"], "^git ", "ALLOW", project=project)
    block = add_rule(client, ids["user_id"], "push.*--force", "BLOCK", project=project)
    assert outcome(evaluate(client, ids, "git push --force origin main")) == (
        "BLOCK",
        tier,
        block["id"],
    )
    assert outcome(evaluate(client, ids, "git status")) == ("ALLOW", tier, allow["id"])


def test_a_rule_for_every_tool_and_a_command_without_commandline(client, ids):
    block = add_rule(client, ids["user_id"], '"path":"/etc/', "BLOCK", tool="*")
    # No CommandLine: the command is the canonical JSON of the arguments.
    verdict = evaluate(client, ids, {"path": "/etc/passwd", "mode": "r"}, tool="read_file")
    assert outcome(verdict) == ("BLOCK", "project", block["id"])
    # A CommandLine that is not a string: the whole arguments again.
    verdict = evaluate(client, ids, {"CommandLine": ["cat"], "path": "/etc/x"}, tool="read_file")
    assert outcome(verdict) == ("BLOCK", "project", block["id"])
    assert evaluate(client, ids, {"path": "/home/x"}, tool="read_file")["decision"] == "PENDING"


def test_a_catastrophic_pattern_answers_at_once(client, ids):
    add_rule(client, ids["user_id"], "(a+)+$", "BLOCK")
    allow = add_rule(client, ids["user_id"], "b$", "ALLOW")
    started = time.perf_counter()
    verdict = evaluate(client, ids, "a" * 100_000 + "b")
    took = time.perf_counter() - started
    assert outcome(verdict) == ("ALLOW", "project", allow["id"])
    assert took < 1.0, f"{took:.3f} s"  # the match alone: tests/unit (< 10 ms)


# -- allow-once grants ---------------------------------------------------------------


def test_one_grant_allows_exactly_one_of_twenty_concurrent_calls(app_settings, ids):
    app = create_app(app_settings)
    in_flight = InFlight(app)
    rounds = 5

    async def race() -> list[list[dict]]:
        transport = httpx.ASGITransport(app=in_flight)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://api") as http,
        ):

            async def twenty(command: str) -> list[dict]:
                body = call_body(ids, command)
                calls = [http.post("/v1/permissions:evaluate", json=body) for _ in range(20)]
                return [a.json() for a in await asyncio.gather(*calls)]

            # Warm up, as a running server is: twenty open Valkey connections, so
            # the twenty calls below reach Valkey together, not one handshake apart.
            await twenty("warm up")
            results = []
            for n in range(rounds):
                command = f"terraform apply -target=module.m{n}"
                granted = await http.post(
                    "/v1/permissions/grants", json=call_body(ids, command, project=None)
                )
                assert granted.status_code == 201, granted.text
                results.append(await twenty(command))
        return results

    results = asyncio.run(race())
    # The twenty calls really were in the API at the same time.
    assert in_flight.peak == 20
    for verdicts in results:
        outcomes = sorted(outcome(v) for v in verdicts)
        assert outcomes == [("ALLOW", "allow_once", None)] + [("PENDING", "none", None)] * 19


class InFlight:
    """ASGI wrapper that records the most requests inside the app at once."""

    def __init__(self, app):
        self.app = app
        self.now = 0
        self.peak = 0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            await self.app(scope, receive, send)
        finally:
            self.now -= 1


def test_a_grant_applies_to_its_session_tool_and_command_only(client, ids):
    granted = grant(client, ids, "npm publish")
    assert granted["command"] == "npm publish" and granted["tool_name"] == TOOL
    assert (granted["user_id"], granted["session_id"]) == (ids["user_id"], ids["session_id"])

    pending = ("PENDING", "none", None)
    assert outcome(evaluate(client, ids, "npm publish", session=f"{ids['session_id']}-2")) == (
        pending
    )
    assert outcome(evaluate(client, ids, "npm publish --tag next")) == pending
    assert outcome(evaluate(client, ids, "npm publish", tool="run_other")) == pending
    other_user = {**ids, "user_id": f"{ids['user_id']}-2"}
    assert outcome(evaluate(client, other_user, "npm publish")) == pending
    # Project or not, the grant is the session's.
    assert outcome(evaluate(client, ids, "npm publish")) == ("ALLOW", "allow_once", None)
    assert outcome(evaluate(client, ids, "npm publish")) == pending


def test_a_grant_beats_a_block_rule_and_a_second_grant_refreshes_the_first(client, ids):
    add_rule(client, ids["user_id"], "^docker ", "BLOCK")
    grant(client, ids, "docker system prune")
    grant(client, ids, "docker system prune")
    assert outcome(evaluate(client, ids, "docker system prune")) == ("ALLOW", "allow_once", None)
    assert evaluate(client, ids, "docker system prune")["decision"] == "BLOCK"


def test_a_grant_expires_after_its_ttl(client, ids, valkey_client, app_settings):
    before = datetime.now(UTC)
    granted = grant(client, ids, {"path": "notes.txt"}, tool="write_file", ttl_seconds=60)
    assert granted["command"] == '{"path":"notes.txt"}'
    key = grant_key(ids["app"], ids["user_id"], ids["session_id"], "write_file", granted["command"])
    assert 0 < valkey_client.ttl(key) <= 60
    expires_at = datetime.fromisoformat(granted["expires_at"].replace("Z", "+00:00"))
    assert timedelta(seconds=59) < expires_at - before < timedelta(seconds=61)
    grant(client, ids, "make")  # the default TTL: AM_PERMISSION_GRANT_TTL_SECONDS
    key = grant_key(ids["app"], ids["user_id"], ids["session_id"], TOOL, "make")
    assert 60 < valkey_client.ttl(key) <= app_settings.permission_grant_ttl_seconds


@pytest.mark.parametrize("ttl", [0, 3601, -5])
def test_a_grant_ttl_out_of_range_is_422(client, ids, ttl):
    body = {**call_body(ids, "ls", project=None), "ttl_seconds": ttl}
    assert field_of(client.post("/v1/permissions/grants", json=body)) == ["ttl_seconds"]


# -- failures are PENDING ----------------------------------------------------------------


def test_a_match_too_slow_is_pending_and_the_api_answers_meanwhile(app_settings, ids):
    # RE2 is linear in the command, but a Set of patterns built to blow up its DFA
    # costs about 20 microseconds a byte here: some 3 s for this command.
    app = create_app(app_settings)
    rng = random.Random(7)
    command = "".join(rng.choice("ab") for _ in range(150_000))

    async def run() -> tuple[dict, dict, float]:
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://api", timeout=30) as http,
        ):
            for i in range(50):
                body = {
                    "user_id": ids["user_id"],
                    "project_id": PROJECT,
                    "tool_name": TOOL,
                    "pattern": f"(a|b)*a(a|b){{{10 + i % 5}}}c{i}",
                    "action": "BLOCK",
                }
                assert (await http.post("/v1/permissions/rules", json=body)).status_code == 201

            async def exempt_meanwhile() -> tuple[dict, float]:
                # Once the slow match runs in the guardrail's matching thread (polled
                # from a thread of its own, so the event loop stays free).
                await asyncio.to_thread(
                    wait_for,
                    lambda: app.state.permissions._executor._threads,
                    10,
                    "the slow match to start",
                )
                started = time.perf_counter()
                body = call_body(ids, {}, tool="search_archived_memory")
                answer = await http.post("/v1/permissions:evaluate", json=body)
                return answer.json(), time.perf_counter() - started

            slow, (exempt, took) = await asyncio.gather(
                http.post("/v1/permissions:evaluate", json=call_body(ids, command)),
                exempt_meanwhile(),
            )
        return slow.json(), exempt, took

    slow, exempt, took = asyncio.run(run())
    assert outcome(slow) == ("PENDING", "none", None)
    assert slow["reason"] == "needs human confirmation: matching the rules took over 1.0 s"
    assert outcome(exempt) == ("ALLOW", "exempt", None)
    assert took < 0.5, f"the event loop waited {took:.3f} s"


def test_valkey_down_is_pending_never_allow(app_settings, tmp_path, ids):
    own = LocalValkey(tmp_path, free_port(), tmp_path / "logs")
    own.start()
    try:
        local = app_settings.model_copy(update={"valkey_url": own.url})
        with TestClient(create_app(local), raise_server_exceptions=False) as c:
            add_rule(c, ids["user_id"], "^pytest", "ALLOW")
            grant(c, ids, "pytest")
            own.process.request_stop()
            assert own.process.wait(10)
            verdict = evaluate(c, ids, "pytest")
            exempt = evaluate(c, ids, {}, tool="search_archived_memory")
            granting = c.post("/v1/permissions/grants", json=call_body(ids, "ls", project=None))
    finally:
        own.process.stop(5)
    assert outcome(verdict) == ("PENDING", "none", None)
    assert verdict["reason"] == "needs human confirmation: the grant store (Valkey) is unavailable"
    assert outcome(exempt) == ("ALLOW", "exempt", None)  # decided without Valkey
    assert granting.status_code == 503
    assert granting.json()["error"]["code"] == "valkey_unavailable"


def test_postgres_down_is_pending_never_allow(app_settings, tmp_path, ids):
    own = LocalPostgres(tmp_path, free_port(), tmp_path / "logs", fast=True)
    own.start()
    try:
        migrate(own.url, app_settings.embedding_dim)
        local = app_settings.model_copy(
            update={
                "database_url": own.url,
                "db_connect_timeout_seconds": 1.0,
                "permission_cache_seconds": 0.0,  # read the rules on every call
            }
        )
        with TestClient(create_app(local), raise_server_exceptions=False) as c:
            allow = add_rule(c, ids["user_id"], "^pytest", "ALLOW")
            assert outcome(evaluate(c, ids, "pytest -q")) == ("ALLOW", "project", allow["id"])
            grant(c, ids, "make release")
            own.process.request_stop()
            assert own.process.wait(10)
            verdict = evaluate(c, ids, "pytest -q")
            granted = evaluate(c, ids, "make release")
            writing = c.post(
                "/v1/permissions/rules",
                json={
                    "user_id": ids["user_id"],
                    "project_id": "global",
                    "tool_name": TOOL,
                    "pattern": "x",
                    "action": "BLOCK",
                },
            )
    finally:
        own.process.stop(5)
    reason = "needs human confirmation: the rule store (Postgres) is unavailable"
    assert (outcome(verdict), verdict["reason"]) == (("PENDING", "none", None), reason)
    # The rules could not be read, so the grant was not used either.
    assert (outcome(granted), granted["reason"]) == (("PENDING", "none", None), reason)
    assert writing.status_code == 503


def test_a_stored_pattern_that_does_not_compile_is_pending(client, ids, pool):
    add_rule(client, ids["user_id"], "^ls", "ALLOW")
    with pool.connection() as conn:
        rule_id = conn.execute(
            "INSERT INTO permission_rules (app, user_id, project_id, tool_name, pattern, action) "
            "VALUES (%s, %s, %s, %s, %s, 'BLOCK') RETURNING id::text",
            (ids["app"], ids["user_id"], PROJECT, TOOL, r"(a)\1"),
        ).fetchone()[0]
    # The cache would hide the insert for up to AM_PERMISSION_CACHE_SECONDS.
    verdict = wait_for(
        lambda: (v := evaluate(client, ids, "ls"))["decision"] != "ALLOW" and v,
        timeout=10,
        what="the stored rule is read",
    )
    assert outcome(verdict) == ("PENDING", "none", None)
    assert verdict["reason"] == (
        f"needs human confirmation: the pattern of rule {rule_id} does not compile "
        r"(invalid escape sequence: \1)"
    )
    # Another tool has no bad candidate: its rules still apply.
    assert evaluate(client, ids, "ls", tool="other")["reason"].endswith("no rule matches")


def test_rules_written_by_another_process_apply_within_the_cache_time(client, ids, pool):
    assert evaluate(client, ids, "curl evil.example")["decision"] == "PENDING"  # now cached
    with pool.connection() as conn:
        conn.execute(
            "INSERT INTO permission_rules (app, user_id, project_id, tool_name, pattern, action) "
            "VALUES (%s, %s, '', %s, '^curl ', 'BLOCK')",
            (ids["app"], ids["user_id"], TOOL),
        )
    wait_for(
        lambda: evaluate(client, ids, "curl evil.example")["decision"] == "BLOCK",
        timeout=10,
        what="the other process's rule applies",
    )


# -- validation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pattern", [r"(a)\1", "(?=x)", "(?<!a)b", "[", "a{2,1}", "", "a" * 1001, "\ud800"]
)
def test_a_pattern_re2_cannot_compile_is_422(client, ids, pool, pattern):
    body = {
        "user_id": ids["user_id"],
        "project_id": PROJECT,
        "tool_name": TOOL,
        "pattern": pattern,
        "action": "BLOCK",
    }
    # As JSON text by hand: a lone surrogate cannot be encoded as UTF-8 by the client.
    response = client.post(
        "/v1/permissions/rules",
        content=json.dumps(body),
        headers={"content-type": "application/json"},
    )
    assert field_of(response) == ["pattern"]
    assert stored_rules(pool, ids) == 0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"user_id": ""}, "user_id"),
        ({"project_id": ""}, "project_id"),
        ({"tool_name": "run\nshell"}, "tool_name"),
        ({"tool_name": "x" * 257}, "tool_name"),
        ({"action": "DENY"}, "action"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_a_bad_rule_is_422_naming_the_field(client, ids, change, field):
    body = {
        "user_id": ids["user_id"],
        "project_id": PROJECT,
        "tool_name": TOOL,
        "pattern": "x",
        "action": "BLOCK",
        **change,
    }
    assert field_of(client.post("/v1/permissions/rules", json=body)) == [field]


@pytest.mark.parametrize("path", ["/v1/permissions:evaluate", "/v1/permissions/grants"])
@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"tool_args": {"CommandLine": "x" * (256 * 1024)}}, "tool_args"),
        ({"tool_args": {"blob": ["y" * 1000] * 300}}, "tool_args"),
        ({"tool_args": "ls"}, "tool_args"),
        ({"session_id": ""}, "session_id"),
        ({"user_id": "a\x00b"}, "user_id"),
        ({"tool_name": ""}, "tool_name"),
    ],
)
def test_a_bad_tool_call_is_422_naming_the_field(client, ids, path, change, field):
    body = {**call_body(ids, "ls", project=None), **change}
    response = client.post(path, json=body)
    assert field_of(response) == [field]
    assert "Traceback" not in response.text


def test_tool_args_at_the_limit_are_evaluated(client, ids, app_settings):
    overhead = len('{"CommandLine":""}')
    command = "x" * (app_settings.max_tool_events_bytes - overhead)
    assert evaluate(client, ids, command)["decision"] == "PENDING"


# -- rules: list, delete, tenants ----------------------------------------------------------


def test_rules_are_listed_by_project_and_deleted(client, ids):
    user = ids["user_id"]
    first = add_rule(client, user, "^a", "ALLOW")
    second = add_rule(client, user, "^b", "BLOCK", project="global", tool="*")
    third = add_rule(client, user, "^c", "ALLOW", project="Other")
    assert second["project_id"] == "global" and second["tool_name"] == "*"
    assert uuid.UUID(first["id"]) and first["created_at"].endswith("Z")

    def listed(**query):
        response = client.get("/v1/permissions/rules", params={"user_id": user, **query})
        assert response.status_code == 200, response.text
        return [r["id"] for r in response.json()["rules"]]

    assert listed() == [first["id"], second["id"], third["id"]]
    assert listed(project_id="global") == [second["id"]]
    assert listed(project_id=PROJECT) == [first["id"]]
    assert listed(project_id="Nothing") == []

    assert evaluate(client, ids, "a1")["decision"] == "ALLOW"
    response = client.delete(f"/v1/permissions/rules/{first['id']}", params={"user_id": user})
    assert response.status_code == 200
    assert response.json() == {"id": first["id"], "deleted": True}
    # This process forgot its cached rules at once.
    assert evaluate(client, ids, "a1")["decision"] == "PENDING"
    assert listed() == [second["id"], third["id"]]

    again = client.delete(f"/v1/permissions/rules/{first['id']}", params={"user_id": user})
    assert again.status_code == 404
    assert client.delete("/v1/permissions/rules/nope", params={"user_id": user}).status_code == 404
    assert listed() == [second["id"], third["id"]]


def test_deleting_a_rule_needs_the_user_whose_rule_it_is(client, ids, pool):
    block = add_rule(client, ids["user_id"], "^rm ", "BLOCK")
    path = f"/v1/permissions/rules/{block['id']}"

    # The id alone (any key of the app could send it) deletes nothing.
    response = client.delete(path)
    assert field_of(response) == ["user_id"]
    assert error_of(response) == (
        "invalid_request",
        "user_id: Field required",
        [{"field": "user_id", "message": "Field required"}],
    )
    # Another user of the same app: as if the rule did not exist.
    other = client.delete(path, params={"user_id": f"{ids['user_id']}-other"})
    assert other.status_code == 404
    assert error_of(other) == ("not_found", f"no permission rule {block['id']}", None)
    assert field_of(client.delete(path, params={"user_id": ""})) == ["user_id"]
    assert stored_rules(pool, ids) == 1
    assert outcome(evaluate(client, ids, "rm -rf /")) == ("BLOCK", "project", block["id"])

    deleted = client.delete(path, params={"user_id": ids["user_id"]})
    assert deleted.status_code == 200
    assert deleted.json() == {"id": block["id"], "deleted": True}
    assert stored_rules(pool, ids) == 0
    assert outcome(evaluate(client, ids, "rm -rf /")) == ("PENDING", "none", None)


# -- rule limits -----------------------------------------------------------------------


def test_a_rule_set_one_re2_set_could_not_compile_still_blocks(client, ids):
    # Bounded repetitions of `.` cost some 900 RE2 instructions each: one Set of
    # every candidate (the guardrail's before) failed to compile from about 150
    # such rules on, and every call of the scope was PENDING, its BLOCKs too.
    project = [(rf"^deploy{i} .{{0,100}}--force", "ALLOW", PROJECT) for i in range(250)]
    block = (r"rm -rf .{0,100}/", "BLOCK", PROJECT)
    overall = [(rf"^release{i} .{{0,100}}--force", "ALLOW", "global") for i in range(250)]
    rules = [*project, block, *overall]
    one_set = re2.Set.SearchSet()
    for pattern, _, _ in rules:
        one_set.Add(pattern)
    with pytest.raises(re2.error, match="failed to compile Set"):
        one_set.Compile()

    made = [add_rule(client, ids["user_id"], p, a, project=where) for p, a, where in rules]

    assert outcome(evaluate(client, ids, "rm -rf --no-preserve-root /")) == (
        "BLOCK",
        "project",
        made[250]["id"],
    )
    assert outcome(evaluate(client, ids, "deploy0 --force")) == ("ALLOW", "project", made[0]["id"])
    assert outcome(evaluate(client, ids, "deploy249 now --force")) == (
        "ALLOW",
        "project",
        made[249]["id"],
    )
    # The last rule, in the last of the compiled Sets, is found too.
    assert outcome(evaluate(client, ids, "release249 x --force")) == (
        "ALLOW",
        "global",
        made[-1]["id"],
    )
    pending = evaluate(client, ids, "ls -la")
    assert (outcome(pending), pending["reason"]) == (
        ("PENDING", "none", None),
        "needs human confirmation: no rule matches",
    )


def test_a_scope_takes_at_most_1000_rules(client, ids, pool):
    fill(pool, ids, PROJECT, 999)
    block = add_rule(client, ids["user_id"], "^rm ", "BLOCK")  # the 1,000th

    response = client.post("/v1/permissions/rules", json=rule_body(ids, "^shutdown"))
    message = f"the user has 1000 rules for project {PROJECT}, at most 1000: delete some first"
    assert response.status_code == 422
    assert error_of(response) == (
        "invalid_request",
        f"project_id: {message}",
        [{"field": "project_id", "message": message}],
    )
    assert stored_rules(pool, ids, PROJECT) == 1000
    assert evaluate(client, ids, "shutdown now")["decision"] == "PENDING"
    # The full scope still decides.
    assert outcome(evaluate(client, ids, "rm -rf /")) == ("BLOCK", "project", block["id"])

    # Other scopes of the user have limits of their own.
    add_rule(client, ids["user_id"], "^shutdown", "BLOCK", project="global")
    add_rule(client, ids["user_id"], "^shutdown", "BLOCK", project="Other")
    # A place freed is a place again.
    deleted = client.delete(
        f"/v1/permissions/rules/{block['id']}", params={"user_id": ids["user_id"]}
    )
    assert deleted.status_code == 200
    add_rule(client, ids["user_id"], "^rm ", "BLOCK")
    assert stored_rules(pool, ids, PROJECT) == 1000
    assert stored_rules(pool, ids) == 1002


def test_concurrent_creations_cannot_pass_the_limit_together(app_settings, ids, pool):
    fill(pool, ids, PROJECT, 998)
    app = create_app(app_settings)

    async def race() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://api") as http,
        ):
            bodies = [rule_body(ids, f"^race{n}$") for n in range(8)]
            posts = [http.post("/v1/permissions/rules", json=b) for b in bodies]
            return [r.status_code for r in await asyncio.gather(*posts)]

    assert sorted(asyncio.run(race())) == [201, 201] + [422] * 6
    assert stored_rules(pool, ids, PROJECT) == 1000


@pytest.mark.parametrize(("pattern", "size"), [(".{0,1000}.{0,1000}", 18004), (r"\pL{1,9}", 10776)])
def test_a_pattern_too_complex_is_422(client, ids, pool, pattern, size):
    response = client.post("/v1/permissions/rules", json=rule_body(ids, pattern))
    assert field_of(response) == ["pattern"]
    assert response.json()["error"]["fields"][0]["message"] == (
        f"is too complex: its RE2 program has {size} instructions, at most 10000 "
        "(a bounded repetition such as .{0,100} costs about 9 instructions per repeat: "
        "prefer .*)"
    )
    assert stored_rules(pool, ids) == 0
    # At the limit's side of it: accepted.
    add_rule(client, ids["user_id"], ".{0,1000}x", "BLOCK")


def test_a_scope_too_complex_is_422_and_what_it_holds_still_decides(client, ids, pool):
    # Some 9,000 instructions each: 27 fit in a scope's 250,000, a 28th does not.
    made = [add_rule(client, ids["user_id"], f"x{n}.{{0,1000}}", "ALLOW") for n in range(27)]

    response = client.post("/v1/permissions/rules", json=rule_body(ids, "x27.{0,1000}"))
    assert field_of(response) == ["pattern"]
    message = response.json()["error"]["message"]
    prefix = (
        f"pattern: too complex for this scope: with it the user's rules for project {PROJECT} "
        "would need "
    )
    assert message.startswith(prefix), message
    needed, rest = message.removeprefix(prefix).split(" ", 1)
    assert int(needed) > 250_000
    assert rest == "RE2 program instructions, at most 250000"
    assert stored_rules(pool, ids) == 27

    # A simple rule still fits, and the whole set decides.
    block = add_rule(client, ids["user_id"], "^rm -rf", "BLOCK")
    assert outcome(evaluate(client, ids, "rm -rf x26")) == ("BLOCK", "project", block["id"])
    assert outcome(evaluate(client, ids, "echo x9 done")) == ("ALLOW", "project", made[9]["id"])
    # The global scope is another scope: the same pattern fits there.
    add_rule(client, ids["user_id"], "x27.{0,1000}", "ALLOW", project="global")


def test_another_app_neither_sees_nor_applies_this_apps_rules_and_grants(app_settings, ids):
    other_settings = app_settings.model_copy(update={"default_app": f"{ids['app']}-b"})
    with (
        TestClient(create_app(app_settings), raise_server_exceptions=False) as mine,
        TestClient(create_app(other_settings), raise_server_exceptions=False) as theirs,
    ):
        block = add_rule(mine, ids["user_id"], "^rm ", "BLOCK", project="global")
        grant(mine, ids, "shutdown now")

        assert outcome(evaluate(theirs, ids, "rm -rf /")) == ("PENDING", "none", None)
        assert outcome(evaluate(theirs, ids, "shutdown now")) == ("PENDING", "none", None)
        listed = theirs.get("/v1/permissions/rules", params={"user_id": ids["user_id"]})
        assert listed.json() == {"rules": []}
        deleted = theirs.delete(
            f"/v1/permissions/rules/{block['id']}", params={"user_id": ids["user_id"]}
        )
        assert deleted.status_code == 404

        assert outcome(evaluate(mine, ids, "rm -rf /")) == ("BLOCK", "global", block["id"])
        assert outcome(evaluate(mine, ids, "shutdown now")) == ("ALLOW", "allow_once", None)
