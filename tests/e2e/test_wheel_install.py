"""The image's install, without Docker: the project built as a wheel and installed
(not editable) into a plain venv, then `agent-memory` run from outside the
repository, as the container's entrypoint runs it."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from tests.support import REPO


def _run(argv: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.mark.slow
def test_the_installed_wheel_runs_the_console_script_with_its_schemas(tmp_path):
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
        REPO,
    )
    (wheel,) = tmp_path.glob("agent_memory-*.whl")
    target = tmp_path / "venv"
    venv.create(target, with_pip=True)
    python = target / "bin" / "python"
    _run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)], tmp_path
    )
    # The dependencies come from the test environment's site-packages, added as a
    # plain path: its .pth files (the editable install of this repository) are not run.
    site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], tmp_path
        ).stdout.strip()
    )
    (site / "test-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")

    helped = _run([str(target / "bin" / "agent-memory"), "--help"], tmp_path)
    for command in ("api", "worker", "migrate", "topology", "dlq", "up", "compact", "keys"):
        assert command in helped.stdout
    probe = (
        "import shared, services.cli; from shared.events.schemas import schemas_dir, schema_path;"
        "print(shared.__file__); print(schemas_dir());"
        "print(schema_path('turn.recorded.v1').is_file())"
    )
    where, schemas, found = _run([str(python), "-c", probe], tmp_path).stdout.split()
    assert where.startswith(str(site)) and not where.startswith(str(REPO))
    assert Path(schemas) == site / "shared" / "_schemas"
    assert found == "True"
    packaged = sorted(p.name for p in (site / "shared" / "_schemas" / "migrations").glob("*.sql"))
    assert packaged == sorted(p.name for p in (REPO / "schemas" / "migrations").glob("*.sql"))
