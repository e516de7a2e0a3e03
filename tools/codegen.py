"""What the client's generators share: ruff's layout of a generated module, and
writing it (or, with `--check`, saying whether the committed file is current)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMAND = "make client"


def ruff(source: str, path: Path, fix: tuple[str, ...] = (), unsafe: bool = False) -> str:
    """`source` as ruff lays it out (the project's settings, as for the path it
    is written to), after the fixes of the rules `fix` if any (`unsafe`: also
    the fixes ruff applies only when asked)."""
    name = str(path.relative_to(REPO))
    if fix:
        check = ["check", "--fix", "--exit-zero", "--quiet", "--select", ",".join(fix)]
        source = _run(check + ["--unsafe-fixes"] * unsafe, source, name)
    return _run(["format", "--quiet"], source, name)


def _run(args: list[str], source: str, name: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--stdin-filename", name, "-"],
        input=source,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    if done.returncode != 0:
        raise RuntimeError(f"ruff {args[0]} failed on the generated {name}: {done.stderr}")
    return done.stdout


def write(path: Path, text: str, check: bool) -> bool:
    """Write `text` to `path`, or with `check` only compare; True if it was current."""
    current = path.exists() and path.read_text(encoding="utf-8") == text
    if current:
        state = "current"
    elif check:
        state = f"out of date; run `{COMMAND}`"
    else:
        path.write_text(text, encoding="utf-8")
        state = "written"
    print(f"{path.relative_to(REPO)}: {state}")
    return current
