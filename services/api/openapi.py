"""The OpenAPI document as the contract: what FastAPI derives from the routes,
with what it cannot know added.

- The bearer API-key scheme, required by every `/v1` operation (the health
  checks and the docs stay open).
- The API's error shape (`ErrorResponse`, from services.api.errors) for every
  error status an operation can answer, in place of FastAPI's `{"detail": [...]}`,
  which this API never sends.
- Links: how an answer's ids feed the next operation (a memory written, then
  read, given feedback, rolled back, deleted; a turn recorded, then its session read), for
  clients and for a fuzzer's stateful phase.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from services.api import filter_models

SECURITY_SCHEME = "ApiKey"

# Every `/v1` operation: no or a bad key, a field that is wrong, a store or the bus
# unavailable; with a body, also one that cannot be read or is too large.
COMMON_ERRORS = {
    401: "Missing, unknown or revoked API key.",
    403: "The key is limited to one agent: the request named another (`fields` names "
    "it), or the operation serves the whole user or app.",
    422: "A field is wrong; `fields` names each one.",
    503: "A store, the bus or a model endpoint is unavailable; retry later.",
}
BODY_ERRORS = {
    400: "The body could not be read.",
    413: "The body (or the event it makes) is over its size limit.",
}
# What only some operations answer: (method, path) -> {status: description}.
ROUTE_ERRORS: dict[tuple[str, str], dict[int, str]] = {
    ("post", "/v1/sessions/{session_id}/turns"): {
        409: "The session is another agent's (`agent_id`); nothing is recorded.",
        410: "The user was deleted after this turn was created; it is not recorded.",
    },
    ("get", "/v1/sessions/{session_id}"): {404: "The session is another agent's."},
    ("post", "/v1/sessions/{session_id}:flush"): {404: "The session is another agent's."},
    ("delete", "/v1/sessions/{session_id}"): {404: "The session is another agent's."},
    ("post", "/v1/context"): {404: "The session (`session_id`) is another agent's."},
    ("post", "/v1/memories"): {
        409: "The user's memories kept changing under the write's decision; retry.",
        502: "The model's answers to the consolidation stayed invalid; `message` says how.",
    },
    ("post", "/v1/memories:search"): {
        502: "The model's answers to the query's decomposition stayed invalid.",
    },
    ("get", "/v1/memories/{memory_id}"): {404: "No such memory for this user."},
    ("delete", "/v1/memories/{memory_id}"): {404: "No such live memory for this user."},
    ("get", "/v1/operations/{name}"): {
        404: "No such operation for this user, or one an agent the request does not act as started."
    },
    ("delete", "/v1/permissions/rules/{rule_id}"): {404: "No such rule for this user."},
    ("post", "/v1/compactions"): {403: "Compaction needs an admin key of the app."},
    ("post", "/v1/memories/{memory_id}:rollback"): {
        404: "No such memory for this user.",
        409: "The memory is deleted (not by wrong feedback), that revision's text is already "
        "current, or another live memory of its scope has its entity.",
    },
    ("post", "/v1/memories/{memory_id}:feedback"): {
        404: "No such memory for this user, or another agent's.",
        409: "The memory is deleted or expired.",
    },
    ("patch", "/v1/memories/{memory_id}"): {
        404: "No such memory for this user.",
        409: "The memory is deleted or expired, another live memory of its scope has that "
        "entity, or it kept changing under the edit; retry.",
    },
    ("put", "/v1/config/ttl"): {403: "The app's TTLs need an admin key of the app."},
    ("put", "/v1/config/extraction"): {403: "The extraction topics need an admin key of the app."},
    ("put", "/v1/config/agents"): {403: "The agents' sharing needs an admin key of the app."},
    ("put", "/v1/config/profile"): {403: "The profile schema needs an admin key of the app."},
    ("post", "/v1/users/{user_id}/profile:rollback"): {
        404: "The app's profile schema has no such field (`field`), or the user no such "
        "revision of it (`revision`).",
        409: "That revision's value is already current, or no longer fits the field.",
    },
    ("post", "/v1/users/{user_id}:import"): {
        409: "The user was deleted (GDPR); nothing is imported.",
    },
}


def _link(method: str, path: str, parameters: dict[str, str] | None = None, **body: str) -> dict:
    """An OpenAPI link to the operation `method path` with these parameters
    (`"path.memory_id": "$response.body#/id"`) and body fields."""
    pointer = path.replace("~", "~0").replace("/", "~1")
    link: dict[str, Any] = {"operationRef": f"#/paths/{pointer}/{method}"}
    if parameters:
        link["parameters"] = parameters
    if body:
        link["requestBody"] = body
    return link


_BODY_USER = "$request.body#/user_id"
_MEMORY = "/v1/memories/{memory_id}"
# The written memory's agent (null: the user's), which reads it: the user's memory
# needs none, an agent's its own.
_WRITTEN_AGENT = "$response.body#/memory/agent_id"
_WRITTEN = {
    "path.memory_id": "$response.body#/memory/id",
    "query.user_id": _BODY_USER,
    "query.agent_id": _WRITTEN_AGENT,
}
_SESSION = "/v1/sessions/{session_id}"
_TURNS_SESSION = {"path.session_id": "$request.path.session_id"}
# A session is its first turn's agent's: read as the agent that recorded the turn.
_BODY_AGENT = "$request.body#/agent_id"
_TURNS_SESSION_READ = {
    **_TURNS_SESSION,
    "query.user_id": _BODY_USER,
    "query.agent_id": _BODY_AGENT,
}
_RULE = {"path.rule_id": "$response.body#/id", "query.user_id": "$response.body#/user_id"}
# The memory an answer is (`_READ_BACK`) or holds (`_GIVEN`), read as the body's user.
_READ_BACK = {
    "path.memory_id": "$response.body#/id",
    "query.user_id": _BODY_USER,
    "query.agent_id": "$response.body#/agent_id",
}
_GIVEN = {"path.memory_id": "$response.body#/memory/id"}

# (method, path) -> {status: {name: link}}: what a success's answer leads to.
LINKS: dict[tuple[str, str], dict[int, dict[str, dict]]] = {
    ("post", "/v1/memories"): {
        201: {
            "GetMemory": _link("get", _MEMORY, _WRITTEN),
            "RollbackMemory": _link(
                "post",
                f"{_MEMORY}:rollback",
                {"path.memory_id": "$response.body#/memory/id"},
                user_id=_BODY_USER,
                agent_id=_WRITTEN_AGENT,
            ),
            "DeleteMemory": _link("delete", _MEMORY, _WRITTEN),
            "ListMemories": _link("get", "/v1/memories", {"query.user_id": _BODY_USER}),
            "ExportUser": _link("get", "/v1/users/{user_id}:export", {"path.user_id": _BODY_USER}),
        }
    },
    # Edited once read: the write's own links are as many as the sequences can follow.
    ("get", _MEMORY): {
        200: {
            "EditMemory": _link(
                "patch",
                _MEMORY,
                {"path.memory_id": "$response.body#/id"},
                user_id="$request.query.user_id",
                agent_id="$response.body#/agent_id",
            ),
            "GiveFeedback": _link(
                "post",
                f"{_MEMORY}:feedback",
                {"path.memory_id": "$response.body#/id"},
                user_id="$request.query.user_id",
                agent_id="$response.body#/agent_id",
            ),
        }
    },
    ("patch", _MEMORY): {200: {"GetMemory": _link("get", _MEMORY, _READ_BACK)}},
    ("post", f"{_MEMORY}:feedback"): {
        200: {
            "GetMemory": _link(
                "get",
                _MEMORY,
                {
                    **_GIVEN,
                    "query.user_id": _BODY_USER,
                    "query.agent_id": "$response.body#/memory/agent_id",
                },
            ),
            "RollbackMemory": _link(
                "post",
                f"{_MEMORY}:rollback",
                {"path.memory_id": "$response.body#/memory/id"},
                user_id=_BODY_USER,
                agent_id="$response.body#/memory/agent_id",
            ),
        }
    },
    ("post", f"{_MEMORY}:rollback"): {200: {"GetMemory": _link("get", _MEMORY, _READ_BACK)}},
    ("post", f"{_SESSION}/turns"): {
        202: {
            "GetSession": _link("get", _SESSION, _TURNS_SESSION_READ),
            "FlushSession": _link(
                "post",
                f"{_SESSION}:flush",
                _TURNS_SESSION,
                user_id=_BODY_USER,
                agent_id=_BODY_AGENT,
            ),
            "DeleteSession": _link("delete", _SESSION, _TURNS_SESSION_READ),
            "Context": _link(
                "post",
                "/v1/context",
                user_id=_BODY_USER,
                session_id="$request.path.session_id",
                agent_id=_BODY_AGENT,
            ),
        }
    },
    ("post", "/v1/memories:generate"): {
        202: {
            "GetOperation": _link(
                "get",
                "/v1/operations/{name}",
                {
                    "path.name": "$response.body#/name",
                    "query.user_id": _BODY_USER,
                    "query.agent_id": "$request.body#/scope/agent_id",
                },
            ),
        }
    },
    ("post", "/v1/permissions/rules"): {
        201: {
            "DeleteRule": _link("delete", "/v1/permissions/rules/{rule_id}", _RULE),
            "ListRules": _link(
                "get",
                "/v1/permissions/rules",
                {
                    "query.user_id": "$response.body#/user_id",
                    "query.project_id": "$response.body#/project_id",
                },
            ),
        }
    },
    ("post", "/v1/permissions/grants"): {
        201: {
            "Evaluate": _link(
                "post",
                "/v1/permissions:evaluate",
                user_id="$request.body#/user_id",
                session_id="$request.body#/session_id",
                tool_name="$request.body#/tool_name",
                tool_args="$request.body#/tool_args",
            ),
        }
    },
    ("put", "/v1/config/ttl"): {200: {"GetTtl": _link("get", "/v1/config/ttl")}},
    ("put", "/v1/config/extraction"): {
        200: {"GetExtraction": _link("get", "/v1/config/extraction")}
    },
}


ERROR_RESPONSE = {
    "title": "ErrorResponse",
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string", "examples": ["invalid_request"]},
                "message": {"type": "string", "examples": ["user_id: must not be empty"]},
                "fields": {
                    "type": "array",
                    "description": "Each field that is wrong, by its dotted path.",
                    "items": {
                        "type": "object",
                        "required": ["field", "message"],
                        "properties": {
                            "field": {"type": "string"},
                            "message": {"type": "string"},
                        },
                    },
                },
                "request_id": {
                    "type": "string",
                    "description": "The request's id, also in its `X-Request-ID` header.",
                },
            },
            # Some errors say more (a failed publish names the turn_id and event_id).
            "additionalProperties": {"type": "string"},
        }
    },
}


def install_openapi(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = contract(
                get_openapi(
                    title=app.title,
                    version=app.version,
                    description=app.description,
                    routes=app.routes,
                )
            )
        return app.openapi_schema

    # FastAPI's documented way to customise the document: replace the method.
    app.openapi = openapi  # type: ignore[method-assign]


def contract(document: dict[str, Any]) -> dict[str, Any]:
    """`document` with the security scheme, the error responses and the links added."""
    components = document.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    schemas["ErrorResponse"] = ERROR_RESPONSE
    schemas.update(filter_models.SCHEMAS)
    filter_models.declare_query(document)
    components["securitySchemes"] = {
        SECURITY_SCHEME: {
            "type": "http",
            "scheme": "bearer",
            "description": "An API key (`agent-memory keys create`); its app is the tenant.",
        }
    }
    error = {
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}
    }
    for path, operations in document.get("paths", {}).items():
        for method, operation in operations.items():
            if not path.startswith("/v1/"):
                continue
            operation["security"] = [{SECURITY_SCHEME: []}]
            statuses = dict(COMMON_ERRORS)
            if "requestBody" in operation:
                statuses.update(BODY_ERRORS)
            if "{" in path:
                statuses[404] = "No such resource (or the path names no route)."
            statuses.update(ROUTE_ERRORS.get((method, path), {}))
            responses = operation.setdefault("responses", {})
            for status, description in sorted(statuses.items()):
                responses[str(status)] = {"description": description, **error}
            for status, links in LINKS.get((method, path), {}).items():
                responses[str(status)]["links"] = links
    return document
