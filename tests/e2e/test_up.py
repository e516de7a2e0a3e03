"""`agent-memory up` as a user runs it: the whole stack, then Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import psycopg
import pytest
import valkey

from services.dev.localstack.process import free_port
from tests.support import REPO, wait_for


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: nothing points at the test session's stack."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("AM_") and k not in ("PUBSUB_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT")
    }
    env.update({"PYTHONUNBUFFERED": "1", **extra})
    return env


class Up:
    def __init__(
        self, data_dir: Path, api_port: int, args: tuple[str, ...] = (), **env: str
    ) -> None:
        self.data_dir = data_dir
        self.api_url = f"http://127.0.0.1:{api_port}"
        self.out = data_dir.parent / f"up-{data_dir.name}-{api_port}.out"
        self._out = open(self.out, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli", "up", "--data-dir", str(data_dir), *args],
            env=_clean_env(AM_API_PORT=str(api_port), **env),
            cwd=REPO,
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        return self.out.read_text(errors="replace")

    def wait_ready(self) -> dict:
        wait_for(
            lambda: "agent-memory is up" in self.output() or self.proc.poll() is not None,
            120,
            "`up` to report the stack ready",
            interval=0.2,
        )
        assert self.proc.poll() is None, self.output()
        return json.loads((self.data_dir / "endpoints.json").read_text())

    def descendants(self) -> list[psutil.Process]:
        return psutil.Process(self.proc.pid).children(recursive=True)

    def stop(self, signum: int = signal.SIGINT) -> tuple[int, float]:
        started = time.monotonic()
        self.proc.send_signal(signum)
        code = self.proc.wait(timeout=30)
        self._out.close()
        return code, time.monotonic() - started


def _metrics_urls(output: str) -> dict[str, str]:
    """process -> metrics URL, from the `NAME pid PID metrics URL` lines `up` prints."""
    found = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 5 and parts[1] == "pid" and parts[3] == "metrics":
            found[parts[0]] = parts[4]
    return found


def _total(pages: list[dict[str, float]], sample: str) -> float:
    """A sample summed over the replicas' metrics pages."""
    return sum(page.get(sample, 0.0) for page in pages)


def _scrape(url: str) -> dict[str, float]:
    """The samples of a Prometheus text page: `name{labels}` -> value (the client
    writes labels in alphabetical order)."""
    page = httpx.get(url, timeout=10)
    assert page.status_code == 200, page.text
    samples = {}
    for line in page.text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def _episodes(database_url: str, user_id: str) -> int:
    with psycopg.connect(database_url) as conn:
        return conn.execute(
            "SELECT count(*) FROM episodes WHERE user_id = %s", (user_id,)
        ).fetchone()[0]


def _pid(data_dir: Path, name: str) -> int | None:
    entries = json.loads((data_dir / "pids.json").read_text())
    return next((e["pid"] for e in entries if e["name"] == name), None)


def _restarts(up: Up, name: str) -> int:
    """How often `up` has started component `name` again so far."""
    lines = [line for line in up.output().splitlines() if "component restarted" in line]
    return sum(json.loads(line)["component"] == name for line in lines)


def _wait_restarted(up: Up, name: str, before: int) -> None:
    """`up` started `name` again since it had `before` restarts (counted before the
    fault: a restart can be quicker than the test), and the API is ready again."""
    wait_for(lambda: _restarts(up, name) == before + 1, 60, f"`up` to restart {name}", 0.1)
    wait_for(
        lambda: httpx.get(f"{up.api_url}/readyz", timeout=10).status_code == 200,
        60,
        f"readyz to answer 200 again after {name} restarted",
        interval=0.1,
    )


@pytest.mark.slow
def test_up_runs_the_stack_and_stops_it_cleanly(tmp_path):
    data_dir = tmp_path / "stack"
    up = Up(data_dir, free_port(), ("--scale", "summary=2", "--scale", "extraction=2"))
    try:
        endpoints = up.wait_ready()
        assert set(endpoints) == {
            "api_url",
            "database_url",
            "valkey_url",
            "pubsub_emulator_host",
            "google_cloud_project",
        }
        assert endpoints["api_url"] == up.api_url
        out = up.output()
        assert f"export AM_DATABASE_URL={endpoints['database_url']}" in out
        children = up.descendants()
        names = " ".join(" ".join(p.cmdline()) for p in children)
        for expected in ("postgres", "valkey-server", "pubsub", "services.cli api"):
            assert expected in names
        for kind, replicas in (("summary", 2), ("extraction", 2), ("compaction", 1)):
            assert names.count(f"services.cli worker {kind}") == replicas, names
        assert "workers   summary x2, extraction x2, compaction x1" in out
        # Progress: one line per start-up step as it completes, before the banner.
        steps = [line for line in out.splitlines() if line.startswith("up: ")]
        assert steps[0] == f"up: starting the local stack in {data_dir.resolve()} ..."
        assert [re.sub(r"\d+(\.\d+)?", "N", line) for line in steps[1:]] == [
            "up: PostgreSQL ready on port N (N s)",
            "up: Valkey ready on port N (N s)",
            "up: Pub/Sub emulator ready on port N (N s)",
            "up: migrations: N applied (N s)",
            "up: topology: N created or updated (N s)",
            "up: services started: api, summary, summary-N, extraction, extraction-N, "
            "compaction (N s)",
        ]
        assert out.index(steps[-1]) < out.index("agent-memory is up")

        ready = httpx.get(f"{up.api_url}/readyz", timeout=10)
        assert ready.status_code == 200, ready.text

        # `up` made a development key, printed it and wrote it to the data dir;
        # without it every /v1 route answers 401.
        key = (data_dir / "dev-api-key").read_text().strip()
        assert key.startswith("am_") and f"API key   {key}" in up.output()
        # Files with secrets (the key; the Postgres URL with its password) are mode 600.
        for secret in ("dev-api-key", "endpoints.json", "postgres-password"):
            assert (data_dir / secret).stat().st_mode & 0o777 == 0o600, secret
        auth = {"Authorization": f"Bearer {key}"}
        body = {"user_id": "u-up", "user": "hello", "assistant": "hi"}
        refused = httpx.post(f"{up.api_url}/v1/sessions/s-up/turns", json=body, timeout=10)
        assert refused.status_code == 401, refused.text

        # The real path through the processes: API -> Pub/Sub -> both workers. Eleven
        # turns: the summary worker folds once the buffer holds more than ten.
        for n in range(11):
            body = {"user_id": "u-up", "user": f"I prefer option {n}.", "assistant": "Noted."}
            posted = httpx.post(
                f"{up.api_url}/v1/sessions/s-up/turns", json=body, headers=auth, timeout=10
            )
            assert posted.status_code == 202, posted.text
        wait_for(
            lambda: (
                httpx.get(
                    f"{up.api_url}/v1/sessions/s-up",
                    params={"user_id": "u-up"},
                    headers=auth,
                    timeout=5,
                ).json()["summary"]["version"]
                == 1
            ),
            60,
            "the summary worker to fold the buffer",
        )
        wait_for(lambda: _episodes(endpoints["database_url"], "u-up") == 11, 60, "the archive")

        # Each process serves its Prometheus metrics on the port `up` printed.
        metrics = _metrics_urls(up.output())
        replicas = ["extraction", "extraction-2", "summary", "summary-2"]
        assert sorted(metrics) == ["api", "compaction", *replicas]
        pids = {e["name"] for e in json.loads((data_dir / "pids.json").read_text())}
        assert pids >= {"api", "compaction", *replicas}
        api = _scrape(metrics["api"])
        turns_route = 'method="POST",route="/v1/sessions/{session_id}/turns"'
        assert api[f'agent_memory_api_request_seconds_count{{{turns_route},status="202"}}'] == 11
        assert api[f'agent_memory_api_request_seconds_count{{{turns_route},status="401"}}'] == 1
        # The API buffered every turn first, so the summary replicas' appends were
        # duplicates; together they folded once.
        summaries = wait_for(
            lambda: (
                _total(
                    pages := [_scrape(metrics[n]) for n in ("summary", "summary-2")],
                    'agent_memory_messages_total{outcome="duplicate",subscription="turns-summary"}',
                )
                == 11
                and pages
            ),
            30,
            "the summary workers' counters",
        )
        handled = 'agent_memory_handler_seconds_count{subscription="turns-summary"}'
        assert _total(summaries, handled) == 11
        assert _total(summaries, 'agent_memory_summary_folds_total{result="stored"}') == 1
        extractions = [_scrape(metrics[n]) for n in ("extraction", "extraction-2")]
        acked = 'agent_memory_messages_total{outcome="applied",subscription="turns-extraction"}'
        assert _total(extractions, acked) == 11

        # A replica killed is started again on its own; the others keep running.
        before = {n: _pid(data_dir, n) for n in ("extraction", "summary", "summary-2")}
        killed = _pid(data_dir, "extraction-2")
        os.kill(killed, signal.SIGKILL)
        wait_for(
            lambda: _pid(data_dir, "extraction-2") not in (killed, None),
            30,
            "`up` to restart extraction-2",
            interval=0.1,
        )
        assert '"service":"extraction-2","exit_code":-9' in up.output()
        assert {n: _pid(data_dir, n) for n in before} == before

        # Another `agent-memory` command reaches the running stack with its endpoints.
        env = _clean_env(
            AM_DATABASE_URL=endpoints["database_url"],
            AM_VALKEY_URL=endpoints["valkey_url"],
            PUBSUB_EMULATOR_HOST=endpoints["pubsub_emulator_host"],
            GOOGLE_CLOUD_PROJECT=endpoints["google_cloud_project"],
        )
        shown = subprocess.run(
            [sys.executable, "-m", "services.cli", "topology", "show"],
            env=env, cwd=REPO, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert shown.returncode == 0, shown.stdout + shown.stderr

        # A second `up` on the same data dir says so and exits non-zero.
        second = subprocess.run(
            [sys.executable, "-m", "services.cli", "up", "--data-dir", str(data_dir)],
            env=_clean_env(AM_API_PORT=str(free_port())),
            cwd=REPO, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert second.returncode == 1
        assert f"already running for {data_dir.resolve()}" in second.stderr

        # Valkey stops answering: readiness says 503 and names it. (Stopped, not shut
        # down: `up` starts a Valkey that exited again within a second or so, which a
        # readiness check may never see.)
        frozen = _pid(data_dir, "valkey")
        assert frozen is not None
        os.kill(frozen, signal.SIGSTOP)
        try:
            not_ready = wait_for(
                lambda: (
                    (r := httpx.get(f"{up.api_url}/readyz", timeout=10)).status_code == 503 and r
                ),
                30,
                "readyz to report Valkey down",
            )
        finally:
            os.kill(frozen, signal.SIGCONT)
        assert not_ready.json()["down"] == ["valkey"]
        # Valkey goes away: `up` starts it again on the same port and data (the
        # session's buffer is still there).
        before = _restarts(up, "valkey")
        valkey.Valkey.from_url(endpoints["valkey_url"]).shutdown(nosave=True)
        _wait_restarted(up, "valkey", before)
        view = httpx.get(
            f"{up.api_url}/v1/sessions/s-up", params={"user_id": "u-up"}, headers=auth, timeout=5
        )
        assert view.status_code == 200 and view.json()["summary"]["version"] == 1, view.text

        # Postgres and then the emulator killed: each is started again by itself, the
        # topology is applied to the new emulator, and a turn recorded after both
        # restarts goes through the whole pipeline.
        for name in ("postgres", "pubsub-emulator"):
            before = _restarts(up, name)
            os.kill(_pid(data_dir, name), signal.SIGKILL)
            _wait_restarted(up, name, before)
        body = {"user_id": "u-up", "user": "After the restarts.", "assistant": "Noted."}
        posted = httpx.post(
            f"{up.api_url}/v1/sessions/s-up/turns", json=body, headers=auth, timeout=10
        )
        assert posted.status_code == 202, posted.text
        wait_for(lambda: _episodes(endpoints["database_url"], "u-up") == 12, 60, "the archive")
        restarted = [line for line in up.output().splitlines() if "component restarted" in line]
        assert [json.loads(line)["component"] for line in restarted] == [
            "valkey",
            "postgres",
            "pubsub-emulator",
        ]
    finally:
        children = up.descendants()
        code, took = up.stop()
    assert code == 0, up.output()
    assert took < 10.0
    last = up.output().splitlines()[-2:]
    assert last[0] == "up: stopping: the services drain, then the components stop ..."
    assert re.fullmatch(r"up: stopped \(\d+\.\d s\)", last[1]), last
    gone, alive = psutil.wait_procs(children, timeout=1)
    assert alive == [], [" ".join(p.cmdline()) for p in alive]
    assert not (data_dir / "pids.json").exists()

    # A restart keeps the memories (Postgres data under the data dir); meanwhile a
    # second stack in another data dir runs side by side. SIGTERM stops both.
    again = Up(data_dir, free_port())
    beside = Up(tmp_path / "beside", free_port())
    try:
        endpoints = again.wait_ready()
        assert _episodes(endpoints["database_url"], "u-up") == 12
        other = beside.wait_ready()
        assert other["database_url"] != endpoints["database_url"]
        assert httpx.get(f"{beside.api_url}/readyz", timeout=10).status_code == 200
        assert httpx.get(f"{again.api_url}/readyz", timeout=10).status_code == 200
    finally:
        children = again.descendants() + beside.descendants()
        results = [again.stop(signal.SIGTERM), beside.stop(signal.SIGTERM)]
    assert all(code == 0 and took < 10.0 for code, took in results), results
    assert psutil.wait_procs(children, timeout=1)[1] == []


@pytest.mark.slow
def test_a_signal_during_start_up_stops_what_was_started(tmp_path):
    data_dir = tmp_path / "early"
    up = Up(data_dir, free_port())
    # Interrupt once PostgreSQL runs and before the rest of the stack is up.
    wait_for(
        lambda: any("postgres" in " ".join(p.cmdline()) for p in up.descendants()),
        60,
        "PostgreSQL to start",
        interval=0.05,
    )
    children = up.descendants()
    code, took = up.stop(signal.SIGTERM)
    assert code == 130 and "stopped during start-up" in up.output()
    assert took < 10.0
    assert psutil.wait_procs(children, timeout=2)[1] == []
    assert not (data_dir / "pids.json").exists()


@pytest.mark.slow
def test_up_uses_the_services_it_is_given_instead_of_starting_its_own(stack, tmp_path):
    up = Up(
        tmp_path / "external",
        free_port(),
        AM_DATABASE_URL=stack.database_url,
        AM_VALKEY_URL=stack.valkey_url,
        PUBSUB_EMULATOR_HOST=stack.pubsub_host,
        GOOGLE_CLOUD_PROJECT="agent-memory-external",
    )
    try:
        endpoints = up.wait_ready()
        assert (endpoints["database_url"], endpoints["valkey_url"]) == (
            stack.database_url,
            stack.valkey_url,
        )
        assert endpoints["pubsub_emulator_host"] == stack.pubsub_host
        commands = [" ".join(p.cmdline()) for p in up.descendants()]
        assert not any(
            name in c for c in commands for name in ("bin/postgres", "valkey-server", "pubsub")
        )
        assert sorted(c.split("services.cli ")[1] for c in commands if "services.cli " in c) == [
            "api",
            "worker compaction",
            "worker extraction",
            "worker summary",
        ]
        assert httpx.get(f"{up.api_url}/readyz", timeout=10).status_code == 200
    finally:
        children = up.descendants()
        code, _took = up.stop(signal.SIGTERM)
    assert code == 0
    assert psutil.wait_procs(children, timeout=1)[1] == []


def test_up_says_how_to_install_a_missing_emulator(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "services.cli", "up", "--data-dir", str(tmp_path / "x")],
        env=_clean_env(
            AM_API_PORT=str(free_port()),
            AM_PUBSUB_EMULATOR_BIN=str(tmp_path / "no-such-emulator"),
            AM_DATABASE_URL="postgresql://127.0.0.1:1/none",
            AM_VALKEY_URL="redis://127.0.0.1:1/0",
        ),
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert (
        "AM_PUBSUB_EMULATOR_BIN=" in result.stderr and "is not an executable file" in result.stderr
    )


def test_up_without_java_says_the_emulator_needs_it(tmp_path):
    bare_path = tmp_path / "empty-bin"
    bare_path.mkdir()
    env = _clean_env(
        PATH=str(bare_path),
        AM_API_PORT=str(free_port()),
        AM_DATABASE_URL="postgresql://127.0.0.1:1/none",
        AM_VALKEY_URL="redis://127.0.0.1:1/0",
        AM_PUBSUB_EMULATOR_BIN=sys.executable,  # any executable: Java is checked next
    )
    env.pop("JAVA_HOME", None)
    result = subprocess.run(
        [sys.executable, "-m", "services.cli", "up", "--data-dir", str(tmp_path / "x")],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert "the Pub/Sub emulator needs Java 17 (`java` is not on PATH)" in result.stderr
