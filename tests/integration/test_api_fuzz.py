"""The API against its own OpenAPI document, fuzzed by schemathesis over real HTTP:
every operation, a fixed seed and a bounded number of examples each. No request
may get a server error, an undocumented status, or an answer whose body, headers
or content type differ from what the document declares."""

from __future__ import annotations

import json
import re

import psycopg
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from services.api.app import create_app
from services.api.openapi import ROUTE_ERRORS
from shared.api_keys import create_key
from shared.bus.admin import TopologyAdmin
from shared.config import load_settings
from tests.conftest import make_settings
from tests.support import serve_api

EXAMPLES_PER_OPERATION = 30


@pytest.fixture(scope="module")
def fuzzed(stack):
    """The API with authentication on, and a key of its app."""
    # No worker runs here: a memories:generate that waits for its result waits in vain.
    api_settings = make_settings(
        stack, auth_disabled=False, auth_cache_seconds=60, operation_wait_seconds=1
    )
    TopologyAdmin(api_settings).apply()
    with psycopg.connect(stack.database_url, autocommit=True) as conn:
        key, _ = create_key(conn, api_settings.default_app)
    with serve_api(api_settings) as url:
        yield url, key


@schemathesis.serializer("application/x-ndjson")
def _json_lines(ctx, value) -> bytes:
    """A user import's body: the generated text as it is (JSON Lines are text)."""
    return value.encode() if isinstance(value, str) else json.dumps(value).encode()


# The document as the app serves it (building it needs no running stack).
schema = schemathesis.openapi.from_dict(create_app(load_settings()).openapi())


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    derandomize=True,  # the same examples every run
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_answer_is_one_the_document_declares(case, fuzzed):
    url, key = fuzzed
    response = case.call(base_url=url, headers={"Authorization": f"Bearer {key}"})
    checks = [
        schemathesis.checks.not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_headers_conformance,
        response_schema_conformance,
    ]
    if not _documented_refusal(response):
        checks.append(schemathesis.checks.positive_data_acceptance)
    case.validate_response(response, checks=checks)


# The rules a schema cannot say (docs/api.md, Validation), by the field and the
# message of their 422: a schema-valid request may still break one of these.
DOCUMENTED_REFUSALS = (
    ("created_at", "in the future"),
    ("expire_at", "must be in the future"),
    ("custom_topics", "each name once"),
    ("cursor", "not a cursor this API returned"),
    ("pattern", "is not an RE2 pattern"),
    ("pattern", "is too complex"),
    ("", "bytes, over the limit of"),
)
# An import's bad lines are named `line N`: any text is a string, few are exports.
_IMPORT_LINE = re.compile(r"line [0-9]+")


def _documented_refusal(response) -> bool:
    if response.status_code != 422:
        return False
    fields = response.json()["error"].get("fields", [])
    return bool(fields) and all(
        _IMPORT_LINE.fullmatch(f["field"])
        or any(
            f["field"].endswith(name) and text in f["message"] for name, text in DOCUMENTED_REFUSALS
        )
        for f in fields
    )


def test_the_document_declares_the_key_and_the_error_shape():
    document = create_app(load_settings()).openapi()
    schemas = document["components"]["schemas"]
    assert document["components"]["securitySchemes"]["ApiKey"]["scheme"] == "bearer"
    assert "HTTPValidationError" not in schemas and "ErrorResponse" in schemas
    error_ref = {"$ref": "#/components/schemas/ErrorResponse"}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            errors = {s: r for s, r in operation["responses"].items() if s >= "400"}
            if not path.startswith("/v1/"):
                assert ("security", errors) == ("security", {}), (method, path)
                continue
            assert operation["security"] == [{"ApiKey": []}]
            expected = {"401", "422", "503"} | (
                {"400", "413"} if "requestBody" in operation else set()
            )
            assert expected <= set(errors), (method, path)
            assert all(
                r["content"]["application/json"]["schema"] == error_ref for r in errors.values()
            )
    for method, path in ROUTE_ERRORS:  # every route named there exists
        assert method in document["paths"][path]
    # Bounds are JSON Schema's minimum/maximum, never pydantic's own names.
    assert not re.search(r'"(ge|le|gt|lt)":', json.dumps(document))


def test_the_documented_examples_are_accepted(client):
    document = client.get("/openapi.json").json()
    schemas = document["components"]["schemas"]
    tried = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body is None:
                continue
            name = body["schema"]["$ref"].rsplit("/", 1)[1]
            for example in schemas[name].get("examples", []):
                url = path.replace("{session_id}", "s-7")
                response = client.request(method, url, json=example)
                assert response.status_code < 300, (name, response.text)
                tried.append(name)
    assert sorted(tried) == [
        "ArchiveSearchRequest",
        "ContextRequest",
        "EvaluateRequest",
        "ExtractionConfig",
        "FlushSessionRequest",
        "GenerateRequest",
        "RecordTurnRequest",
        "SearchRequest",
        "TtlConfig",
        "WriteMemoryRequest",
    ]
