"""The Google ADK integration with a real ADK `Runner` (`InMemorySessionService`)
whose Gemini model is the fake Gemini endpoint (scripted replies, function calls
included), against the real API served over HTTP (uvicorn on a free port) on the
real Postgres, Valkey and Pub/Sub emulator. The extraction handler runs in
process on the turns the API publishes, as the extraction worker would."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import cached_property

import psycopg
import pytest
from google.adk.agents import LlmAgent
from google.adk.events import Event
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.models import Gemini
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService, Session
from google.genai import Client, types
from prometheus_client import REGISTRY

from services.dev.localstack.process import free_port
from shared.adk import (
    AgentMemoryService,
    TurnLimits,
    archive_search_tool,
    memory_callbacks,
    permission_guardrail,
    turn_id_for,
    turns_from_events,
)
from shared.adk.limits import TRUNCATED
from shared.api_keys import create_key
from shared.client import AsyncMemoryClient, MemoryClient
from shared.events import TurnRecorded
from tests.bus_helpers import running
from tests.fake_gemini import FakeGemini, Request
from tests.fake_gemini_agent import (
    ScriptedAgent,
    function_call,
    function_responses,
    system_text,
    text,
    user_message,
)
from tests.support import serve_api, wait_for

APP = "dev-agent"  # the ADK app name: not the tenant (the API key decides that)
MODEL = "gemini-2.5-flash"
INSTRUCTION = "You are a careful engineer. Answer briefly."
PROJECT = "CloudRetail"


class FakeEndpointGemini(Gemini):
    """ADK's Gemini model with its google-genai client pointed at the fake endpoint."""

    endpoint: str = ""

    @cached_property
    def api_client(self) -> Client:
        return Client(api_key="fake-key", http_options=types.HttpOptions(base_url=self.endpoint))


class Shell:
    """The `run_shell` tool; records every command it really ran."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def tool(self):
        ran = self.ran

        def run_shell(command: str) -> dict:
            """Run a shell command in the project's checkout.

            Args:
              command: the command line.
            """
            ran.append(command)
            return {"status": "ok", "exit_code": 0, "output": f"ran: {command}"}

        return run_shell


# -- fixtures ------------------------------------------------------------------------


@pytest.fixture
def app_settings(settings):
    # API keys on: the key, not the ADK app name, decides the tenant.
    return settings.model_copy(update={"auth_disabled": False})


@pytest.fixture
def api_key(stack, ids) -> str:
    with psycopg.connect(stack.database_url, autocommit=True) as conn:
        key, _ = create_key(conn, ids["app"])
    return key


@dataclass
class Api:
    url: str
    key: str

    def client(self) -> AsyncMemoryClient:
        return AsyncMemoryClient(self.url, api_key=self.key)

    def blocking_client(self) -> MemoryClient:
        return MemoryClient(self.url, api_key=self.key)


@pytest.fixture
def api(app_settings, topology, api_key) -> Iterator[Api]:
    """The real API over real HTTP (uvicorn in a thread, on a free port), a key of
    this test's app."""
    with serve_api(app_settings) as url:
        yield Api(url, api_key)


@pytest.fixture
def extracted(app_settings, topology, pool, publisher, extraction) -> Iterator[list[TurnRecorded]]:
    """The extraction handler on the turns the API publishes; the turns it handled."""
    handled: list[TurnRecorded] = []

    def handle(event, delivery):
        outcome = extraction.handle_turn(event, delivery)
        handled.append(event)
        return outcome

    with running(app_settings, "turns-extraction", {TurnRecorded: handle}, publisher):
        yield handled


@pytest.fixture
def script() -> ScriptedAgent:
    return ScriptedAgent()


@pytest.fixture
def fake(script) -> Iterator[FakeGemini]:
    with FakeGemini() as server:
        server.defaults["generateContent"] = script
        yield server


@asynccontextmanager
async def agent_runner(
    fake, client, shell=None, *, memory=True, guardrail=True, memory_service=None
) -> AsyncIterator[Runner]:
    """A Runner of one LlmAgent (the agent-memory callbacks and tools on it), closed
    after use along with its model's HTTP client."""
    tools = [archive_search_tool(client)]
    if shell is not None:
        tools.append(shell.tool())
    extra = memory_callbacks(client) if memory else {}
    if guardrail:
        extra["before_tool_callback"] = permission_guardrail(client)
    agent = LlmAgent(
        name="engineer",
        model=FakeEndpointGemini(model=MODEL, endpoint=fake.url),
        instruction=INSTRUCTION,
        tools=tools,
        **extra,
    )
    runner = Runner(
        app_name=APP,
        agent=agent,
        session_service=InMemorySessionService(),
        memory_service=memory_service,
    )
    try:
        yield runner
    finally:
        await runner.close()
        await agent.model.api_client.aio.aclose()


async def new_session(runner, user_id, session_id, project_id=PROJECT) -> Session:
    state = {"project_id": project_id} if project_id else {}
    return await runner.session_service.create_session(
        app_name=APP, user_id=user_id, session_id=session_id, state=state
    )


async def ask(runner, user_id, session_id, message) -> str:
    """One invocation; the agent's final text."""
    final = ""
    new_message = types.Content(role="user", parts=[types.Part(text=message)])
    async for event in runner.run_async(
        user_id=user_id, session_id=session_id, new_message=new_message
    ):
        if event.is_final_response() and event.content and event.content.parts:
            final = "".join(p.text or "" for p in event.content.parts)
    return final


async def get_session(runner, user_id, session_id) -> Session:
    session = await runner.session_service.get_session(
        app_name=APP, user_id=user_id, session_id=session_id
    )
    assert session is not None
    return session


async def waited(probe, what, timeout=20.0):
    """The project's polling loop (`wait_for`) in a thread, so the event loop runs on."""
    return await asyncio.to_thread(wait_for, probe, timeout, what)


def memories_with(api, user_id, query, word, project_id=PROJECT):
    """A probe: the user's memories found for `query` that hold `word`."""

    def probe():
        with api.blocking_client() as client:
            found = client.search(user_id, query, project_id=project_id)
        return [m for m in found if word in m.text]

    return probe


def requests_for(fake, message: str) -> list[Request]:
    return [r for r in fake.calls("generateContent") if message in user_message(r)]


def user_event_ids(session: Session) -> list[str]:
    return [e.id for e in session.events if e.author == "user" and e.content.parts[0].text]


# -- the tests -----------------------------------------------------------------------


def test_a_denied_tool_call_never_runs_and_an_allowed_one_does(api, fake, script, ids):
    user, session_id = ids["user_id"], ids["session_id"]
    message = "Clean up /tmp/data, push, then run the tests."
    script.on(
        message,
        function_call("run_shell", command="rm -rf /tmp/data"),
        function_call("run_shell", command="git push --force"),
        function_call("run_shell", command="pytest --timeout=30"),
        text("I did not delete /tmp/data or push; the tests pass."),
    )
    shell = Shell()

    async def scenario():
        async with (
            api.client() as client,
            agent_runner(fake, client, shell) as runner,
        ):
            block = await client.add_rule(user, "run_shell", r"rm\s+-rf", "BLOCK")
            await client.add_rule(
                user, "run_shell", r"pytest.*--timeout=30", "ALLOW", project_id=PROJECT
            )
            await new_session(runner, user, session_id)
            answer = await ask(runner, user, session_id, message)
            return block, answer

    block, answer = asyncio.run(scenario())
    assert answer == "I did not delete /tmp/data or push; the tests pass."
    assert shell.ran == ["pytest --timeout=30"]
    calls = requests_for(fake, message)
    assert len(calls) == 4
    # What the model was told in place of each call's result, in order.
    responses = [r["response"] for r in function_responses(calls[-1])]
    assert responses[0] == {
        "status": "DENIED",
        "tool": "run_shell",
        "error": rf"blocked by global rule {block.id} (rm\s+-rf)",
    }
    assert responses[1] == {
        "status": "DENIED",
        "tool": "run_shell",
        "error": "needs human confirmation: no rule matches",
    }
    assert responses[2] == {"status": "ok", "exit_code": 0, "output": "ran: pytest --timeout=30"}
    # The model saw each denial before its next step.
    assert [r["response"]["status"] for r in function_responses(calls[1])] == ["DENIED"]


def test_concurrent_sessions_get_their_own_context_and_a_fact_carries_over(
    api, extracted, fake, script, ids
):
    user, other = ids["user_id"], f"{ids['user_id']}-b"
    first, second, third = (f"{ids['session_id']}-{n}" for n in (1, 2, 3))
    remember = "Remember that my favourite editor is Helix."
    question_2 = "Which editor should I open the repo in? (asks session two)"
    question_3 = "Which editor should I open the repo in? (asks session three)"
    script.on(remember, text("Noted: your favourite editor is Helix."))
    script.on(question_2, text("Helix."))
    script.on(question_3, text("Emacs."))
    script.delay = 0.3  # both sessions' model calls are in flight at once

    async def scenario():
        async with api.client() as client, agent_runner(fake, client) as runner:
            await new_session(runner, user, first)
            assert await ask(runner, user, first, remember) == (
                "Noted: your favourite editor is Helix."
            )
            session_1 = await get_session(runner, user, first)
            await client.write_memory(other, "User's favourite editor is Emacs.", kind="preference")
            helix = await waited(
                memories_with(api, user, "favourite editor", "Helix"), "the Helix memory"
            )
            await new_session(runner, user, second)
            await new_session(runner, other, third)
            answers = await asyncio.gather(
                ask(runner, user, second, question_2), ask(runner, other, third, question_3)
            )
            recorded = (await client.session(first, user)).turns
            return runner, session_1, helix, answers, recorded

    runner, session_1, helix, answers, recorded = asyncio.run(scenario())
    assert answers == ["Helix.", "Emacs."]
    # The after-agent callback recorded session 1's turn under the user event's id.
    [turn] = recorded
    assert turn.turn_id == turn_id_for(user_event_ids(session_1)[0])
    assert (turn.user, turn.assistant) == (remember, "Noted: your favourite editor is Helix.")
    assert turn.project_id == PROJECT
    assert any(e.turn_id == turn.turn_id for e in extracted)
    assert any("Helix" in m.text for m in helix)
    # Each session's model request carried its own ambient context, and only its own.
    [call_2] = requests_for(fake, question_2)
    [call_3] = requests_for(fake, question_3)
    system_2, system_3 = system_text(call_2), system_text(call_3)
    assert system_2.startswith(INSTRUCTION) and system_3.startswith(INSTRUCTION)
    assert "Helix" in system_2 and "Emacs" not in system_2
    # The turn that stated it is carried by its memory, not recalled again beside it.
    assert "the user's favourite editor is Helix." in system_2
    assert remember not in system_2
    assert "Emacs" in system_3 and "Helix" not in system_3
    # The first session's request had no memory of Helix yet (it was being told).
    [call_1] = requests_for(fake, remember)
    assert "Helix" not in system_text(call_1)
    # The shared agent was never changed.
    assert runner.agent.instruction == INSTRUCTION


def test_the_memory_service_records_sessions_once_and_searches(api, extracted, fake, script, ids):
    user, session_id = ids["user_id"], ids["session_id"]
    remember = "Remember that the staging database is called orchid."
    tests = "Run the tests, please."
    recall = "What did I call the staging database in an earlier session?"
    script.on(remember, text("Noted."))
    script.on(
        tests,
        function_call("run_shell", command="pytest --timeout=30"),
        text("All tests pass."),
    )
    script.on(
        recall,
        function_call("search_archived_memory", query="staging database", context_turns=1),
        text("You called it orchid."),
    )
    shell = Shell()

    async def scenario():
        async with api.client() as client:
            service = AgentMemoryService(client, project_id=PROJECT)
            # No memory callbacks: the memory service alone records the session.
            async with agent_runner(
                fake, client, shell, memory=False, memory_service=service
            ) as runner:
                return await conversation(client, service, runner)

    async def conversation(client, service, runner):
        await client.add_rule(
            user, "run_shell", r"pytest.*--timeout=30", "ALLOW", project_id=PROJECT
        )
        await new_session(runner, user, session_id)
        await ask(runner, user, session_id, remember)
        await ask(runner, user, session_id, tests)
        session = await get_session(runner, user, session_id)
        # A user message still waiting for its answer is left for a later call.
        waiting = Event(
            author="user",
            invocation_id="pending",
            content=types.Content(role="user", parts=[types.Part(text="And deploy?")]),
        )
        await runner.session_service.append_event(session, waiting)
        await service.add_session_to_memory(session)
        after_first = (await client.session(session_id, user)).turns
        await service.add_session_to_memory(session)
        async with api.client() as other:  # a process that recorded nothing itself
            await AgentMemoryService(other).add_session_to_memory(session)
        after_again = (await client.session(session_id, user)).turns
        await waited(lambda: len(extracted) >= 2, "the extraction of both turns")
        await waited(memories_with(api, user, "staging database", "orchid"), "orchid")
        found = await service.search_memory(app_name=APP, user_id=user, query="staging database")
        await service.add_memory(
            app_name=APP,
            user_id=user,
            memories=[
                MemoryEntry(
                    content=types.Content(
                        parts=[types.Part(text="The deploy window is Tuesday morning.")]
                    ),
                    custom_metadata={"kind": "rule", "entity_name": "deploy window"},
                )
            ],
        )
        deploy = await service.search_memory(app_name=APP, user_id=user, query="deploy window")
        answer = await ask(runner, user, session_id, recall)
        # The last invocation's events, as a delta.
        latest = await get_session(runner, user, session_id)
        delta = [e for e in latest.events if e.invocation_id == latest.events[-1].invocation_id]
        with pytest.raises(ValueError, match="session_id"):
            await service.add_events_to_memory(app_name=APP, user_id=user, events=delta)
        await service.add_events_to_memory(
            app_name=APP, user_id=user, events=delta, session_id=session_id
        )
        after_delta = (await client.session(session_id, user)).turns
        return session, after_first, after_again, found, deploy, answer, delta, after_delta

    session, after_first, after_again, found, deploy, answer, delta, after_delta = asyncio.run(
        scenario()
    )
    [remember_id, tests_id, _waiting] = user_event_ids(session)
    assert [t.turn_id for t in after_first] == [turn_id_for(remember_id), turn_id_for(tests_id)]
    assert [(t.user, t.assistant) for t in after_first] == [
        (remember, "Noted."),
        (tests, "All tests pass."),
    ]
    assert after_again == after_first
    # The tool call went to the turn's tool events, not to its texts.
    # (Recorded again by the fresh service, a turn is the same event: one event id.)
    handled = [e for e in extracted if e.turn_id == turn_id_for(tests_id)]
    assert len({e.event_id for e in handled}) == 1
    tests_event = handled[0]
    [tool] = tests_event.tool_events
    assert tool.name == "run_shell" and "pytest --timeout=30" in tool.arguments
    assert "ran: pytest --timeout=30" in tool.output
    # search_memory: MemoryEntry with the memory's text.
    entry = next(m for m in found.memories if "orchid" in _entry_text(m))
    assert entry.author == "user" and entry.id and entry.timestamp
    assert entry.custom_metadata["project_id"] == PROJECT
    # add_memory wrote a project rule.
    [written] = [m for m in deploy.memories if "Tuesday" in _entry_text(m)]
    assert written.custom_metadata["kind"] == "rule"
    assert written.custom_metadata["scope"] == "project"
    # The archive tool found the recorded turn for the model.
    assert answer == "You called it orchid."
    recall_call = requests_for(fake, recall)[-1]
    archive = function_responses(recall_call)[-1]
    assert archive["name"] == "search_archived_memory"
    assert any("orchid" in e["text"] for e in archive["response"]["episodes"])
    # context_turns reached the API: each hit carries the turns next to it, if any.
    offsets = [t["offset"] for e in archive["response"]["episodes"] for t in e["context"]]
    assert set(offsets) <= {-1, 1}
    [tools] = recall_call.body["tools"]
    assert {d["name"] for d in tools["functionDeclarations"]} == {
        "run_shell",
        "search_archived_memory",
    }
    # add_events_to_memory recorded the delta's turn, its tool call apart.
    assert [(t.turn_id, t.user, t.assistant) for t in after_delta[2:]] == [
        (turn_id_for(delta[0].id), recall, "You called it orchid.")
    ]
    assert after_delta[:2] == after_first
    # The deletes.

    async def deletes():
        async with api.client() as client:
            service = AgentMemoryService(client, project_id=PROJECT)
            await service.delete_memory(app_name=APP, user_id=user, memory_id=written.id)
            await service.delete_memory(app_name=APP, user_id=user, memory_id=written.id)
            left = await service.search_memory(app_name=APP, user_id=user, query="deploy window")
            await service.delete_user_memories(user)
            gone = await service.search_memory(app_name=APP, user_id=user, query="orchid")
            return left, gone

    left, gone = asyncio.run(deletes())
    assert written.id not in {m.id for m in left.memories}
    assert gone.memories == []


def _entry_text(entry: MemoryEntry) -> str:
    return "".join(p.text or "" for p in entry.content.parts)


def test_a_turn_the_callback_recorded_is_not_sent_again_by_the_memory_service(
    api, fake, script, ids
):
    user, session_id = ids["user_id"], ids["session_id"]
    script.on("Hello there.", text("Hi."))
    posted = (
        "agent_memory_api_request_seconds_count",
        {"method": "POST", "route": "/v1/sessions/{session_id}/turns", "status": "202"},
    )

    async def scenario():
        async with api.client() as client:
            service = AgentMemoryService(client, project_id=PROJECT)
            # docs/client.md's wiring: the callbacks and the memory service on one runner.
            async with agent_runner(fake, client, memory_service=service) as runner:
                await new_session(runner, user, session_id)
                before = REGISTRY.get_sample_value(*posted) or 0.0
                await ask(runner, user, session_id, "Hello there.")  # the callback records
                await service.add_session_to_memory(await get_session(runner, user, session_id))
                return REGISTRY.get_sample_value(*posted) - before, await client.session(
                    session_id, user
                )

    sent, view = asyncio.run(scenario())
    assert sent == 1  # the callback's; the memory service knew the turn
    assert [(t.user, t.assistant) for t in view.turns] == [("Hello there.", "Hi.")]


def test_the_guardrail_denies_when_the_api_cannot_be_reached(fake, script, ids):
    message = "Delete the build folder."
    script.on(
        message,
        function_call("run_shell", command="rm -rf build"),
        text("I could not get permission."),
    )
    shell = Shell()
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there

    async def scenario():
        async with (
            AsyncMemoryClient(dead, timeout=1.0, retries=0) as client,
            agent_runner(fake, client, shell, memory=False) as runner,
        ):
            await new_session(runner, ids["user_id"], ids["session_id"])
            return await ask(runner, ids["user_id"], ids["session_id"], message)

    assert asyncio.run(scenario()) == "I could not get permission."
    assert shell.ran == []
    [denial] = function_responses(requests_for(fake, message)[-1])
    assert denial["response"]["status"] == "DENIED"
    assert denial["response"]["tool"] == "run_shell"
    assert denial["response"]["error"].startswith("permission check failed: ")


def _event(author, *parts, invocation="inv-1", partial=None) -> Event:
    role = "user" if author == "user" else "model"
    return Event(
        author=author,
        invocation_id=invocation,
        partial=partial,
        content=types.Content(role=role, parts=list(parts)),
    )


def test_events_pair_into_turns_with_tools_apart():
    call = types.Part(
        function_call=types.FunctionCall(id="c1", name="run_shell", args={"command": "ls"})
    )
    result = types.Part(
        function_response=types.FunctionResponse(id="c1", name="run_shell", response={"out": "a"})
    )
    events = [
        _event("user", types.Part(text="List the files.")),
        _event("engineer", types.Part(text="thinking...", thought=True), call),
        _event("engineer", result),
        _event("engineer", types.Part(text="One file: a"), partial=True),
        _event("engineer", types.Part(text="One file: a")),
        _event("user", types.Part(text="Thanks."), invocation="inv-2"),
    ]
    first, second = turns_from_events(events)
    assert (first.turn_id, first.user, first.assistant) == (
        turn_id_for(events[0].id),
        "List the files.",
        "One file: a",
    )
    assert first.tool_events == [
        {"name": "run_shell", "arguments": {"command": "ls"}, "output": {"out": "a"}}
    ]
    assert first.complete
    assert (second.user, second.assistant, second.complete) == ("Thanks.", "", False)
    # A delta that starts mid-turn: the model's text is a turn of its own.
    [tail] = turns_from_events(events[4:5])
    assert (tail.turn_id, tail.user, tail.assistant) == (
        turn_id_for(events[4].id),
        "",
        "One file: a",
    )


def test_an_oversize_turn_is_cut_to_the_api_limits_not_lost(api, ids):
    user, session_id = ids["user_id"], ids["session_id"]
    call = types.Part(
        function_call=types.FunctionCall(id="c1", name="run_shell", args={"command": "cat x.log"})
    )
    output = {"output": "line of a very long log\n" * 20_000}  # about 480 KB
    result = types.Part(
        function_response=types.FunctionResponse(id="c1", name="run_shell", response=output)
    )
    events = [
        _event("user", types.Part(text="Look at this log:\x00 " + "é" * 20_000)),
        _event("engineer", call),
        _event("engineer", result),
        _event("engineer", types.Part(text="It is long. " * 4_000)),
    ]

    async def scenario():
        async with api.client() as client:
            await AgentMemoryService(client).add_events_to_memory(
                app_name=APP, user_id=user, events=events, session_id=session_id
            )
            return (await client.session(session_id, user)).turns

    [turn] = asyncio.run(scenario())  # the API took it: no 422
    assert turn.turn_id == turn_id_for(events[0].id)
    assert turn.user.startswith("Look at this log: éé") and turn.user.endswith(TRUNCATED)
    assert len(turn.user.encode()) <= 32 * 1024
    assert turn.assistant.startswith("It is long.") and turn.assistant.endswith(TRUNCATED)
    [fitted] = turns_from_events(events)[0].fitted(TurnLimits()).tool_events
    assert fitted["arguments"] == '{"command":"cat x.log"}'
    assert fitted["output"].startswith('{"output":"line of') and fitted["output"].endswith(
        TRUNCATED
    )
    assert sum(len(v.encode()) for v in fitted.values()) <= 256 * 1024


def test_the_memory_service_flushes_the_session_it_adds(api, app_settings, publisher, pool, ids):
    from shared.embeddings import make_embedder
    from shared.llm import OfflineLLM
    from tests.bus_helpers import extraction_worker

    # A window of ten turns with two minutes to wait: only the flush closes it now.
    local = app_settings.model_copy(
        update={"extraction_window_turns": 10, "extraction_window_seconds": 120.0}
    )
    user, session_id = ids["user_id"], ids["session_id"]
    said = [
        Event(
            author="user",
            invocation_id="i1",
            content=types.Content(role="user", parts=[types.Part(text="I prefer tabs.")]),
        ),
        Event(
            author="dev_agent",
            invocation_id="i1",
            content=types.Content(role="model", parts=[types.Part(text="Noted: tabs.")]),
        ),
    ]
    session = Session(id=session_id, app_name=APP, user_id=user, events=said)

    async def end_of_session():
        async with api.client() as client:
            await AgentMemoryService(client).add_session_to_memory(session)

    with extraction_worker(local, pool, OfflineLLM(), make_embedder(local), publisher):
        asyncio.run(end_of_session())
        found = wait_for(memories_with(api, user, "tabs", "tabs", project_id=None), 20, "tabs")
    assert [m.text for m in found] == ["User prefers tabs."]
