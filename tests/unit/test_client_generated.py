"""The client is written once: the blocking client is generated from the asyncio
one and the models from the API's OpenAPI document (`make client` writes both).
These fail when a committed file differs from what its generator writes now."""

from tools import client_models, client_sync

# The project's cap on a module's length (docs/development.md).
MODULE_LINES = 400
REF = client_models.REF


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
    package = client_models.PACKAGE
    stale = [
        name
        for name, text in expected.items()
        if not (package / name).exists() or (package / name).read_text(encoding="utf-8") != text
    ] + [path.name for path in client_models.stale_modules(expected)]
    assert stale == [], (
        f"shared/client/models: {', '.join(stale)} out of date with the API's models;"
        " run `make client`"
    )
    lines = {name: text.count("\n") for name, text in expected.items()}
    assert {name: n for name, n in lines.items() if n > MODULE_LINES} == {}, (
        "a route group's models outgrew a module: split the group's routes"
    )


def test_a_model_goes_to_its_routes_group_or_to_common():
    def answer(name):
        return {"responses": {"200": {"content": {"j": {"schema": {"$ref": REF + name}}}}}}

    def model(*fields, refs=()):
        properties = {field: {"type": "string"} for field in fields}
        properties.update({ref.lower(): {"$ref": REF + ref} for ref in refs})
        return {"type": "object", "properties": properties, "required": list(properties)}

    document = {
        "paths": {
            "/v1/notes": {"get": answer("NotePage")},
            "/v1/notes:search": {"post": answer("ScoredNote")},
            "/v1/dead-letters/{id}": {"get": answer("Letter")},
            "/v1/dead-letters/{id}:retry": {"post": answer("Retried")},
            "/healthz": {"get": answer("Health")},
        },
        "components": {
            "schemas": {
                "Health": model("status"),
                "Note": model("id", "text", "kind", "scope"),
                "NotePage": model(refs=["Note"]),
                # A note with more: it extends `Note`, which the letters' group needs too.
                "ScoredNote": model("id", "text", "kind", "scope", "score"),
                "Letter": model("reason", refs=["Note"]),
                "Retried": model("id"),
            }
        },
    }
    files = client_models.render(document)
    classes = {
        name: [
            line.split("(")[0].removeprefix("class ")
            for line in text.splitlines()
            if line.startswith("class ")
        ]
        for name, text in files.items()
    }
    assert classes == {
        "common.py": ["Note"],
        "dead_letters.py": ["Letter", "Retried"],
        "notes.py": ["NotePage", "ScoredNote"],
        "__init__.py": [],
    }
    assert "from shared.client.models.common import Note\n" in files["notes.py"]
    assert "class ScoredNote(Note):" in files["notes.py"]
    assert "from shared.client.models.common import" not in files["common.py"]
    assert "from shared.client.models.dead_letters import Letter, Retried\n" in files["__init__.py"]


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
