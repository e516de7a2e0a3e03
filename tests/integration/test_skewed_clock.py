"""A worker whose wall clock is 5 minutes off (libfaketime, as the chaos suite's
`skewed-clocks` row runs it) decides by the database's clock: its expiry sweep
retires what the reads already hide, however its own clock reads.

Needs Debian's `faketime` (`make test` installs it as root; elsewhere
`apt-get install faketime`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.chaos_suite.clocks import OFFSET_SECONDS, probe_skew, skewed_environment

ROOT = Path(__file__).resolve().parents[2]

SWEEP = """
import json, sys, time
from shared.config import load_settings
from shared.db.pool import make_pool
from shared.db.unit_of_work import UnitsOfWork
from shared.memory.expiry import retire_expired

settings = load_settings(database_url=sys.argv[1])
pool = make_pool(settings, max_size=2, name="skewed")
swept = retire_expired(UnitsOfWork(pool, "compaction"), sys.argv[2])
print(json.dumps({"wall": time.time(), "retired": swept.memories}))
"""


@pytest.fixture
def faketime() -> str:
    found = shutil.which("faketime")
    assert found, "these tests need Debian's faketime: apt-get install faketime"
    return found


@pytest.mark.parametrize("offset", sorted(OFFSET_SECONDS))
def test_a_skewed_python_is_off_by_its_offset_and_still_sleeps(faketime, offset):
    assert probe_skew(offset) == ""


def _write(client, ids, text: str) -> dict:
    body = {"user_id": ids["user_id"], "kind": "fact", "scope": "global", "text": text}
    body["entity_name"], body["ttl_seconds"] = "room", 60
    answer = client.post("/v1/memories", json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()["memory"]


def test_a_sweep_whose_clock_is_behind_retires_what_the_database_says_expired(
    faketime, client, ids, settings, pool
):
    memory = _write(client, ids, "The Heron demo room is B12.")
    with pool.connection() as conn:  # a minute later, by the database's clock
        conn.execute(
            "UPDATE memories SET expire_at = now() - interval '1 s' WHERE id = %s",
            (memory["id"],),
        )
    # 5 minutes behind, the worker's own clock still has 4 minutes to go.
    command = [
        faketime,
        "-f",
        "-5m",
        sys.executable,
        "-c",
        SWEEP,
        settings.database_url,
        ids["app"],
    ]
    env = skewed_environment({**os.environ, "PYTHONPATH": str(ROOT)})
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    with pool.connection() as conn:
        db_now = conn.execute("SELECT extract(epoch FROM now())").fetchone()[0]
    assert float(db_now) - seen["wall"] > 240  # the sweep's clock was behind
    assert seen["retired"] == 1
    detail = client.get(f"/v1/memories/{memory['id']}", params={"user_id": ids["user_id"]})
    assert detail.json()["deleted_at"] is not None
    assert [r["action"] for r in detail.json()["revisions"]] == ["CREATED", "DELETED"]
