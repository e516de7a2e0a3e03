"""Scripted agent conversations for the fake Gemini endpoint (`tests.fake_gemini`).

An agent framework sends the whole conversation on every model call, and
concurrent sessions interleave their calls, so a queue of replies cannot say
which conversation a reply belongs to. `ScriptedAgent` answers from the request
itself instead: it finds the latest user message, picks the script whose trigger
that message holds, and answers the script's next step (how many model turns
already follow that message). Install it as the fake's `generateContent` default:

    agent = ScriptedAgent()
    agent.on("clean up", function_call("run_shell", command="rm -rf /tmp/data"), text("Done."))
    fake.defaults["generateContent"] = agent
"""

from __future__ import annotations

import threading
from typing import Any

from shared.tokens import estimate_tokens
from tests.fake_gemini import Reply, Request, error_reply, generate_body

Part = dict[str, Any]


def text(value: str) -> Part:
    """A text part of a model reply."""
    return {"text": value}


def function_call(name: str, **args: Any) -> Part:
    """A `functionCall` part of a model reply: the model asks to run tool `name`."""
    return {"functionCall": {"name": name, "args": args}}


def _parts(content: dict[str, Any]) -> list[Part]:
    return content.get("parts", []) or []


def _is_user_message(content: dict[str, Any]) -> bool:
    """A content the user wrote (function responses also travel with role user)."""
    return content.get("role") == "user" and any("text" in p for p in _parts(content))


def user_message(request: Request) -> str:
    """The text of the latest user message of a generateContent request."""
    for content in reversed(request.body.get("contents", [])):
        if _is_user_message(content):
            return "\n".join(p["text"] for p in _parts(content) if "text" in p)
    return ""


def system_text(request: Request) -> str:
    """The system instruction a generateContent request carried."""
    instruction = request.body.get("systemInstruction") or {}
    return "\n".join(p.get("text", "") for p in _parts(instruction))


def function_responses(request: Request) -> list[dict[str, Any]]:
    """Every `functionResponse` part the request sent back to the model, in order."""
    return [
        p["functionResponse"]
        for content in request.body.get("contents", [])
        for p in _parts(content)
        if "functionResponse" in p
    ]


def _model_turns_since_user(request: Request) -> int:
    contents = request.body.get("contents", [])
    count = 0
    for content in reversed(contents):
        if _is_user_message(content):
            return count
        if content.get("role") == "model":
            count += 1
    return count


class ScriptedAgent:
    """Model replies chosen by the request's latest user message (a `FakeGemini`
    default for `generateContent`). Thread-safe: the fake serves requests in threads."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay  # seconds before each reply (lets concurrent sessions overlap)
        self._scripts: list[tuple[str, list[list[Part]]]] = []
        self._lock = threading.Lock()

    def on(self, trigger: str, *steps: Part | list[Part]) -> None:
        """For a user message holding `trigger`, answer the n-th model call after it
        with `steps[n]` (one part, or a list of parts)."""
        with self._lock:
            self._scripts.append((trigger, [s if isinstance(s, list) else [s] for s in steps]))

    def __call__(self, request: Request) -> Reply:
        message = user_message(request)
        step = _model_turns_since_user(request)
        with self._lock:
            scripts = list(self._scripts)
        for trigger, steps in scripts:
            if trigger in message:
                if step >= len(steps):
                    return error_reply(500, f"fake agent: no step {step} for {trigger!r}")
                parts = steps[step]
                output = sum(estimate_tokens(p.get("text", "")) for p in parts) or 1
                body = generate_body(parts, estimate_tokens(message), output)
                return Reply(body=body, delay=self.delay)
        return error_reply(500, f"fake agent: no script for {message!r}")
