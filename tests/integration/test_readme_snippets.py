"""The snippets of the README and docs/client.md run as written, against the live API
over HTTP."""

import os
import re

from tests.integration.test_client import api_settings, base_url, keys  # noqa: F401 - fixtures
from tests.support import REPO


def snippet(name: str, document: str = "README.md") -> str:
    text = (REPO / document).read_text(encoding="utf-8")
    match = re.search(rf"<!-- snippet: {name} -->\n```python\n(.*?)```", text, re.DOTALL)
    assert match, f"{document} has no snippet {name!r}"
    return match.group(1)


def test_the_client_snippet_runs(base_url, keys, monkeypatch):  # noqa: F811 - fixtures
    monkeypatch.setenv("AGENT_MEMORY_URL", base_url)
    monkeypatch.setenv("AGENT_MEMORY_API_KEY", keys["app"])
    code = snippet("client")
    assert "MemoryClient" in code and os.environ["AGENT_MEMORY_URL"] == base_url
    exec(compile(code, "README.md:client", "exec"), {"__name__": "readme_snippet"})  # noqa: S102


def test_the_adk_snippet_wires_an_agent(base_url, keys, monkeypatch):  # noqa: F811 - fixtures
    monkeypatch.setenv("AGENT_MEMORY_URL", base_url)
    monkeypatch.setenv("AGENT_MEMORY_API_KEY", keys["app"])
    scope = {"__name__": "readme_snippet"}
    code = snippet("adk", "docs/client.md")
    exec(compile(code, "docs/client.md:adk", "exec"), scope)  # noqa: S102
    agent, runner = scope["agent"], scope["runner"]
    assert runner.agent is agent and agent.before_tool_callback is not None
    assert agent.before_model_callback is not None and agent.after_agent_callback is not None
    assert [getattr(t, "name", getattr(t, "__name__", "")) for t in agent.tools] == [
        "run_shell",
        "search_archived_memory",
    ]
