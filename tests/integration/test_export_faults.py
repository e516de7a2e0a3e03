"""An export that fails half-way never looks whole: the status is out, so the API
cuts the connection and the client's read fails (over real HTTP, the exporting
backend terminated in Postgres in the middle of the stream)."""

from __future__ import annotations

import httpx
import psycopg
import pytest

from tests.support import serve_api

MEMORIES = 5000  # about 35 MB of lines: far more than the sockets buffer


def test_an_export_cut_by_a_database_failure_fails_the_clients_read(app_settings, topology, ids):
    app, user = ids["app"], ids["user_id"]
    with psycopg.connect(app_settings.database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO memories (app, user_id, scope, kind, text, embedding, observed_at) "
            "SELECT %s, %s, 'global', 'fact', 'memory ' || i, "
            "array_fill(0.123456::real, ARRAY[768])::vector, now() "
            "FROM generate_series(1, %s) i",
            (app, user, MEMORIES),
        )
    with (
        serve_api(app_settings) as url,
        httpx.stream("GET", f"{url}/v1/users/{user}:export", timeout=30) as answer,
    ):
        assert answer.status_code == 200
        chunks = answer.iter_raw(65536)
        received = next(chunks)
        with psycopg.connect(app_settings.database_url, autocommit=True) as conn:
            ended = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE query LIKE %s AND pid <> pg_backend_pid()",
                ('%"export_memories"%',),
            ).fetchone()[0]
        assert ended == 1
        with pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"):
            for chunk in chunks:
                received += chunk
    assert b'{"type":"end"' not in received  # the end line, as the export writes it
