"""What the demo checks before it starts a stack: a `gemini` provider needs an API
key, or a project and Application Default Credentials, and an endpoint that answers
for its model with them (the command's own exit and message: tests/e2e/test_demo.py)."""

import google.auth
from google.auth.exceptions import DefaultCredentialsError
from google.oauth2.credentials import Credentials
from pydantic import SecretStr

from services.dev.demo.preflight import gemini_problem, openai_problem
from services.dev.localstack.process import free_port
from shared.config import load_settings
from tests.fake_gemini import error_reply


def _no_adc(*_args, **_kwargs):
    raise DefaultCredentialsError("none")


def test_a_project_without_adc_is_named(monkeypatch):
    monkeypatch.setattr(google.auth, "default", _no_adc)
    settings = load_settings(
        llm_provider="gemini", gemini_api_key=None, google_cloud_project="my-project"
    )
    problem = gemini_problem(settings)
    assert problem is not None
    assert "no Application Default Credentials" in problem
    assert "AM_GEMINI_API_KEY" in problem


def _keyed(url: str, **settings):
    return load_settings(gemini_api_key=SecretStr("k"), gemini_base_url=url, **settings)


def test_credentials_that_reach_the_model_or_offline_providers_pass(monkeypatch, fake):
    adc = Credentials(token="a-token")  # an access token that needs no refresh
    monkeypatch.setattr(google.auth, "default", lambda *a, **k: (adc, "my-project"))
    assert gemini_problem(load_settings(llm_provider="offline", embedding_provider="hash")) is None
    assert gemini_problem(_keyed(fake.url, embedding_provider="gemini")) is None
    vertex = load_settings(
        llm_provider="gemini",
        gemini_api_key=None,
        google_cloud_project="my-project",
        gemini_base_url=fake.url,
    )
    assert gemini_problem(vertex) is None
    # One look at each model the run asks Gemini for.
    both = _keyed(fake.url, llm_provider="gemini", embedding_provider="gemini")
    assert gemini_problem(both) is None
    assert [call.model for call in fake.calls("get")] == [
        "text-embedding-005",
        "gemini-3.5-flash",
        "gemini-3.5-flash",
        "text-embedding-005",
    ]


def test_an_endpoint_that_does_not_answer_is_named():
    url = f"http://127.0.0.1:{free_port()}"
    problem = gemini_problem(_keyed(url, llm_provider="gemini"))
    assert problem == (
        f"--llm gemini: cannot reach {url} ([Errno 111] Connection refused); "
        "check the network or AM_GEMINI_BASE_URL"
    )


def test_a_refused_key_and_an_unknown_model_are_named(fake):
    fake.script("get", error_reply(400, "API key not valid."))
    assert gemini_problem(_keyed(fake.url, llm_provider="gemini")) == (
        f"--llm gemini: {fake.url} refused the request (400: API key not valid.); "
        "check AM_GEMINI_API_KEY"
    )
    fake.script("get", error_reply(404, "models/nope is not found."))
    assert gemini_problem(
        _keyed(fake.url, embedding_provider="gemini", embedding_model="nope")
    ) == (
        f"--embeddings gemini: {fake.url} has no model 'nope' (404: models/nope is not found.); "
        "check AM_EMBEDDING_MODEL"
    )


def test_a_passing_outage_does_not_stop_the_demo(fake):
    # The workers retry through a 5xx; only what retrying cannot fix stops the demo.
    fake.script("get", error_reply(503, "overloaded"))
    assert gemini_problem(_keyed(fake.url, llm_provider="gemini")) is None


def test_the_default_project_is_no_vertex_project(monkeypatch):
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    monkeypatch.setattr(google.auth, "default", lambda *a, **k: (object(), "my-project"))
    problem = gemini_problem(load_settings(embedding_provider="gemini", gemini_api_key=None))
    assert problem is not None
    assert problem.startswith("--embeddings gemini needs credentials")
    assert "GOOGLE_CLOUD_PROJECT are not set" in problem


def test_an_openai_endpoint_that_answers_passes_and_one_out_of_reach_or_refusing_is_named():
    from tests.fake_openai import FakeOpenAI
    from tests.fake_openai import error_reply as openai_error

    with FakeOpenAI() as server:
        settings = load_settings(llm_provider="openai", openai_base_url=server.url)
        assert openai_problem(settings) is None
        assert server.calls("models")[0].authorization == "Bearer none"  # no key set
        server.script("models", openai_error(401))
        assert openai_problem(settings) == (
            f"--llm openai: {server.url} refused the key (HTTP 401); check AM_OPENAI_API_KEY"
        )
    gone = f"http://127.0.0.1:{free_port()}/v1"
    problem = openai_problem(load_settings(embedding_provider="openai", openai_base_url=gone))
    assert problem is not None
    assert problem.startswith(f"--embeddings openai: cannot reach {gone} (")
    assert problem.endswith("check AM_OPENAI_BASE_URL")
    assert openai_problem(load_settings()) is None  # offline providers ask nothing
