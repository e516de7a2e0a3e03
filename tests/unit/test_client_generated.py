"""The client is written once: the blocking client is generated from the asyncio
one and the models from the API's OpenAPI document (`make client` writes both).
These fail when a committed file differs from what its generator writes now."""

from tools import client_models, client_sync


def test_the_blocking_client_is_generated_from_the_asyncio_one():
    stale = [
        target
        for source, target in client_sync.MODULES.items()
        if client_sync.unasync((client_sync.CLIENT / source).read_text(encoding="utf-8"), source)
        != (client_sync.CLIENT / target).read_text(encoding="utf-8")
    ]
    assert stale == [], (
        f"shared/client: {', '.join(stale)} out of date with aio*.py; run `make client`"
    )


def test_the_client_models_are_generated_from_the_openapi_document():
    from services.api.app import create_app  # the server: only this test needs it

    expected = client_models.render(create_app().openapi())
    assert client_models.MODELS.read_text(encoding="utf-8") == expected, (
        "shared/client/models.py is out of date with the API's models; run `make client`"
    )


def test_the_rewrite_drops_async_and_names_the_blocking_twins():
    source = '''"""`AsyncThing`: one line.

More of it.
"""

import asyncio

from shared.client.aio_connection import AsyncConnection


class AsyncThing(AsyncConnection):
    async def __aenter__(self):  # `aclose()` on leaving
        await asyncio.sleep(0)  # noqa: sleep-ok - a sample to rewrite, never run
        return "AsyncThing in aio.py"
'''
    assert client_sync.unasync(source, "aio.py") == (
        "# Generated from shared/client/aio.py by `make client` (tools/client_sync.py).\n"
        "# Do not edit: change shared/client/aio.py and run `make client`.\n"
        '"""`Thing`: one line.\n'
        "\n"
        "Generated from aio.py, the asyncio client, by `make client`: edit that module.\n"
        '"""\n'
        "\n"
        "import time\n"
        "\n"
        "from shared.client.sync_connection import Connection\n"
        "\n"
        "\n"
        "class Thing(Connection):\n"
        "    def __enter__(self):  # `close()` on leaving\n"
        "        time.sleep(0)  # noqa: sleep-ok - a sample to rewrite, never run\n"
        '        return "Thing in sync.py"\n'
    )
