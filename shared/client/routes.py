"""The API's routes as `Call` builders: one function per route, shared by both clients.

Each builds the path (identifiers escaped), the query or the body without the
options left unset (the server applies its own defaults), whether the call is
safe to repeat, and how to read its answer. The clients hold the defaults and
the docs; these take every argument explicitly.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import quote

from pydantic import BaseModel

from shared.client import models as m
from shared.client.call import Call

M = TypeVar("M", bound=BaseModel)

# How much longer than the client's timeout `memories:generate` with wait may take:
# the server holds the answer up to AM_OPERATION_WAIT_SECONDS (30 s by default).
GENERATE_WAIT_ALLOWANCE = 60.0

Event = Mapping[str, str] | tuple[str, str]


def _seg(value: str) -> str:
    """One path segment: an identifier may hold `/`, `?`, `#` or `%`."""
    return quote(value, safe="")


def _present(**values: Any) -> dict[str, Any]:
    """The options that are set: an unset one takes the server's default."""
    return {k: v for k, v in values.items() if v is not None}


def _time(value: datetime | str | None) -> str | None:
    """RFC 3339 (a naive datetime is taken as UTC by the API)."""
    return value.isoformat() if isinstance(value, datetime) else value


def _one(model: type[M]) -> Any:
    return model.model_validate


def _list(model: type[M], key: str) -> Any:
    return lambda body: [model.model_validate(item) for item in body[key]]


def _events(events: Iterable[Event]) -> list[dict[str, str]]:
    """`{role, text}` mappings or `(role, text)` pairs, as the API's events."""
    out = []
    for event in events:
        if isinstance(event, Mapping):
            out.append({"role": event["role"], "text": event["text"]})
        else:
            role, text = event
            out.append({"role": role, "text": text})
    return out


# -- sessions ----------------------------------------------------------------------


def record_turn(
    session_id: str,
    user_id: str,
    user: str,
    assistant: str,
    *,
    project_id: str | None,
    prev_session_id: str | None,
    turn_id: str | None,
    created_at: datetime | str | None,
    tool_events: Sequence[Mapping[str, Any]] | None,
) -> Call[m.RecordedTurn]:
    # The turn_id is fixed here, before the first attempt: the same turn_id is
    # always the same event and one turn, which is what makes the retry safe.
    body: dict[str, Any] = {"user_id": user_id, "user": user, "assistant": assistant}
    body |= _present(
        project_id=project_id,
        prev_session_id=prev_session_id,
        turn_id=turn_id or str(uuid.uuid4()),
        created_at=_time(created_at),
        tool_events=[dict(t) for t in tool_events] if tool_events else None,
    )
    path = f"/v1/sessions/{_seg(session_id)}/turns"
    return Call("POST", path, _one(m.RecordedTurn), json=body, retry_safe=True)


def session(session_id: str, user_id: str) -> Call[m.SessionView]:
    path = f"/v1/sessions/{_seg(session_id)}"
    return Call("GET", path, _one(m.SessionView), params={"user_id": user_id}, retry_safe=True)


def flush_session(session_id: str, user_id: str) -> Call[m.FlushedSession]:
    # A second flush is harmless: it finds less, or nothing, to extract.
    path = f"/v1/sessions/{_seg(session_id)}:flush"
    body = {"user_id": user_id}
    return Call("POST", path, _one(m.FlushedSession), json=body, retry_safe=True)


def delete_session(session_id: str, user_id: str) -> Call[m.DeletedSession]:
    path = f"/v1/sessions/{_seg(session_id)}"
    params = {"user_id": user_id}
    return Call("DELETE", path, _one(m.DeletedSession), params=params, retry_safe=True)


# -- reads -------------------------------------------------------------------------


def context(
    user_id: str,
    session_id: str,
    query: str,
    *,
    project_id: str | None,
    prev_session_id: str | None,
    k: int | None,
    token_budget: int | None,
) -> Call[m.Context]:
    body: dict[str, Any] = {"user_id": user_id, "session_id": session_id, "query": query}
    body |= _present(
        project_id=project_id, prev_session_id=prev_session_id, k=k, token_budget=token_budget
    )
    return Call("POST", "/v1/context", _one(m.Context), json=body, retry_safe=True)


def search(
    user_id: str,
    query: str,
    *,
    project_id: str | None,
    k: int | None,
    kinds: Sequence[str] | None,
    decompose: bool,
) -> Call[list[m.ScoredMemory]]:
    body: dict[str, Any] = {"user_id": user_id, "query": query, "decompose": decompose}
    body |= _present(project_id=project_id, k=k, kinds=list(kinds) if kinds is not None else None)
    parse = _list(m.ScoredMemory, "memories")
    return Call("POST", "/v1/memories:search", parse, json=body, retry_safe=True)


def archive_search(
    user_id: str,
    query: str,
    *,
    project_id: str | None,
    k: int | None,
    before: datetime | str | None,
    after: datetime | str | None,
    context_turns: int | None,
    read_period: bool | None,
    asked_at: datetime | str | None,
) -> Call[list[m.Episode]]:
    body: dict[str, Any] = {"user_id": user_id, "query": query}
    body |= _present(
        project_id=project_id,
        k=k,
        before=_time(before),
        after=_time(after),
        context_turns=context_turns,
        read_period=read_period,
        asked_at=_time(asked_at),
    )
    parse = _list(m.Episode, "episodes")
    return Call("POST", "/v1/archive:search", parse, json=body, retry_safe=True)


# -- memories ----------------------------------------------------------------------


def list_memories(
    user_id: str,
    *,
    project_id: str | None,
    scope: str | None,
    kind: str | None,
    limit: int | None,
    cursor: str | None,
    topic: str | None = None,
) -> Call[m.MemoryPage]:
    params: dict[str, Any] = {"user_id": user_id}
    params |= _present(
        project_id=project_id, scope=scope, kind=kind, limit=limit, cursor=cursor, topic=topic
    )
    return Call("GET", "/v1/memories", _one(m.MemoryPage), params=params, retry_safe=True)


def get_memory(user_id: str, memory_id: str) -> Call[m.MemoryDetail]:
    path = f"/v1/memories/{_seg(memory_id)}"
    params = {"user_id": user_id}
    return Call("GET", path, _one(m.MemoryDetail), params=params, retry_safe=True)


def write_memory(
    user_id: str,
    text: str,
    *,
    scope: str,
    kind: str,
    project_id: str | None,
    session_id: str | None,
    entity_name: str,
    consolidate: bool,
    expire_at: datetime | str | None = None,
    ttl_seconds: int | None = None,
) -> Call[m.WriteResult]:
    body: dict[str, Any] = {"user_id": user_id, "text": text, "scope": scope, "kind": kind}
    body |= _present(
        project_id=project_id,
        session_id=session_id,
        entity_name=entity_name,
        consolidate=consolidate,
        expire_at=_time(expire_at),
        ttl_seconds=ttl_seconds,
    )
    return Call("POST", "/v1/memories", _one(m.WriteResult), json=body)


def delete_memory(user_id: str, memory_id: str) -> Call[m.DeletedMemory]:
    path = f"/v1/memories/{_seg(memory_id)}"
    params = {"user_id": user_id}
    return Call("DELETE", path, _one(m.DeletedMemory), params=params, retry_safe=True)


def rollback_memory(user_id: str, memory_id: str, revision: int) -> Call[m.MemoryDetail]:
    # Not retried: after a lost answer, a second attempt finds the text current (409).
    path = f"/v1/memories/{_seg(memory_id)}:rollback"
    body = {"user_id": user_id, "revision": revision}
    return Call("POST", path, _one(m.MemoryDetail), json=body)


def delete_memories(user_id: str, query: str, *, project_id: str | None) -> Call[list[m.Memory]]:
    # Not retried: a second attempt after a lost answer would find nothing left to
    # delete and answer an empty list, hiding what the first one deleted.
    body = {"user_id": user_id, "query": query} | _present(project_id=project_id)
    return Call("POST", "/v1/memories:delete", _list(m.Memory, "deleted"), json=body)


def generate(
    user_id: str,
    events: Iterable[Event],
    *,
    project_id: str | None,
    session_id: str | None,
    wait: bool,
) -> Call[m.Operation]:
    body = {
        "user_id": user_id,
        "scope": _present(project_id=project_id, session_id=session_id),
        "events": _events(events),
        "wait": wait,
    }
    allowance = GENERATE_WAIT_ALLOWANCE if wait else 0.0
    parse = _one(m.Operation)
    return Call("POST", "/v1/memories:generate", parse, json=body, read_allowance=allowance)


def operation(user_id: str, name: str) -> Call[m.Operation]:
    # The API takes the name with or without its "operations/" prefix.
    path = f"/v1/operations/{_seg(name.removeprefix('operations/'))}"
    params = {"user_id": user_id}
    return Call("GET", path, _one(m.Operation), params=params, retry_safe=True)


# -- permissions -------------------------------------------------------------------


def evaluate_permission(
    user_id: str,
    session_id: str,
    tool_name: str,
    tool_args: Mapping[str, Any],
    *,
    project_id: str | None,
) -> Call[m.PermissionVerdict]:
    # Not retried: an ALLOW from an allow-once grant consumes the grant, so a retry
    # after a lost answer would see PENDING for a call the human had allowed.
    body = {
        "user_id": user_id,
        "session_id": session_id,
        "tool_name": tool_name,
        "tool_args": dict(tool_args),
    } | _present(project_id=project_id)
    return Call("POST", "/v1/permissions:evaluate", _one(m.PermissionVerdict), json=body)


def grant_once(
    user_id: str,
    session_id: str,
    tool_name: str,
    tool_args: Mapping[str, Any],
    *,
    ttl_seconds: int | None,
) -> Call[m.Grant]:
    body = {
        "user_id": user_id,
        "session_id": session_id,
        "tool_name": tool_name,
        "tool_args": dict(tool_args),
    } | _present(ttl_seconds=ttl_seconds)
    return Call("POST", "/v1/permissions/grants", _one(m.Grant), json=body)


def add_rule(
    user_id: str, tool_name: str, pattern: str, action: str, *, project_id: str
) -> Call[m.Rule]:
    body = {
        "user_id": user_id,
        "project_id": project_id,
        "tool_name": tool_name,
        "pattern": pattern,
        "action": action,
    }
    return Call("POST", "/v1/permissions/rules", _one(m.Rule), json=body)


def rules(user_id: str, *, project_id: str | None) -> Call[list[m.Rule]]:
    params = {"user_id": user_id} | _present(project_id=project_id)
    parse = _list(m.Rule, "rules")
    return Call("GET", "/v1/permissions/rules", parse, params=params, retry_safe=True)


def delete_rule(rule_id: str, *, user_id: str) -> Call[m.DeletedRule]:
    # The API requires the rule's user: a rule id alone does not delete it.
    path = f"/v1/permissions/rules/{_seg(rule_id)}"
    params = {"user_id": user_id}
    return Call("DELETE", path, _one(m.DeletedRule), params=params, retry_safe=True)


# -- lifecycle and health ----------------------------------------------------------


def delete_user(user_id: str) -> Call[m.DeletionCounts]:
    # Repeating a user's deletion is safe (the API says so: repeat it after a 503).
    path = f"/v1/users/{_seg(user_id)}"
    return Call("DELETE", path, _one(m.DeletionCounts), retry_safe=True)


def delete_project(user_id: str, project_id: str) -> Call[m.DeletionCounts]:
    path = f"/v1/users/{_seg(user_id)}/projects/{_seg(project_id)}"
    return Call("DELETE", path, _one(m.DeletionCounts), retry_safe=True)


def request_compaction(
    user_id: str,
    *,
    project_id: str | None,
    retention_days: int | None,
    batch_limit: int | None,
) -> Call[m.CompactionAccepted]:
    body = {"user_id": user_id} | _present(
        project_id=project_id, retention_days=retention_days, batch_limit=batch_limit
    )
    return Call("POST", "/v1/compactions", _one(m.CompactionAccepted), json=body)


def health() -> Call[dict[str, Any]]:
    return Call("GET", "/healthz", dict, retry_safe=True)


def ready() -> Call[dict[str, Any]]:
    # 503 is an answer here (`down` names what is down), not an error to raise.
    return Call("GET", "/readyz", dict, retry_safe=True, accept=frozenset({503}))
