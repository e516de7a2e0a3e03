"""A silent partition (packets dropped, no reset) between a client and its store:
every wait ends within its stated bound, and after the partition heals the pool
and the client work again with fresh connections.

The partition is an nftables table of the test's own dropping every packet to and
from one store's port on 127.0.0.1 (bench/chaos_suite/network.py). It needs root
(CAP_NET_ADMIN) and Debian's `nftables`: `make test` runs it as root on the
project's machine; elsewhere it is skipped with that reason (`pytest -rs` lists it).
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import psycopg
import pytest
import valkey

from bench.chaos_suite.network import drop_port, undrop
from services.dev.localstack.process import free_port
from services.dev.localstack.valkey_server import LocalValkey
from shared.bootstrap import make_valkey
from shared.db.pool import TCP_USER_TIMEOUT_MS, make_pool
from shared.probes import PROBE_TIMEOUT_SECONDS, check_postgres, check_valkey
from tests.integration.test_outages import own_postgres  # noqa: F401 - a fixture

if os.geteuid() != 0 or shutil.which("nft") is None:
    pytest.skip(
        "a silent partition needs root and nftables (apt-get install nftables)",
        allow_module_level=True,
    )

# What the bounds leave for the machine being busy (two cores, tests in parallel).
SLACK_SECONDS = 3.0


class Partition:
    """An nftables table of the test's own: `drop` a port, `heal` it."""

    def __init__(self) -> None:
        self.table = f"agent_memory_test_{uuid.uuid4().hex[:8]}"

    def drop(self, port: int) -> None:
        assert drop_port(self.table, port) == ""

    def heal(self) -> None:
        undrop(self.table)


@pytest.fixture
def partition() -> Iterator[Partition]:
    made = Partition()
    yield made
    made.heal()  # also when the test failed half-way


def _port(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


def _fails_within(call, error: type[BaseException] | tuple, seconds: float) -> float:
    started = time.monotonic()
    with pytest.raises(error):
        call()
    took = time.monotonic() - started
    assert took < seconds, f"took {took:.1f} s, bound {seconds:.1f} s"
    return took


def test_a_postgres_partition_ends_every_wait_and_the_pool_replaces_its_connection(
    settings,
    own_postgres,  # noqa: F811 - the fixture imported above
    partition,
):
    settings = settings.model_copy(update={"database_url": own_postgres.url})
    pool = make_pool(settings, max_size=1, name="partition-test")
    try:
        with pool.connection() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        partition.drop(_port(own_postgres.url))
        bound = TCP_USER_TIMEOUT_MS / 1000 + SLACK_SECONDS

        def query() -> None:
            with pool.connection(timeout=bound) as conn:
                conn.execute("SELECT 1")

        # In flight on a pooled connection: the TCP user timeout ends it.
        took = _fails_within(query, psycopg.OperationalError, bound)
        assert took >= TCP_USER_TIMEOUT_MS / 1000 - 1  # ended by it, not by chance
        # A new connection (the worker's probe): its connect timeout ends it.
        _fails_within(
            lambda: check_postgres(settings), psycopg.OperationalError, PROBE_TIMEOUT_SECONDS + 2
        )
        partition.heal()
        # The broken connection is replaced (a worker's probe does this on recovery).
        pool.check()
        with pool.connection(timeout=10) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        pool.close()


def test_a_valkey_partition_ends_every_command_and_the_client_reconnects(
    settings, tmp_path, partition
):
    server = LocalValkey(tmp_path, free_port(), tmp_path / "logs")
    server.start()
    client = make_valkey(settings.model_copy(update={"valkey_url": server.url}))
    try:
        client.set("k", "1")
        partition.drop(_port(server.url))
        # The socket timeout (2 s) ends a command, and the probe's write.
        _fails_within(lambda: client.get("k"), valkey.TimeoutError, 2 + SLACK_SECONDS)
        _fails_within(
            lambda: check_valkey(client),
            (valkey.TimeoutError, valkey.ConnectionError),
            4 + SLACK_SECONDS,
        )
        partition.heal()
        assert client.get("k") == b"1"  # on a new connection
    finally:
        client.close()
        server.process.stop(5)
