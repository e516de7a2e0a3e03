"""Part one of the demo: the reference scenario of long-term memory and the
reference permission checks, played through the HTTP API as an agent would.

User `user_dev_42` states global preferences and CloudRetail's stack and rules in
session `sess_2026_01`; session `sess_2026_02` (carrying the first) asks for them
back; another project and another user see none of CloudRetail's; switching to
Light Mode supersedes Dark Mode. Then the tool-permission tiers, with the
reference's rules for CloudRetail.
"""

from __future__ import annotations

from typing import Any

from services.dev.demo.api import Api, Check, check, wait_until

USER = "user_dev_42"
S1, S2 = "sess_2026_01", "sess_2026_02"
QUESTION = (
    "What are my general coding preferences and the backend/timeout rules I chose for "
    "CloudRetail in my previous session?"
)
TURNS = [
    (
        None,
        "As universal coding preferences across all my projects, I prefer Dark Mode UI "
        "and standardizing on Python 3.11 with PostgreSQL.",
    ),
    (
        "CloudRetail",
        "For project CloudRetail, the backend is FastAPI on AlloyDB, the short-term cache is "
        "Memorystore for Valkey, all tool execution timeouts must be capped at 30 seconds, "
        "and the region is us-east1.",
    ),
    (None, "Can you explain how Python list comprehensions work?"),
    ("CloudRetail", "What's the difference between TCP and UDP?"),
]
PERMISSIONS = [
    # (tool, command, expected decision, expected tier)
    ("run_shell", "pytest --timeout=30", "ALLOW", "project"),
    ("run_shell", "rm -rf /tmp/data", "BLOCK", "project"),
    ("run_shell", "ls", "PENDING", "none"),
    ("search_archived_memory", '{"query": "timeouts"}', "ALLOW", "exempt"),
]


def _texts(ctx: dict[str, Any]) -> list[dict[str, Any]]:
    return ctx["memories"] + ctx["pinned_rules"]


def _context(api: Api, user: str, session: str, project: str | None, prev: str | None = None):
    body = {"user_id": user, "session_id": session, "query": QUESTION}
    if project:
        body["project_id"] = project
    if prev:
        body["prev_session_id"] = prev
    return api.context(body)


def play(api: Api, say: Any) -> tuple[list[Check], dict[str, Any]]:
    say("\n== 1. The reference scenario: two sessions, global and project scopes")
    for n, (project, text) in enumerate(TURNS, start=1):
        body = {"user_id": USER, "turn_id": f"{S1}-{n}", "user": text, "assistant": "Understood."}
        if project:
            body["project_id"] = project
        api.record(S1, body)
        say(f"  {S1} turn {n} ({project or 'no project'}): {text[:70]}...")
    api.flush(S1, USER)
    say(f"  {S1} ends: the agent flushes it, so its memories are extracted now")

    def extracted() -> list[dict[str, Any]] | None:
        live = api.memories(USER)
        joined = " ".join(m["text"] for m in live)
        return live if "Dark Mode" in joined and "30 seconds" in joined else None

    live = wait_until("the extraction worker's memories of sess_2026_01", extracted)
    say(f"  the extraction worker wrote {len(live)} memories:")
    for m in live:
        where = m["project_id"] or "global"
        say(f"    [{m['kind']}, {where}] {m['text']}")

    ctx = _context(api, USER, S2, "CloudRetail", prev=S1)
    say(f"  {S2} asks: {QUESTION}")
    say(f"  its context ({ctx['tokens']} tokens):")
    for line in ctx["system_instruction"].splitlines():
        say(f"    | {line}")
    glob = " ".join(m["text"] for m in _texts(ctx) if m["scope"] == "global")
    cloud = " ".join(m["text"] for m in _texts(ctx) if m["project_id"] == "CloudRetail")
    pinned = [r for r in ctx["pinned_rules"] if "30 seconds" in r["text"]]
    other = _context(api, USER, "sess_2026_03", "OtherProject")
    stranger = _context(api, "someone_else", "sess_x", "CloudRetail")
    leaks = [m["text"] for m in _texts(other) if m["project_id"] is not None] + [
        m["text"] for m in _texts(stranger)
    ]
    checks = [
        check(
            "global preference recalled in a new session",
            "Dark Mode" in glob and "Python 3.11" in glob,
            "a global memory with Dark Mode and Python 3.11 in sess_2026_02's context",
            glob or "(no global memory)",
        ),
        check(
            "project architecture recalled in a new session",
            "FastAPI" in cloud and "AlloyDB" in cloud and bool(pinned),
            "a CloudRetail memory with FastAPI on AlloyDB, the 30-second rule pinned",
            f"{cloud or '(no CloudRetail memory)'}; pinned rules: {len(pinned)}",
        ),
        check(
            "no leak into another project or user",
            not leaks
            and "Dark Mode" in " ".join(m["text"] for m in _texts(other))
            and "CloudRetail" not in other["system_instruction"],
            "OtherProject: the global preferences only; someone_else: nothing",
            leaks or "no leak",
        ),
    ]
    checks.append(_light_mode(api, say))
    say("\n== 2. Tool permissions (the reference's rules for CloudRetail)")
    checks.append(_permissions(api, say))
    return checks, {"context_tokens": ctx["tokens"], "memories": len(live)}


def _light_mode(api: Api, say: Any) -> Check:
    body = {"user_id": USER, "turn_id": f"{S2}-1", "prev_session_id": S1}
    api.record(S2, body | {"user": "I've switched to Light Mode.", "assistant": "Noted."})
    api.flush(S2, USER)
    say(f"  {S2} turn 1: I've switched to Light Mode. (then the session ends)")

    def switched() -> list[dict[str, Any]] | None:
        theme = [m for m in api.memories(USER) if "Mode" in m["text"]]
        return theme if any("Light Mode" in m["text"] for m in theme) else None

    theme = wait_until("the theme memory to follow the switch", switched)
    detail = api.call("GET", f"/v1/memories/{theme[0]['id']}", params={"user_id": USER})
    actions = [r["action"] for r in detail["revisions"]]
    say(f"  now: {theme[0]['text']} (revisions: {', '.join(actions)})")
    return check(
        "Light Mode supersedes Dark Mode",
        len(theme) == 1 and "Dark Mode" not in theme[0]["text"] and "UPDATED" in actions,
        "one live theme memory, Light Mode, with an UPDATED revision",
        f"{[m['text'] for m in theme]}; revisions {actions}",
    )


def _permissions(api: Api, say: Any) -> Check:
    for pattern, action in (("pytest.*--timeout=30", "ALLOW"), ("rm -rf.*", "BLOCK")):
        rule = {"user_id": USER, "project_id": "CloudRetail", "tool_name": "run_shell"}
        api.call(
            "POST", "/v1/permissions/rules", 201, json=rule | {"pattern": pattern, "action": action}
        )
        say(f"  rule for CloudRetail: run_shell {pattern!r} -> {action}")
    wrong = []
    for tool, command, decision, tier in PERMISSIONS:
        args = {"CommandLine": command} if tool == "run_shell" else {"query": "timeouts"}
        verdict = api.call(
            "POST",
            "/v1/permissions:evaluate",
            json={
                "user_id": USER,
                "project_id": "CloudRetail",
                "session_id": S2,
                "tool_name": tool,
                "tool_args": args,
            },
        )
        say(f"  {tool} {command!r}: {verdict['decision']} (tier {verdict['tier']})")
        if (verdict["decision"], verdict["tier"]) != (decision, tier):
            wrong.append(f"{command}: {verdict['decision']}/{verdict['tier']}")
    return check(
        "the permission decisions",
        not wrong,
        "pytest ALLOW (project), rm -rf BLOCK (project), ls PENDING, exempt tool ALLOW",
        wrong or "as expected",
    )
