"""Replicas per worker kind: `up --scale KIND=N` and `AM_SCALE`, and what a bad
value gets (exit 2 naming it, nothing started)."""

import subprocess
import sys

import pytest

from services.dev.localstack.stack import LocalStack
from services.dev.localstack.supervision import replica_name, service_kind
from shared.config import Settings
from shared.scale import parse_scale
from tests.support import REPO


def test_items_and_lists_parse_and_a_later_item_wins():
    assert parse_scale("extraction=3,summary=2") == {"extraction": 3, "summary": 2}
    assert parse_scale(["extraction=3", " summary = 2 ,", "extraction=1"]) == {
        "extraction": 1,
        "summary": 2,
    }
    assert parse_scale("") == {}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("extraction=0", "'extraction=0': replicas must be from 1 to 8, not 0"),
        ("extraction=9", "'extraction=9': replicas must be from 1 to 8, not 9"),
        ("unknown=2", "'unknown=2': unknown worker kind 'unknown'"),
        ("extraction=abc", "'extraction=abc': replicas must be a whole number, not 'abc'"),
        ("extraction=-1", "'extraction=-1': replicas must be a whole number, not '-1'"),
        ("extraction", "'extraction': expected KIND=REPLICAS"),
    ],
)
def test_a_bad_item_is_quoted(value, message):
    with pytest.raises(ValueError) as raised:
        parse_scale(value)
    assert str(raised.value).startswith(message)


def test_the_command_line_overrides_am_scale_per_kind(tmp_path):
    settings = Settings(scale="extraction=3,summary=2")
    stack = LocalStack(settings, tmp_path, scale={"summary": 4})
    assert [stack.replicas(k) for k in ("api", "summary", "extraction", "compaction")] == [
        1,
        4,
        3,
        1,
    ]


def test_replica_names_keep_the_first_as_the_kind():
    names = [replica_name("extraction", n) for n in (1, 2, 3)]
    assert names == ["extraction", "extraction-2", "extraction-3"]
    assert [service_kind(n) for n in [*names, "api"]] == ["extraction"] * 3 + ["api"]


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--scale", "extraction=0"], {}, "argument --scale: 'extraction=0'"),
        (["--scale", "unknown=2"], {}, "argument --scale: 'unknown=2'"),
        (["--scale", "extraction=abc"], {}, "argument --scale: 'extraction=abc'"),
        ([], {"AM_SCALE": "summary=x"}, "AM_SCALE: 'summary=x'"),
    ],
)
def test_up_with_a_bad_scale_exits_2_and_starts_nothing(tmp_path, argv, env, message):
    data_dir = tmp_path / "never"
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", "up", "--data-dir", str(data_dir), *argv],
        env={"PATH": "/usr/bin:/bin", **env},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert not data_dir.exists()


def test_version_prints_the_installed_version():
    from importlib import metadata

    done = subprocess.run(
        [sys.executable, "-m", "services.cli", "--version"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (
        0,
        f"agent-memory {metadata.version('agent-memory')}\n",
    )
