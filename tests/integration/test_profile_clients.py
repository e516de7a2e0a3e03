"""A user's profile through the Python clients (blocking and asyncio) and the MCP
tools, against the real API over HTTP with authentication on: the schema set with
an admin key, the profile set, read and cleared, each change a revision whose
source is the caller's key, and a value of the wrong type refused with its field;
a field rolled back to an earlier revision, and each refusal of that."""

from __future__ import annotations

import asyncio
import json

import anyio
import psycopg
import pytest
from mcp import ClientSession

from shared.api_keys import create_key
from shared.client import AsyncMemoryClient, MemoryClient
from shared.client import models as m
from shared.client.errors import ConflictError, MemoryApiError, NotFoundError
from tests.integration.test_mcp import http_session
from tests.support import serve_api

FIELDS = [
    {"name": "name", "type": "string", "description": ""},
    {"name": "timezone", "type": "string", "description": "an IANA name"},
    {"name": "team_size", "type": "number", "description": ""},
]


@pytest.fixture
def served(app_settings, topology, stack, ids):
    settings = app_settings.model_copy(update={"auth_disabled": False, "auth_cache_seconds": 0})
    with psycopg.connect(stack.database_url, autocommit=True) as conn:
        key, stored = create_key(conn, ids["app"], admin=True)
    with serve_api(settings) as url:
        yield url, key, stored.id


def test_the_blocking_client(served, ids):
    url, key, key_id = served
    user = ids["user_id"]
    with MemoryClient(url, api_key=key) as client:
        assert client.set_profile_schema(FIELDS).model_dump()["fields"] == FIELDS
        kinds = [type(f) for f in client.profile_schema().fields]
        assert kinds == [m.StringField, m.StringField, m.NumberField]
        assert client.profile(user).values == {}
        after = client.update_profile(user, {"name": "Ada", "team_size": 4})
        assert after.values == {"name": "Ada", "team_size": 4}
        assert [f.source for f in after.fields] == [f"key:{key_id}", f"key:{key_id}"]
        with pytest.raises(MemoryApiError) as refused:
            client.update_profile(user, {"team_size": "four"})
        assert refused.value.status == 422 and "values.team_size" in str(refused.value)
        client.update_profile(user, {"name": None})
        assert client.profile(user).values == {"team_size": 4}
        history = client.profile_revisions(user).revisions
        assert [(r.field, r.revision, r.action, r.value) for r in history] == [
            ("name", 1, "SET", "Ada"),
            ("team_size", 1, "SET", 4),
            ("name", 2, "CLEARED", None),
        ]
        back = client.rollback_profile(user, "name", 1)
        assert back.values == {"name": "Ada", "team_size": 4}
        assert back.fields[0].source == f"key:{key_id}"
        with pytest.raises(ConflictError, match="revision 1's value of field 'name' is already"):
            client.rollback_profile(user, "name", 1)
        with pytest.raises(NotFoundError, match="no revision 4 of field 'name'"):
            client.rollback_profile(user, "name", 4)
        with pytest.raises(NotFoundError, match="schema has no field 'shoe_size'"):
            client.rollback_profile(user, "shoe_size", 1)
        last = client.profile_revisions(user).revisions[-1]
        assert (last.field, last.revision, last.value, last.source) == (
            "name",
            3,
            "Ada",
            f"key:{key_id}",
        )


def test_the_asyncio_client(served, ids):
    url, key, _key_id = served
    user = ids["user_id"]

    async def run() -> None:
        async with AsyncMemoryClient(url, api_key=key) as client:
            schema = await client.set_profile_schema(FIELDS)
            assert schema.model_dump()["fields"] == FIELDS
            assert (await client.profile_schema()).model_dump()["fields"] == FIELDS
            language = {"name": "language", "type": "enum", "values": ["English", "French"]}
            tier = (await client.set_profile_schema([*FIELDS, language])).fields[-1]
            assert isinstance(tier, m.EnumField) and tier.values == ["English", "French"]
            await client.set_profile_schema(FIELDS)
            await client.update_profile(user, {"timezone": "Europe/Lisbon"})
            assert (await client.profile(user)).values == {"timezone": "Europe/Lisbon"}
            history = await client.profile_revisions(user)
            assert [(r.field, r.value) for r in history.revisions] == [
                ("timezone", "Europe/Lisbon")
            ]
            await client.update_profile(user, {"timezone": "Asia/Tokyo"})
            back = await client.rollback_profile(user, "timezone", 1)
            assert back.values == {"timezone": "Europe/Lisbon"}
            history = await client.profile_revisions(user)
            assert [(r.revision, r.value) for r in history.revisions] == [
                (1, "Europe/Lisbon"),
                (2, "Asia/Tokyo"),
                (3, "Europe/Lisbon"),
            ]
            with pytest.raises(ConflictError):
                await client.rollback_profile(user, "timezone", 3)

    asyncio.run(run())


async def _tool(session: ClientSession, tool: str, **args) -> tuple[bool, str]:
    result = await session.call_tool(tool, args)
    return bool(result.is_error), result.content[0].text


def test_the_mcp_tools(served, ids):
    url, key, _key_id = served
    user = ids["user_id"]
    with MemoryClient(url, api_key=key) as client:
        client.set_profile_schema(FIELDS)

    async def run() -> None:
        async with http_session(url, key) as session:
            failed, text = await _tool(
                session, "update_profile", values={"name": "Lin", "timezone": "CET"}, user_id=user
            )
            assert not failed and json.loads(text) == {"name": "Lin", "timezone": "CET"}
            failed, text = await _tool(session, "get_profile", user_id=user)
            assert not failed and json.loads(text) == {"name": "Lin", "timezone": "CET"}
            failed, text = await _tool(
                session, "update_profile", values={"shoe_size": 42}, user_id=user
            )
            assert failed and "422" in text and "values.shoe_size" in text
            # A value of no profile type: named once, with no type's name of its own.
            failed, text = await _tool(
                session, "update_profile", values={"name": ["Lin"]}, user_id=user
            )
            assert failed and "must be a string, a number, true or false, or null" in text
            assert "float" not in text and "constrained" not in text, text
            failed, text = await _tool(
                session, "update_profile", values={"timezone": "PST"}, user_id=user
            )
            assert not failed
            failed, text = await _tool(session, "profile_history", field="timezone", user_id=user)
            assert not failed
            assert [(r["revision"], r["value"]) for r in json.loads(text)["revisions"]] == [
                (1, "CET"),
                (2, "PST"),
            ]
            failed, text = await _tool(
                session, "rollback_profile", field="timezone", revision=1, user_id=user
            )
            assert not failed and json.loads(text) == {"name": "Lin", "timezone": "CET"}
            failed, text = await _tool(
                session, "rollback_profile", field="timezone", revision=9, user_id=user
            )
            assert failed and "404" in text and "no revision 9 of field 'timezone'" in text
            failed, text = await _tool(
                session, "get_context", query="when to meet", user_id=user, session_id="s1"
            )
            assert not failed
            assert "## The user's profile\n- name: Lin\n- timezone: CET" in text

    anyio.run(run)


def test_a_user_id_that_is_not_a_path_segment_has_its_profile(served):
    url, key, _key_id = served
    with MemoryClient(url, api_key=key) as client:
        client.set_profile_schema(FIELDS)
        for user in ("a/b", "..", ".", "x?y#z%"):
            client.update_profile(user, {"name": user})
        for user in ("a/b", "..", ".", "x?y#z%"):
            assert client.profile(user).values == {"name": user}
            assert [r.value for r in client.profile_revisions(user).revisions] == [user]
