"""What the demo checks before it starts a stack: a `gemini` provider needs an API
key, or a project and Application Default Credentials (the command's own exit and
message: tests/e2e/test_demo.py)."""

import google.auth
from google.auth.exceptions import DefaultCredentialsError
from pydantic import SecretStr

from services.demo.preflight import gemini_problem
from shared.config import load_settings


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


def test_credentials_or_offline_providers_need_nothing(monkeypatch):
    monkeypatch.setattr(google.auth, "default", lambda *a, **k: (object(), "my-project"))
    assert gemini_problem(load_settings(llm_provider="rules", embedding_provider="hash")) is None
    key = load_settings(embedding_provider="gemini", gemini_api_key=SecretStr("k"))
    assert gemini_problem(key) is None
    vertex = load_settings(
        llm_provider="gemini", gemini_api_key=None, google_cloud_project="my-project"
    )
    assert gemini_problem(vertex) is None


def test_the_default_project_is_no_vertex_project(monkeypatch):
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    monkeypatch.setattr(google.auth, "default", lambda *a, **k: (object(), "my-project"))
    problem = gemini_problem(load_settings(embedding_provider="gemini", gemini_api_key=None))
    assert problem is not None
    assert problem.startswith("--embeddings gemini needs credentials")
    assert "GOOGLE_CLOUD_PROJECT are not set" in problem
