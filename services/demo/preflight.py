"""What the demo checks before it starts a stack: a `gemini` provider without
credentials would otherwise show only as a timeout, a minute and a half later,
with no word of the credentials.

The credentials are resolved as `shared/llm/gemini.py` resolves them: the API key
(`AM_GEMINI_API_KEY`) when set, else Vertex AI in `GOOGLE_CLOUD_PROJECT` with
Application Default Credentials.
"""

from __future__ import annotations

import logging
import threading

from shared.config import Settings

# Finding no ADC can mean waiting for the GCE metadata server, a few seconds per
# attempt: past this, there is none to be had here.
ADC_DEADLINE_SECONDS = 4.0
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
    if not users or settings.gemini_api_key is not None:
        return None
    missing = _vertex_missing(settings)
    if missing is None:
        return None
    asked = " and ".join(f"{option} gemini" for option in users)
    return f"{asked} needs credentials: {missing}. To use Gemini, {HOW}."


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
