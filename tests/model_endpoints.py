"""The fake model endpoints behind one face, so that a test of how the pipeline
meets a misbehaving model is written once and runs for every model provider:
`gemini` (`tests.fake_gemini`) and `openai` (`tests.fake_openai`), each a real
HTTP server that the provider's real client talks to.

    with model_endpoint("openai") as endpoint:
        endpoint.script(endpoint.truncated('{"memories": ['), endpoint.answer(good))
        llm = endpoint.llm(endpoint.settings(base))
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from types import ModuleType
from typing import Any

from pydantic import SecretStr

from shared.config import Settings, load_settings
from shared.llm import LLM, make_llm
from tests import fake_gemini, fake_openai
from tests.fake_endpoint import Reply
from tests.fake_gemini_model import Judged, offline_chat, offline_model

PROVIDERS = ("gemini", "openai")


@dataclass
class ModelEndpoint:
    provider: str
    fake: Any  # FakeGemini | FakeOpenAI
    method: str  # the fake's method of generation
    replies: ModuleType  # the fake's module: its *_reply functions

    def settings(self, base: Settings | None = None, **updates: object) -> Settings:
        """`base` (or settings of no stack) with this provider against the fake, with
        short retries."""
        values: dict[str, object] = {
            "llm_provider": self.provider,
            "llm_retry_initial_seconds": 0.01,
            "llm_retry_seconds": 0.2,
            "llm_timeout_seconds": 2.0,
        }
        if self.provider == "gemini":
            values |= {"gemini_api_key": SecretStr("test-key"), "gemini_base_url": self.fake.url}
        else:
            values |= {"openai_api_key": SecretStr("test-key"), "openai_base_url": self.fake.url}
        values |= updates
        if base is None:
            return load_settings(**values)
        return base.model_copy(update=values)

    def env(self) -> dict[str, str]:
        """What a child process needs besides `settings_env` (secrets are not dumped)."""
        return {f"AM_{self.provider.upper()}_API_KEY": "test-key"}

    def llm(self, settings: Settings) -> LLM:
        return make_llm(settings)

    def answer_as_rules(self, judged: Judged | None = None) -> None:
        """Every request not scripted is answered as the `offline` provider would, the
        names `judged` names judged so (`tests.fake_gemini_model.Judged`)."""
        answer = offline_model if self.provider == "gemini" else offline_chat
        self.fake.defaults[self.method] = partial(answer, judged=judged)

    def answer_always(self, reply: Reply) -> None:
        self.fake.defaults[self.method] = lambda request: reply

    def script(self, *replies: Reply) -> None:
        self.fake.script(self.method, *replies)

    def calls(self) -> list[Any]:
        return self.fake.calls(self.method)

    def messages(self, n: int) -> list[tuple[str, str]]:
        """The (role, text) messages of the n-th generation request (0: the first),
        its system instruction aside."""
        return self.calls()[n].messages()

    def max_output_tokens(self, n: int) -> int:
        body = self.calls()[n].body
        if self.provider == "gemini":
            return body["generationConfig"]["maxOutputTokens"]
        return body["max_completion_tokens"]

    # -- replies, good and bad ------------------------------------------------
    def answer(self, value: Any, delay: float = 0.0) -> Reply:
        reply = self.replies.json_reply(value)
        reply.delay = delay
        return reply

    def text(self, text: str) -> Reply:
        return self.replies.text_reply(text)

    def truncated(self, text: str) -> Reply:
        return self.replies.truncated_reply(text)

    def empty(self) -> Reply:
        return self.replies.empty_reply()

    def error(self, status: int, retry_after: float | None = None) -> Reply:
        return self.replies.error_reply(status, retry_after=retry_after)


@contextmanager
def model_endpoint(provider: str) -> Iterator[ModelEndpoint]:
    """The fake endpoint of `provider`, started, its requests unscripted."""
    if provider == "gemini":
        with fake_gemini.FakeGemini() as fake:
            yield ModelEndpoint(provider, fake, "generateContent", fake_gemini)
    else:
        with fake_openai.FakeOpenAI() as fake:
            yield ModelEndpoint(provider, fake, "chat", fake_openai)


def as_json(value: Any) -> str:
    """A value as the fakes' `json_reply` writes it (what the model's answer holds)."""
    return json.dumps(value)
