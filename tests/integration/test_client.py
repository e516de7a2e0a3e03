"""The Python client (`shared.client`) against the live API over real HTTP.

The real app runs under uvicorn in a thread, with API keys required; the
extraction worker's handlers run in process where a test needs the pipeline.
Retries are observed with a transport wrapper that passes requests to the real
API and replaces chosen answers (or raises a chosen transport error).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import httpx
import psycopg
import pytest

from services.dev.localstack.process import free_port
from shared.api_keys import create_key
from shared.client import (
    AsyncMemoryClient,
    AuthenticationError,
    GoneError,
    InvalidRequestError,
    MemoryApiError,
    MemoryClient,
    MemoryConnectionError,
    NotFoundError,
    OperationTimeoutError,
    PermissionDeniedError,
    ServiceUnavailableError,
)
from shared.embeddings import make_embedder
from shared.events import MemoriesGenerate, TurnRecorded
from shared.llm import OfflineLLM
from tests.bus_helpers import extraction_worker as worker_of
from tests.bus_helpers import inline_extraction, running
from tests.support import serve_api, wait_for

# -- the live API --------------------------------------------------------------------


@pytest.fixture
def api_settings(settings):
    return settings.model_copy(update={"auth_disabled": False, "auth_cache_seconds": 0})


@pytest.fixture
def keys(stack, ids):
    """A key of this test's app and an admin key of the same app."""
    with psycopg.connect(stack.database_url, autocommit=True) as conn:
        key, _ = create_key(conn, ids["app"])
        admin, _ = create_key(conn, ids["app"], admin=True)
    return {"app": key, "admin": admin}


@pytest.fixture
def base_url(api_settings, topology) -> Iterator[str]:
    """The real API on a free port, served by uvicorn in a thread."""
    with serve_api(api_settings) as url:
        yield url


@pytest.fixture
def client(base_url, keys) -> Iterator[MemoryClient]:
    with MemoryClient(base_url, api_key=keys["app"]) as c:
        yield c


@pytest.fixture
def extraction_worker(api_settings, publisher, pool) -> Iterator[None]:
    """The extraction worker's handlers (archive and generate), `offline` LLM."""
    extraction = inline_extraction(pool, OfflineLLM(), make_embedder(api_settings), api_settings)
    turns = {TurnRecorded: extraction.handle_turn}
    generate = {MemoriesGenerate: extraction.handle_generate}
    with (
        running(api_settings, "turns-extraction", turns, publisher),
        running(api_settings, "memory-generate-extraction", generate, publisher),
    ):
        yield


# -- a transport that loses answers --------------------------------------------------


def unavailable(request: httpx.Request) -> httpx.Response:
    """A 503 in the API's format, as record_turn answers when the publish fails."""
    error = {"code": "publish_failed", "message": "the request could not be published"}
    return httpx.Response(503, json={"error": error}, request=request)


class Interposer(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """The network to the real API, except for the requests that `match`: the first
    `failures` of them (all if None) get `fail(request)` (a response, or an
    exception to raise) instead of the API's answer. With `forward`, the request
    reaches the API first and only its answer is lost. `attempts` counts matches."""

    def __init__(
        self,
        match: Callable[[httpx.Request], bool],
        fail: Callable[[httpx.Request], httpx.Response | Exception] = unavailable,
        failures: int | None = None,
        forward: bool = False,
    ) -> None:
        self.match, self.fail, self.failures, self.forward = match, fail, failures, forward
        self.attempts: list[httpx.Request] = []
        self.network = httpx.HTTPTransport()
        self.async_network = httpx.AsyncHTTPTransport()

    def _fails(self, request: httpx.Request) -> bool:
        if not self.match(request):
            return False
        self.attempts.append(request)
        return self.failures is None or len(self.attempts) <= self.failures

    def _failure(self, request: httpx.Request) -> httpx.Response:
        outcome = self.fail(request)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not self._fails(request):
            return self.network.handle_request(request)
        if self.forward:
            lost = self.network.handle_request(request)
            lost.read()
            lost.close()
        return self._failure(request)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not self._fails(request):
            return await self.async_network.handle_async_request(request)
        if self.forward:
            lost = await self.async_network.handle_async_request(request)
            await lost.aread()
            await lost.aclose()
        return self._failure(request)

    def close(self) -> None:
        self.network.close()

    async def aclose(self) -> None:
        await self.async_network.aclose()

    def bodies(self) -> list[dict]:
        return [json.loads(r.content) for r in self.attempts]


def route(method: str, path: str) -> Callable[[httpx.Request], bool]:
    return lambda request: request.method == method and request.url.path == path


# -- every method of MemoryClient ----------------------------------------------------


def test_turns_sessions_and_context(client, ids):
    user, session = ids["user_id"], ids["session_id"]
    first = client.record_turn(
        session,
        user,
        "I prefer oolong tea.",
        "Noted.",
        tool_events=[{"name": "lookup", "arguments": {"q": "tea"}, "output": "oolong"}],
    )
    assert uuid.UUID(first.turn_id) and uuid.UUID(first.event_id)
    assert first.buffered is True
    # Turns are kept in created_at order: this one comes after the first.
    created = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=1)
    second = client.record_turn(
        session, user, "And biscuits.", "Sure.", turn_id="turn-2", created_at=created
    )
    assert second.turn_id == "turn-2" and second.event_id != first.event_id
    # The same turn_id again is the same event: still two turns.
    again = client.record_turn(session, user, "And biscuits.", "Sure.", turn_id="turn-2")
    assert again.event_id == second.event_id

    view = client.session(session, user)
    assert (view.session_id, view.user_id, view.prev_session_id) == (session, user, None)
    assert [(t.turn_id, t.user, t.assistant) for t in view.turns] == [
        (first.turn_id, "I prefer oolong tea.", "Noted."),
        ("turn-2", "And biscuits.", "Sure."),
    ]
    assert view.turns[1].created_at == created
    assert (view.turn_count, view.turns_total, view.folded_turn_count) == (2, 2, 0)
    assert (view.summary.text, view.summary.version, view.carried_summary) == ("", 0, None)
    assert view.folds == []

    context = client.context(user, session, "what do I drink?", k=5, token_budget=2000)
    assert [t.turn_id for t in context.recent_turns] == [first.turn_id, "turn-2"]
    assert "User: I prefer oolong tea.\nAssistant: Noted." in context.system_instruction
    assert context.rolling_summary is None and context.carried_summary is None
    assert (context.pinned_rules, context.memories, context.degraded) == ([], [], [])
    assert context.omitted == {}  # everything fitted
    assert 0 < context.tokens <= 2000

    deleted = client.delete_session(session, user)
    assert deleted.session_id == session and deleted.deleted_keys > 0
    assert client.session(session, user).turns == []
    assert client.context(user, session, "tea").recent_turns == []


def test_memories_write_search_list_and_delete(client, ids):
    user = ids["user_id"]
    dark = client.write_memory(
        user, "User prefers Dark Mode UI.", kind="preference", entity_name="ui theme"
    )
    assert dark.action == "CREATED" and dark.memory is not None
    assert (dark.memory.scope, dark.memory.kind, dark.memory.text) == (
        "global",
        "preference",
        "User prefers Dark Mode UI.",
    )
    memory_id = dark.memory.id
    same = client.write_memory(
        user, "User prefers Dark Mode UI.", kind="preference", entity_name="ui theme"
    )
    assert same.action == "NONE" and same.memory is not None and same.memory.id == memory_id
    light = client.write_memory(
        user, "User prefers Light Mode UI.", kind="preference", entity_name="ui theme"
    )
    assert light.action == "UPDATED" and light.memory is not None
    assert (light.memory.id, light.memory.text) == (memory_id, "User prefers Light Mode UI.")
    project = client.write_memory(
        user,
        "The Alpha service runs on Cloud Run.",
        scope="project",
        project_id="Alpha",
        entity_name="alpha hosting",
        consolidate=False,
    )
    assert project.action == "CREATED" and project.memory is not None
    assert (project.memory.scope, project.memory.kind, project.memory.project_id) == (
        "project",
        "fact",
        "Alpha",
    )
    project_id = project.memory.id

    detail = client.get_memory(user, memory_id)
    assert detail.text == "User prefers Light Mode UI." and detail.deleted_at is None
    assert [(r.action, r.old_text, r.new_text, r.applied) for r in detail.revisions] == [
        ("CREATED", None, "User prefers Dark Mode UI.", True),
        ("UPDATED", "User prefers Dark Mode UI.", "User prefers Light Mode UI.", True),
    ]

    found = client.search(user, "Light Mode UI")
    assert [m.id for m in found] == [memory_id]  # without a project: global memories only
    assert found[0].score > 0 and "text" in found[0].rankers
    in_alpha = client.search(user, "Cloud Run hosting", project_id="Alpha", k=5)
    assert {m.id for m in in_alpha} == {memory_id, project_id}
    assert in_alpha[0].id == project_id
    facts = client.search(user, "Cloud Run", project_id="Alpha", kinds=["fact"])
    assert [m.id for m in facts] == [project_id]
    assert [m.id for m in client.search(user, "Light Mode", decompose=True)] == [memory_id]

    page = client.list_memories(user, limit=1)
    assert [m.id for m in page.memories] == [memory_id] and page.next_cursor is not None
    rest = client.list_memories(user, limit=1, cursor=page.next_cursor)
    assert [m.id for m in rest.memories] == [project_id] and rest.next_cursor is None
    assert [m.id for m in client.iter_memories(user, limit=1)] == [memory_id, project_id]
    only_project = client.list_memories(user, project_id="Alpha", scope="project", kind="fact")
    assert [m.id for m in only_project.memories] == [project_id]

    retired = client.delete_memories(user, "Cloud Run", project_id="Alpha")
    assert [m.id for m in retired] == [project_id] and retired[0].deleted_at is not None
    assert client.delete_memories(user, "Cloud Run") == []  # global memories only: none match

    gone = client.delete_memory(user, memory_id)
    assert (gone.memory_id, gone.deleted) == (memory_id, True)
    assert client.get_memory(user, memory_id).deleted_at is not None
    assert list(client.iter_memories(user)) == []
    with pytest.raises(NotFoundError) as missing:
        client.delete_memory(user, memory_id)
    assert missing.value.status == 404 and missing.value.code == "not_found"
    assert missing.value.message == f"no live memory {memory_id} for this user"


def test_archive_search_generate_and_operations(client, ids, extraction_worker):
    user, session = ids["user_id"], ids["session_id"]
    turn = client.record_turn(session, user, "My dog is a beagle named Pixel.", "What a name!")

    episodes = wait_for(
        lambda: client.archive_search(user, "beagle named Pixel", k=3), 30, "the archived turn"
    )
    assert [(e.turn_id, e.session_id, e.project_id) for e in episodes] == [
        (turn.turn_id, session, None)
    ]
    assert "beagle named Pixel" in episodes[0].text and episodes[0].score > 0
    assert client.archive_search(user, "beagle", before=datetime(2000, 1, 1, tzinfo=UTC)) == []
    assert len(client.archive_search(user, "beagle", after="2000-01-01T00:00:00Z")) == 1
    # The session holds one turn: nothing around the hit.
    [alone] = client.archive_search(user, "beagle", context_turns=2)
    assert alone.turn_id == turn.turn_id and alone.context == []

    events = [
        ("user", "For project CloudRetail, the region is us-east1."),
        {"role": "model", "text": "Understood."},
    ]
    started = client.generate(user, events, project_id="CloudRetail")
    assert started.name.startswith("operations/generate-") and started.done is False
    done = client.wait_operation(user, started.name, timeout=30)
    assert done.done is True and done.error is None
    assert done.generated_memories is not None
    [generated] = done.generated_memories
    assert generated.action == "CREATED"
    assert (generated.memory.scope, generated.memory.project_id) == ("project", "CloudRetail")
    assert "us-east1" in generated.memory.text
    assert client.operation(user, started.name) == done
    # The short name (without "operations/") names it too.
    assert client.operation(user, started.name.removeprefix("operations/")) == done

    waited = client.generate(user, events, project_id="CloudRetail", wait=True)
    assert (waited.done, waited.generated_memories) == (True, [])  # a duplicate


def test_wait_operation_gives_up_at_its_deadline(client, ids):
    # No worker consumes the request here: the operation stays not done.
    started = client.generate(ids["user_id"], [("user", "I live in Lisbon.")])
    with pytest.raises(OperationTimeoutError) as timed_out:
        client.wait_operation(ids["user_id"], started.name, timeout=0.5, interval=0.1)
    assert isinstance(timed_out.value, TimeoutError)
    assert str(timed_out.value) == f"operation {started.name} was not done within 0.5 s"


def test_permissions(client, ids):
    user, session = ids["user_id"], ids["session_id"]
    rm = {"CommandLine": "rm -rf /tmp/data"}
    pending = client.evaluate_permission(user, session, "run_shell", rm)
    assert (pending.decision, pending.tier, pending.rule_id) == ("PENDING", "none", None)
    exempt = client.evaluate_permission(user, session, "search_archived_memory", {"q": "x"})
    assert (exempt.decision, exempt.tier) == ("ALLOW", "exempt")

    block = client.add_rule(user, "run_shell", r"^rm -rf", "BLOCK")
    assert (block.user_id, block.project_id, block.tool_name, block.pattern, block.action) == (
        user,
        "global",
        "run_shell",
        r"^rm -rf",
        "BLOCK",
    )
    allow = client.add_rule(user, "*", r"^ls\b", "ALLOW", project_id="P")
    assert (allow.project_id, allow.tool_name) == ("P", "*")

    blocked = client.evaluate_permission(user, session, "run_shell", rm, project_id="P")
    assert (blocked.decision, blocked.tier, blocked.rule_id) == ("BLOCK", "global", block.id)
    listed = client.evaluate_permission(
        user, session, "run_shell", {"CommandLine": "ls -l"}, project_id="P"
    )
    assert (listed.decision, listed.tier, listed.rule_id) == ("ALLOW", "project", allow.id)

    deploy = {"CommandLine": "make deploy"}
    grant = client.grant_once(user, session, "run_shell", deploy, ttl_seconds=60)
    assert (grant.user_id, grant.session_id, grant.tool_name, grant.command) == (
        user,
        session,
        "run_shell",
        "make deploy",
    )
    assert timedelta(seconds=50) < grant.expires_at - datetime.now(UTC) <= timedelta(seconds=61)
    once = client.evaluate_permission(user, session, "run_shell", deploy)
    assert (once.decision, once.tier) == ("ALLOW", "allow_once")
    after = client.evaluate_permission(user, session, "run_shell", deploy)
    assert (after.decision, after.tier) == ("PENDING", "none")  # the grant was used

    assert [r.id for r in client.rules(user)] == [block.id, allow.id]
    assert [r.id for r in client.rules(user, project_id="global")] == [block.id]
    assert [r.id for r in client.rules(user, project_id="P")] == [allow.id]
    removed = client.delete_rule(allow.id, user_id=user)
    assert (removed.id, removed.deleted) == (allow.id, True)
    with pytest.raises(NotFoundError):
        client.delete_rule(allow.id, user_id=user)
    assert [r.id for r in client.rules(user)] == [block.id]

    with pytest.raises(InvalidRequestError) as bad:
        client.add_rule(user, "run_shell", r"(a)\1", "BLOCK")
    assert [f["field"] for f in bad.value.fields] == ["pattern"]
    assert str(bad.value).startswith("422 invalid_request: pattern: ")


def test_deletions_compaction_and_health(client, base_url, keys, ids):
    user = ids["user_id"]
    client.write_memory(
        user, "The P service uses Go.", scope="project", project_id="P", entity_name="language"
    )
    client.write_memory(user, "User likes green tea.", kind="preference", entity_name="drink")
    client.add_rule(user, "run_shell", "^go test", "ALLOW", project_id="P")

    project = client.delete_project(user, "P")
    assert (project.user_id, project.project_id, project.deleted_at) == (user, "P", None)
    assert project.deleted == {
        "memory_revisions": 1,
        "memory_feedback": 0,
        "entities": 2,  # "P" and "Go", the project's
        "memories": 1,
        "episodes": 0,
        "extraction_pending": 0,
        "permission_rules": 1,
        "valkey_keys": 0,  # no session of this user had a turn of P
    }
    assert [m.text for m in client.iter_memories(user)] == ["User likes green tea."]

    deleted = client.delete_user(user)
    assert (deleted.user_id, deleted.project_id) == (user, None)
    assert deleted.deleted == {
        "entities": 0,
        "memory_revisions": 1,
        "memory_feedback": 0,
        "memories": 1,
        "episodes": 0,
        "extraction_pending": 0,
        "extraction_flushes": 0,
        "permission_rules": 0,
        "operations": 0,
        "profile_revisions": 0,
        "profile_values": 0,
        "valkey_keys": 0,
    }
    assert deleted.deleted_at is not None
    assert client.delete_user(user).deleted["memories"] == 0  # repeating it is safe
    # A turn created before the deletion is not recorded: 410, naming created_at.
    with pytest.raises(GoneError) as gone:
        client.record_turn(
            ids["session_id"],
            user,
            "late",
            "turn",
            created_at=deleted.deleted_at - timedelta(seconds=1),
        )
    assert (gone.value.status, gone.value.code) == (410, "user_deleted")
    assert [f["field"] for f in gone.value.fields] == ["created_at"]

    with pytest.raises(PermissionDeniedError) as refused:
        client.request_compaction(user)
    assert refused.value.message == "compaction needs an admin key of this app"
    with MemoryClient(base_url, api_key=keys["admin"]) as admin:
        accepted = admin.request_compaction(user, project_id="P", retention_days=7, batch_limit=5)
    assert uuid.UUID(accepted.event_id)
    assert (accepted.user_id, accepted.project_id) == (user, "P")
    assert (accepted.retention_days, accepted.batch_limit) == (7, 5)

    assert client.health() == {"status": "ok"}
    assert client.ready() == {"status": "ready", "down": []}


# -- errors --------------------------------------------------------------------------


def test_errors_carry_the_api_message(base_url, client, ids):
    with MemoryClient(base_url, api_key="am_" + "x" * 43) as stranger:
        with pytest.raises(AuthenticationError) as wrong:
            stranger.list_memories(ids["user_id"])
        assert stranger.health() == {"status": "ok"}  # health checks need no key
    assert (wrong.value.status, wrong.value.code) == (401, "unauthenticated")
    assert str(wrong.value) == "401 unauthenticated: invalid or revoked API key"
    with MemoryClient(base_url) as anonymous, pytest.raises(AuthenticationError) as missing:
        anonymous.search(ids["user_id"], "tea")
    assert missing.value.message.startswith("missing API key")

    with pytest.raises(InvalidRequestError) as bad:
        client.search(ids["user_id"], "tea", k=0)
    assert bad.value.status == 422 and bad.value.code == "invalid_request"
    assert [f["field"] for f in bad.value.fields] == ["k"]
    assert str(bad.value).startswith("422 invalid_request: k: ")

    unknown = str(uuid.uuid4())
    with pytest.raises(NotFoundError) as missing_memory:
        client.get_memory(ids["user_id"], unknown)
    assert str(missing_memory.value) == f"404 not_found: no memory {unknown} for this user"
    with pytest.raises(NotFoundError):
        client.operation(ids["user_id"], f"operations/generate-{unknown}")


def test_an_unreachable_api_is_a_connection_error():
    # Nothing listens there: every attempt is refused, then the client gives up.
    with MemoryClient(f"http://127.0.0.1:{free_port()}", retries=2) as nowhere:
        with pytest.raises(MemoryConnectionError) as refused:
            nowhere.health()
        assert "after 3 attempt(s): ConnectError" in str(refused.value)
        with pytest.raises(MemoryConnectionError) as write:
            nowhere.write_memory("u", "text")  # never sent: retried as well
        assert "after 3 attempt(s)" in str(write.value)


# -- retries -------------------------------------------------------------------------


def test_record_turn_is_retried_after_a_503_and_stays_one_turn(base_url, keys, ids):
    user, session = ids["user_id"], ids["session_id"]
    path = f"/v1/sessions/{session}/turns"
    # The first attempt reaches the API (buffered, published); its answer is lost.
    lossy = Interposer(route("POST", path), failures=1, forward=True)
    with MemoryClient(base_url, api_key=keys["app"], transport=lossy) as client:
        recorded = client.record_turn(session, user, "I prefer oolong tea.", "Noted.")
        view = client.session(session, user)
    first, second = lossy.bodies()
    assert first == second and first["turn_id"] == recorded.turn_id
    assert [t.turn_id for t in view.turns] == [recorded.turn_id]
    assert view.turns_total == 1


def test_a_503s_retry_after_is_waited_for_and_a_long_one_ends_the_retries(base_url, keys, ids):
    user, session = ids["user_id"], ids["session_id"]
    path = f"/v1/sessions/{session}/turns"

    def full(seconds: str) -> Callable[[httpx.Request], httpx.Response]:
        def answer(request: httpx.Request) -> httpx.Response:
            error = {"code": "valkey_full", "message": "the session store is full"}
            headers = {"Retry-After": seconds}
            return httpx.Response(503, json={"error": error}, headers=headers, request=request)

        return answer

    brief = Interposer(route("POST", path), fail=full("0.4"), failures=1)
    with MemoryClient(base_url, api_key=keys["app"], transport=brief) as client:
        started = time.monotonic()
        client.record_turn(session, user, "I prefer oolong tea.", "Noted.")
        assert time.monotonic() - started >= 0.4
    assert len(brief.attempts) == 2

    long = Interposer(route("POST", path), fail=full("60"))
    with (
        MemoryClient(base_url, api_key=keys["app"], transport=long) as client,
        pytest.raises(ServiceUnavailableError) as refused,
    ):
        client.record_turn(session, user, "And green tea.", "Noted.")
    assert refused.value.retry_after == 60.0 and refused.value.code == "valkey_full"
    assert len(long.attempts) == 1


def test_writes_are_not_retried_but_reads_are(base_url, keys, ids):
    user = ids["user_id"]
    lossy = Interposer(route("POST", "/v1/memories"), forward=True)
    with MemoryClient(base_url, api_key=keys["app"], transport=lossy) as client:
        with pytest.raises(ServiceUnavailableError) as lost:
            client.write_memory(user, "User likes green tea.")
        assert str(lost.value) == "503 publish_failed: the request could not be published"
        assert len(lossy.attempts) == 1
        # The write was applied once; a retry would have written again.
        assert [m.text for m in client.iter_memories(user)] == ["User likes green tea."]

    down = Interposer(route("POST", "/v1/memories:search"))
    with (
        MemoryClient(base_url, api_key=keys["app"], retries=2, transport=down) as client,
        pytest.raises(ServiceUnavailableError),
    ):
        client.search(user, "tea")
    assert len(down.attempts) == 3

    # An answer lost in transit (the request was sent): a read is sent again, a write not.
    def reset(request: httpx.Request) -> Exception:
        return httpx.ReadError("connection reset", request=request)

    for path, call, attempts in [
        ("/v1/memories:search", lambda c: c.search(user, "tea"), 2),
        ("/v1/permissions:evaluate", lambda c: c.evaluate_permission(user, "s", "t", {}), 1),
    ]:
        flaky = Interposer(route("POST", path), fail=reset, failures=1)
        with MemoryClient(base_url, api_key=keys["app"], transport=flaky) as client:
            if attempts == 1:
                with pytest.raises(MemoryConnectionError):
                    call(client)
            else:
                call(client)
        assert len(flaky.attempts) == attempts, path

    # A failed connect never sent anything: even a write is sent again.
    def refused(request: httpx.Request) -> Exception:
        return httpx.ConnectError("connection refused", request=request)

    unsent = Interposer(route("POST", "/v1/memories"), fail=refused, failures=1)
    with MemoryClient(base_url, api_key=keys["app"], transport=unsent) as client:
        written = client.write_memory(user, "User likes black coffee.", entity_name="coffee")
    assert written.action == "CREATED" and len(unsent.attempts) == 2

    # An edit whose answer is lost is sent again (the same edit changes nothing), but
    # not one with `ttl_seconds`: counted from each attempt, it would move the expiry.
    edited = written.memory
    assert edited is not None
    path = f"/v1/memories/{edited.id}"
    for ttl, attempts, revisions in ((None, 2, 2), (3600, 1, 3)):
        flaky = Interposer(route("PATCH", path), fail=reset, failures=1, forward=True)
        with MemoryClient(base_url, api_key=keys["app"], transport=flaky) as client:
            if ttl is None:
                client.edit_memory(user, edited.id, text="User likes strong black coffee.")
            else:
                with pytest.raises(MemoryConnectionError):
                    client.edit_memory(user, edited.id, ttl_seconds=ttl)
            assert len(client.get_memory(user, edited.id).revisions) == revisions
        assert len(flaky.attempts) == attempts, ttl

    # /readyz's 503 is an answer (what is down), not an error, and not retried.
    def not_ready(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, json={"status": "unavailable", "down": ["pubsub"]})

    probe = Interposer(route("GET", "/readyz"), fail=not_ready)
    with MemoryClient(base_url, transport=probe) as client:
        assert client.ready() == {"status": "unavailable", "down": ["pubsub"]}
    assert len(probe.attempts) == 1


def test_an_answer_in_another_format_is_still_a_typed_error(base_url, keys, ids):
    def proxy_page(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, text="<html>Bad Gateway</html>")

    gateway = Interposer(route("GET", "/v1/memories"), fail=proxy_page)
    with (
        MemoryClient(base_url, api_key=keys["app"], retries=1, transport=gateway) as client,
        pytest.raises(ServiceUnavailableError) as bad,
    ):
        client.list_memories(ids["user_id"])
    assert (bad.value.status, bad.value.code) == (502, "http_error")
    assert bad.value.message == "<html>Bad Gateway</html>"
    assert isinstance(bad.value, MemoryApiError) and len(gateway.attempts) == 2


# -- AsyncMemoryClient ---------------------------------------------------------------


def test_the_async_client(base_url, keys, ids):
    user, session = ids["user_id"], ids["session_id"]
    path = f"/v1/sessions/{session}/turns"

    async def scenario() -> None:
        lossy = Interposer(route("POST", path), failures=1, forward=True)
        async with AsyncMemoryClient(base_url, api_key=keys["app"], transport=lossy) as client:
            assert await client.health() == {"status": "ok"}
            assert await client.ready() == {"status": "ready", "down": []}
            turn = await client.record_turn(session, user, "I prefer oolong tea.", "Noted.")
            assert len(lossy.attempts) == 2  # the lost answer, then the retry
            view = await client.session(session, user)
            assert [t.turn_id for t in view.turns] == [turn.turn_id]

            written = await client.write_memory(
                user, "User prefers oolong tea.", kind="preference", entity_name="drink"
            )
            assert written.action == "CREATED" and written.memory is not None
            memory_id = written.memory.id
            found = await client.search(user, "oolong tea")
            assert [m.id for m in found] == [memory_id]
            context = await client.context(user, session, "what do I drink?")
            assert [m.id for m in context.memories] == [memory_id]
            assert [t.turn_id for t in context.recent_turns] == [turn.turn_id]
            page = await client.list_memories(user)
            assert [m.id for m in page.memories] == [memory_id] and page.next_cursor is None
            assert [m.id async for m in client.iter_memories(user, limit=1)] == [memory_id]
            detail = await client.get_memory(user, memory_id)
            assert [r.action for r in detail.revisions] == ["CREATED"]

            verdict = await client.evaluate_permission(
                user, session, "run_shell", {"CommandLine": "rm -rf /tmp/data"}
            )
            assert (verdict.decision, verdict.tier) == ("PENDING", "none")
            rule = await client.add_rule(user, "run_shell", "^rm ", "BLOCK")
            assert [r.id for r in await client.rules(user)] == [rule.id]

            with pytest.raises(InvalidRequestError) as bad:
                await client.context(user, session, "x", token_budget=5)
            assert [f["field"] for f in bad.value.fields] == ["token_budget"]
            with pytest.raises(NotFoundError):
                await client.get_memory(user, str(uuid.uuid4()))

            deleted = await client.delete_user(user)
            assert deleted.deleted["memories"] == 1 and deleted.deleted["permission_rules"] == 1
            assert deleted.deleted["valkey_keys"] > 0  # the session's keys
            assert (await client.list_memories(user)).memories == []
        async with AsyncMemoryClient(base_url, api_key="am_" + "y" * 43) as stranger:
            with pytest.raises(AuthenticationError) as wrong:
                await stranger.list_memories(user)
            assert (await stranger.health()) == {"status": "ok"}
        assert wrong.value.message == "invalid or revoked API key"

    asyncio.run(scenario())


def test_flush_session_extracts_the_sessions_waiting_turns_now(
    api_settings, client, publisher, pool, ids
):
    local = api_settings.model_copy(
        update={"extraction_window_turns": 10, "extraction_window_seconds": 120.0}
    )
    user, session = ids["user_id"], ids["session_id"]
    with worker_of(local, pool, OfflineLLM(), make_embedder(local), publisher):
        client.record_turn(session, user, "My editor is vim.", "Noted.")
        client.record_turn(session, user, "I prefer tabs over spaces.", "Noted.")
        with pool.connection() as conn:
            waiting = "SELECT count(*) FROM extraction_pending WHERE user_id = %s"
            wait_for(
                lambda: conn.execute(waiting, (user,)).fetchone()[0] == 2, 30, "two turns waiting"
            )
        flushed = client.flush_session(session, user)
        assert flushed.session_id == session
        # A window of ten turns with two minutes to wait: only the flush closes it now.
        texts = wait_for(
            lambda: sorted(m.text for m in client.iter_memories(user)) or None, 20, "the memories"
        )
    assert texts == ["User prefers tabs over spaces.", "User's editor is vim."]


def test_entities_through_the_client(client, ids):
    user = ids["user_id"]
    written = client.write_memory(user, "Dana Lee works at Acme Corp.", scope="global", kind="fact")
    page = client.list_entities(user)
    assert [(e.name, e.kind, e.memories) for e in page.entities] == [
        ("Acme Corp", "organisation", 1),
        ("Dana Lee", "person", 1),
    ]
    dana = client.get_entity(user, page.entities[1].id)
    assert [(f.subject, f.predicate, f.object) for f in dana.facts] == [
        ("Dana Lee", "employer", "Acme Corp")
    ]
    assert [m.id for m in dana.memories_mentioning] == [written.memory.id]
    # Before anything was said, nothing was true.
    assert client.list_entities(user, as_of="2000-01-01T00:00:00Z").entities == []
    assert client.list_memories(user, as_of="2000-01-01T00:00:00Z").memories == []
    assert client.search(user, "Dana", as_of="2000-01-01T00:00:00Z") == []
    with pytest.raises(NotFoundError):
        client.get_entity(f"{user}-other", dana.id)
