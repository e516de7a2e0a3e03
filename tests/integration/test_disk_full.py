"""Postgres on a full disk: the worker's probe says so (a full disk answers
`SELECT 1`), a write that needs space fails as a dependency outage (not the
event's fault), and both pass once space is freed.

Postgres runs on a small tmpfs of the test's own (bench/chaos_suite/mounts.py),
filled by a file. Mounting needs root: `make test` runs it as root on the
project's machine; elsewhere it is skipped with that reason (`pytest -rs`)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import psycopg
import pytest

from bench.chaos_suite.mounts import fill, mount_tmpfs, unmount
from services.dev.localstack.postgres import LocalPostgres
from services.dev.localstack.process import free_port
from shared.errors import dependency_of
from shared.probes import check_postgres

if os.geteuid() != 0:
    pytest.skip("mounting a tmpfs for Postgres needs root", allow_module_level=True)


@pytest.fixture
def small_disk_postgres(tmp_path) -> Iterator[LocalPostgres]:
    why = mount_tmpfs(tmp_path / "postgres", 256)
    assert why == ""
    server = LocalPostgres(tmp_path, free_port(), tmp_path / "logs")
    try:
        server.start()
        yield server
    finally:
        server.process.stop(5)
        unmount(tmp_path / "postgres")


def test_a_full_disk_is_an_outage_the_probe_sees_until_space_is_freed(
    settings, small_disk_postgres, tmp_path
):
    settings = settings.model_copy(update={"database_url": small_disk_postgres.url})
    with psycopg.connect(small_disk_postgres.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE notes (text text)")
    check_postgres(settings)

    filler = tmp_path / "postgres" / "filler"
    assert fill(tmp_path / "postgres", filler) > 0
    with psycopg.connect(small_disk_postgres.url, autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)  # what a PING would see
        with pytest.raises(psycopg.errors.DiskFull) as refused:
            conn.execute("INSERT INTO notes SELECT repeat('x', 1000) FROM generate_series(1, 5000)")
    assert dependency_of(refused.value) == "postgres"  # held, not the event's fault
    with pytest.raises(psycopg.errors.DiskFull):
        check_postgres(settings)

    filler.unlink()
    check_postgres(settings)
    with psycopg.connect(small_disk_postgres.url, autocommit=True) as conn:
        conn.execute("INSERT INTO notes SELECT repeat('x', 1000) FROM generate_series(1, 5000)")
        assert conn.execute("SELECT count(*) FROM notes").fetchone() == (5000,)
