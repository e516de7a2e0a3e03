"""A memory's expiry counts from the database's time at which its TTLs were read,
not from the writing process's clock (docs/operations.md, "Skewed clocks")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.memory.expiry import NO_TTL, Ttl

READ_AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_an_expiry_counts_from_the_time_the_ttls_were_read():
    ttl = Ttl({"default": 600, "scopes": {"session": {"create": 60}}}, READ_AT)
    assert ttl.expire_at("global", "create") == READ_AT + timedelta(seconds=600)
    assert ttl.expire_at("session", "create") == READ_AT + timedelta(seconds=60)


def test_no_ttl_set_means_no_expiry():
    assert NO_TTL.expire_at("global", "create") is None
    assert Ttl({}, READ_AT).expire_at("project", "generate_updated") is None
