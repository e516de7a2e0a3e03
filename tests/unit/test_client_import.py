"""The client is installable on its own: importing it loads httpx and pydantic,
and nothing of the server (no database, Valkey or Pub/Sub clients, no settings)."""

import inspect
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROBE = (
    "import sys; import shared.client; "
    "bad=[m for m in sys.modules if m.split('.')[0] in "
    "('psycopg','valkey','google','fastapi','structlog','starlette') "
    "or (m.startswith('shared.') and not m.startswith('shared.client'))]; print(bad)"
)


def test_the_client_imports_nothing_of_the_server():
    # A fresh interpreter: this one has loaded the server's modules already.
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_both_clients_have_the_same_methods_parameters_and_docstrings():
    # The blocking client is generated from the asyncio one (tests/unit/
    # test_client_generated.py): this checks that the generation kept each method.
    from shared.client import AsyncMemoryClient, MemoryClient

    def methods(cls: type) -> dict[str, list[inspect.Parameter]]:
        return {
            name: list(inspect.signature(getattr(cls, name)).parameters.values())
            for name in dir(cls)
            if not name.startswith("_") and name not in ("close", "aclose")
        }

    sync, aio = methods(MemoryClient), methods(AsyncMemoryClient)
    assert sync == aio
    assert len(sync) == 41
    for name in sync:
        assert inspect.iscoroutinefunction(getattr(AsyncMemoryClient, name)) or (
            inspect.isasyncgenfunction(getattr(AsyncMemoryClient, name))
        ), name
        assert getattr(AsyncMemoryClient, name).__doc__ == getattr(MemoryClient, name).__doc__
        assert getattr(MemoryClient, name).__doc__, f"{name} has no docstring"
