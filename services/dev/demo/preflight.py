"""What the demo checks before it starts a stack: a `gemini` provider without
credentials would otherwise show only as a timeout, a minute and a half later,
with no word of the credentials.

The credentials are resolved as `shared/llm/gemini.py` resolves them: the API key
(`AM_GEMINI_API_KEY`) when set, else Vertex AI in `GOOGLE_CLOUD_PROJECT` with
Application Default Credentials. With credentials, one cheap call (the model's
description, no tokens) shows within seconds whether Gemini can be reached and
accepts them: no network, a wrong key or an unknown model name each get their own
message instead of a timeout.
"""

from __future__ import annotations

import logging
import threading

from shared.config import Settings

# Finding no ADC can mean waiting for the GCE metadata server, a few seconds per
# attempt: past this, there is none to be had here.
ADC_DEADLINE_SECONDS = 4.0
# The one call that checks the endpoint, the credentials and the model.
REACH_TIMEOUT_SECONDS = 5.0
HOW = (
    "set AM_GEMINI_API_KEY to a Gemini API key, or use Vertex AI: set GOOGLE_CLOUD_PROJECT "
    "and Application Default Credentials (`gcloud auth application-default login`, or "
    "GOOGLE_APPLICATION_CREDENTIALS=<a service account key file>)"
)


def gemini_problem(settings: Settings) -> str | None:
    """Why the `gemini` provider(s) `settings` ask for cannot work here, or None."""
    users = [
        option
        for option, provider in (
            ("--llm", settings.llm_provider),
            ("--embeddings", settings.embedding_provider),
        )
        if provider == "gemini"
    ]
    if not users:
        return None
    asked = " and ".join(f"{option} gemini" for option in users)
    missing = None if settings.gemini_api_key is not None else _vertex_missing(settings)
    if missing is not None:
        return f"{asked} needs credentials: {missing}. To use Gemini, {HOW}."
    models = {"--llm": (settings.llm_model, "AM_LLM_MODEL")}
    models["--embeddings"] = (settings.embedding_model, "AM_EMBEDDING_MODEL")
    for option in users:
        problem = _unusable(settings, f"{option} gemini", *models[option])
        if problem:
            return problem
    return None


def _unusable(settings: Settings, asked: str, model: str, model_setting: str) -> str | None:
    """Why Gemini cannot serve `model` with these credentials, or None; a 5xx is
    a passing outage the workers retry through, not a reason to stop."""
    import httpx
    from google.auth.exceptions import GoogleAuthError
    from google.genai import errors

    from shared.llm.gemini import make_client

    client = make_client(settings.model_copy(update={"llm_timeout_seconds": REACH_TIMEOUT_SECONDS}))
    where = settings.gemini_base_url or (
        "the Gemini API" if settings.gemini_api_key is not None else "Vertex AI"
    )
    try:
        client.models.get(model=model)
    except errors.ClientError as exc:
        said = f"{exc.code}: {exc.message}" if exc.message else str(exc.code)
        if exc.code == 404:
            return f"{asked}: {where} has no model {model!r} ({said}); check {model_setting}"
        fix = "AM_GEMINI_API_KEY" if settings.gemini_api_key is not None else "the credentials"
        return f"{asked}: {where} refused the request ({said}); check {fix}"
    except errors.APIError:
        return None
    except GoogleAuthError as exc:
        why = " ".join(str(exc).split())
        return (
            f"{asked}: the Application Default Credentials do not work ({why}). "
            f"To use Gemini, {HOW}."
        )
    except (httpx.HTTPError, OSError) as exc:
        if isinstance(exc, httpx.TimeoutException):
            reason = f"no answer within {REACH_TIMEOUT_SECONDS:.0f} s"
        else:
            reason = " ".join(str(exc).split()) or type(exc).__name__
        return f"{asked}: cannot reach {where} ({reason}); check the network or AM_GEMINI_BASE_URL"
    return None


def _vertex_missing(settings: Settings) -> str | None:
    default_project = Settings.model_fields["google_cloud_project"].default
    if settings.google_cloud_project == default_project:
        return "AM_GEMINI_API_KEY and GOOGLE_CLOUD_PROJECT are not set"
    return _adc_missing()


def _adc_missing() -> str | None:
    """Why no Application Default Credentials are found, within the deadline."""
    found: list[str | None] = []

    def look() -> None:
        import google.auth

        # Its warning of each place without credentials: the demo's message says it.
        logging.getLogger("google.auth").setLevel(logging.ERROR)
        from google.auth.exceptions import GoogleAuthError

        try:
            google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
            found.append(None)
        except GoogleAuthError:  # none found, or found and unusable
            found.append(
                "AM_GEMINI_API_KEY is not set and no Application Default Credentials were found"
            )

    # A daemon thread: a metadata server that never answers must not hold the exit.
    thread = threading.Thread(target=look, daemon=True, name="adc-lookup")
    thread.start()
    thread.join(ADC_DEADLINE_SECONDS)
    if not found:
        return (
            f"AM_GEMINI_API_KEY is not set and no Application Default Credentials were found "
            f"within {ADC_DEADLINE_SECONDS:.0f} s"
        )
    return found[0]


def openai_problem(settings: Settings) -> str | None:
    """Why the `openai` provider(s) `settings` ask for cannot work here, or None: the
    endpoint's list of models (no tokens) shows within seconds whether it answers
    and accepts the key (a 5xx is a passing outage the workers retry through)."""
    users = [
        option
        for option, provider in (
            ("--llm", settings.llm_provider),
            ("--embeddings", settings.embedding_provider),
        )
        if provider == "openai"
    ]
    if not users:
        return None
    import openai

    from shared.llm.openai_compatible import make_client

    asked = " and ".join(f"{option} openai" for option in users)
    where = settings.openai_base_url
    client = make_client(settings.model_copy(update={"llm_timeout_seconds": REACH_TIMEOUT_SECONDS}))
    try:
        client.models.list()
    except openai.APIStatusError as exc:
        if exc.status_code in (401, 403):
            status = exc.status_code
            return f"{asked}: {where} refused the key (HTTP {status}); check AM_OPENAI_API_KEY"
        return None  # a server without the list, or a passing 5xx: the workers will see
    except (openai.APIConnectionError, openai.APITimeoutError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        return f"{asked}: cannot reach {where} ({reason}); check AM_OPENAI_BASE_URL"
    finally:
        client.close()
    return None
