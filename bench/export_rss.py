"""Export benchmark: one user's 100,000 memories exported through
`GET /v1/users/{user_id}:export` and through `agent-memory export`, to show that
the exporting process's memory stays bounded while the file is several hundred MB.

Starts a local stack (PostgreSQL, Valkey, the Pub/Sub emulator and the API, as
`agent-memory up` does) in a temporary folder and loads the memories with COPY:
sentences from a fixed vocabulary, random unit embeddings of AM_EMBEDDING_DIM
dimensions (768), each memory with its CREATED revision, over the global scope
and ten projects; and a user with one memory. The HNSW index is dropped first:
an export does not use it, and building it for 100,000 rows takes minutes.

- The route: the API process's resident memory is sampled with psutil every
  10 ms while the export streams to a file, against its RSS just before (after
  a warm-up export of the small user); the kernel's high-water mark
  (`VmHWM`, reset through `/proc/PID/clear_refs`) is printed beside it.
- The CLI: `agent-memory export ... > file` as a child process, sampled the same
  way; its growth is its peak against the same command's peak exporting the
  small user (the interpreter, the imports and the connection). (The kernel's
  `ru_maxrss` of a child counts the forking parent's pages before `exec`: no use.)

For each: the file's size, the seconds, memories per second, and the RSS growth.

    .venv/bin/python bench/export_rss.py [--memories 100000]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
import numpy as np  # noqa: E402
import psutil  # noqa: E402
import psycopg  # noqa: E402
from pgvector import Vector  # noqa: E402
from pgvector.psycopg import register_vector  # noqa: E402

from bench.common import MachineTime, bench_stack, describe_machine  # noqa: E402

BIG, SMALL = "bench-export-big", "bench-export-small"
PROJECTS = [f"project-{i}" for i in range(10)]
WORDS = [
    *("user", "prefers", "dark", "theme", "editor", "deploys", "fridays", "database"),
    *("postgres", "region", "europe", "timeout", "seconds", "cache", "valkey", "backend"),
    *("python", "rust", "tests", "nightly", "release", "notes", "meeting", "tuesday"),
    *("budget", "quarterly", "report", "coffee", "tea", "morning", "travel", "berlin"),
    *("lisbon", "pottery", "class"),
]
MB = 1024 * 1024


def load(database_url: str, app: str, memories: int, dim: int) -> float:
    """COPY `memories` memories of BIG (and one of SMALL), each with its revision;
    seconds taken."""
    rng = random.Random(42)
    vectors = np.random.default_rng(42)
    started = time.perf_counter()
    now = datetime(2026, 6, 1, tzinfo=UTC)
    with psycopg.connect(database_url, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("DROP INDEX IF EXISTS memories_embedding")
        with conn.transaction(), conn.cursor() as cur:
            owners = [(SMALL, 1), (BIG, memories)]
            rows = [(user, i) for user, count in owners for i in range(count)]
            ids = [uuid.UUID(int=rng.getrandbits(128), version=4) for _ in rows]
            with cur.copy(
                "COPY memories (id, app, user_id, project_id, scope, kind, text, embedding, "
                "observed_at) FROM STDIN"
            ) as copy:
                for start in range(0, len(rows), 1000):
                    batch = vectors.standard_normal((len(rows[start : start + 1000]), dim))
                    batch /= np.linalg.norm(batch, axis=1, keepdims=True)
                    for (user, i), memory_id, vector in zip(
                        rows[start : start + 1000], ids[start : start + 1000], batch, strict=True
                    ):
                        project = rng.choice(PROJECTS) if rng.random() < 0.7 else ""
                        text = " ".join(rng.choices(WORDS, k=14)).capitalize() + "."
                        scope = "project" if project else "global"
                        at = now - timedelta(seconds=i)
                        copy.write_row(
                            (memory_id, app, user, project, scope, "fact", text,
                             Vector(vector.astype(np.float32)), at)
                        )  # fmt: skip
            with cur.copy(
                "COPY memory_revisions (memory_id, app, user_id, action, new_text, observed_at) "
                "FROM STDIN"
            ) as copy:
                for (user, _i), memory_id in zip(rows, ids, strict=True):
                    copy.write_row((memory_id, app, user, "CREATED", "as loaded", now))
        conn.execute("VACUUM (ANALYZE) memories, memory_revisions")
    return time.perf_counter() - started


class RssPeak:
    """The highest RSS of a process, sampled every `interval` seconds on a thread."""

    def __init__(self, pid: int, interval: float = 0.01) -> None:
        self.process = psutil.Process(pid)
        self.interval = interval
        self.peak = self.process.memory_info().rss
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._done.wait(self.interval):
            try:
                self.peak = max(self.peak, self.process.memory_info().rss)
            except psutil.Error:  # the process ended
                return

    def stop(self) -> int:
        self._done.set()
        self._thread.join()
        return self.peak


def _high_water(pid: int) -> int | None:
    """The kernel's peak RSS of the process (VmHWM) in bytes, if readable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_high_water(pid: int) -> bool:
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # Linux: VmHWM := VmRSS
        return True
    except OSError:
        return False


def route_export(api_url: str, key: str, pid: int, user: str, out: Path) -> dict[str, float]:
    headers = {"Authorization": f"Bearer {key}"}
    before = psutil.Process(pid).memory_info().rss
    reset = _reset_high_water(pid)
    sampler = RssPeak(pid)
    started = time.perf_counter()
    with (
        httpx.stream("GET", f"{api_url}/v1/users/{user}:export", headers=headers, timeout=600)
        as answer,
        open(out, "wb") as file,
    ):  # fmt: skip
        answer.raise_for_status()
        for chunk in answer.iter_raw(MB):
            file.write(chunk)
    seconds = time.perf_counter() - started
    peak = sampler.stop()
    high = _high_water(pid) if reset else None
    return {
        "seconds": seconds,
        "rss_before_mb": before / MB,
        "rss_growth_mb": (peak - before) / MB,
        "high_water_growth_mb": (high - before) / MB if high is not None else float("nan"),
    }


def cli_export(env: dict[str, str], app: str, user: str, out: Path) -> dict[str, float]:
    started = time.perf_counter()
    with open(out, "wb") as file:
        child = subprocess.Popen(
            [sys.executable, "-m", "services.cli", "export", "--app", app, "--user", user],
            stdout=file,
            stderr=subprocess.PIPE,
            env=env,
        )
        sampler = RssPeak(child.pid)
        child.wait()
    seconds = time.perf_counter() - started
    peak = sampler.stop()
    stderr = child.stderr.read().decode() if child.stderr else ""
    if child.returncode != 0:
        raise RuntimeError(f"agent-memory export failed ({child.returncode}): {stderr}")
    return {"seconds": seconds, "peak_mb": peak / MB}


def _lines(path: Path) -> int:
    with open(path, "rb") as file:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: file.read(MB), b""))


def _measured(run: Callable[[], dict[str, float]], path: Path) -> dict[str, float]:
    machine = MachineTime()
    result = run()
    result["file_mb"] = path.stat().st_size / MB
    result["memories"] = _lines(path) - 2  # the header and the end line
    result["memories_per_s"] = result["memories"] / result["seconds"]
    result["machine"] = machine.report()  # type: ignore[assignment]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=100_000)
    args = parser.parse_args()
    with bench_stack(services=("api",)) as (stack, endpoints, settings):
        app, key = settings.default_app, stack.dev_api_key or ""
        loaded = load(endpoints.database_url, app, args.memories, settings.embedding_dim)
        print(f"loaded {args.memories} memories of one user in {loaded:.1f} s", flush=True)
        api_pid = stack.service_procs["api"].pid
        assert api_pid is not None
        folder = stack.data_dir
        route_export(endpoints.api_url, key, api_pid, SMALL, folder / "small.jsonl")  # warm-up
        big = folder / "route.jsonl"
        route = _measured(lambda: route_export(endpoints.api_url, key, api_pid, BIG, big), big)
        big.unlink()
        env = stack.child_environment()
        small = cli_export(env, app, SMALL, folder / "small.jsonl")
        big = folder / "cli.jsonl"
        cli = _measured(lambda: cli_export(env, app, BIG, big), big)
        cli["rss_growth_mb"] = cli["peak_mb"] - small["peak_mb"]
        big.unlink()
    print(
        f"route: {route['memories']} memories, {route['file_mb']:.0f} MB in "
        f"{route['seconds']:.1f} s ({route['memories_per_s']:,.0f} memories/s); the API's "
        f"peak RSS growth {route['rss_growth_mb']:.1f} MB (from {route['rss_before_mb']:.0f} "
        f"MB; kernel high-water mark {route['high_water_growth_mb']:.1f} MB)\n"
        f"  {describe_machine(route['machine'])}"  # type: ignore[arg-type]
    )
    print(
        f"cli:   {cli['memories']} memories, {cli['file_mb']:.0f} MB in {cli['seconds']:.1f} s "
        f"({cli['memories_per_s']:,.0f} memories/s); peak RSS growth "
        f"{cli['rss_growth_mb']:.1f} MB against exporting one memory ({cli['peak_mb']:.0f} "
        f"against {small['peak_mb']:.0f} MB)\n  {describe_machine(cli['machine'])}"  # type: ignore[arg-type]
    )
    rounded = {
        name: {k: round(v, 2) if isinstance(v, float) else v for k, v in result.items()}
        for name, result in (("route", route), ("cli", cli))
    }
    print(json.dumps({"memories": args.memories, "load_seconds": round(loaded, 1), **rounded}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
