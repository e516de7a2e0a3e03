"""Tool permissions for an ADK agent: a `before_tool_callback` over
`/v1/permissions:evaluate`.

`ALLOW` lets the tool run. `BLOCK` and `PENDING` (no rule decided: a human has
to confirm, then the agent service grants once) answer the model in the tool's
place with `{"status": "DENIED", "tool": name, "error": reason}`, and the tool
never runs. Any failure to get a decision denies too (fail closed).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from google.adk.tools import BaseTool, ToolContext

from shared.adk.callbacks import project_of
from shared.client import AsyncMemoryClient

log = structlog.get_logger("agent_memory.adk")

BeforeToolCallback = Callable[[BaseTool, dict[str, Any], ToolContext], Awaitable[dict | None]]


def denied(tool_name: str, reason: str) -> dict[str, str]:
    """What the model sees in place of a tool's result when the call is denied."""
    return {"status": "DENIED", "tool": tool_name, "error": reason}


def permission_guardrail(
    client: AsyncMemoryClient, project_id: str | None = None
) -> BeforeToolCallback:
    """A `before_tool_callback` that asks the API whether each tool call may run.

    The project is the session state's `project_id` when set, else `project_id`."""

    async def before_tool_callback(
        tool: BaseTool, args: dict[str, Any], tool_context: ToolContext
    ) -> dict | None:
        session = tool_context.session
        try:
            result = await client.evaluate_permission(
                session.user_id,
                session.id,
                tool.name,
                dict(args),
                project_id=project_of(tool_context.state, project_id),
            )
        except Exception as exc:
            log.warning(
                "tool call denied: no permission decision",
                tool=tool.name,
                session=session.id,
                error=repr(exc),
            )
            return denied(tool.name, f"permission check failed: {exc}")
        if result.decision == "ALLOW":
            return None
        log.info(
            "tool call denied",
            tool=tool.name,
            session=session.id,
            decision=result.decision,
            tier=result.tier,
            rule_id=result.rule_id,
        )
        return denied(tool.name, result.reason or f"decision {result.decision}")

    return before_tool_callback
