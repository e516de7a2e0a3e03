"""The configuration reference is rendered from the settings' own definitions."""

import argparse
from typing import Literal

import pytest
from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.cli import config_reference
from services.cli.config_reference import (
    BEGIN,
    END,
    SECTIONS,
    MarkersMissing,
    reference,
    replace_generated,
    sections,
)
from shared.config import Settings


class Sample(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AM_", use_attribute_docstrings=True)

    database_url: str | None = None
    """where | the data lives"""
    topic_prefix: str = ""
    """a prefix"""
    gemini_api_key: SecretStr | None = SecretStr("hunter2")
    """a secret"""
    pull_mode: Literal["auto", "unary"] = "auto"
    """how to pull"""
    worker_concurrency: int | None = Field(default=None, ge=1, le=1000)
    """handlers at once"""
    worker_shutdown_seconds: float = Field(default=8.0, gt=0)
    """grace"""
    auth_disabled: bool = False
    """no keys"""


def _rows(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def _sample_sections(monkeypatch):
    monkeypatch.setattr(
        config_reference,
        "SECTIONS",
        (("Services", "database_url"), ("Pub/Sub", "topic_prefix"), ("Workers", "pull_mode")),
    )


def test_a_row_holds_the_variable_its_default_its_values_and_its_meaning(monkeypatch):
    _sample_sections(monkeypatch)
    text = reference(Sample)
    assert text.startswith(BEGIN + "\n") and text.endswith(END + "\n")
    assert _rows(text) == {
        "AM_DATABASE_URL": ["(unset)", "", "where \\| the data lives"],
        "AM_TOPIC_PREFIX": ["(empty)", "", "a prefix"],
        "AM_GEMINI_API_KEY": ["(secret)", "", "a secret"],
        "AM_PULL_MODE": ["`auto`", "`auto`, `unary`", "how to pull"],
        "AM_WORKER_CONCURRENCY": ["(unset)", "1–1000", "handlers at once"],
        "AM_WORKER_SHUTDOWN_SECONDS": ["`8`", "> 0", "grace"],
        "AM_AUTH_DISABLED": ["`false`", "`true`, `false`", "no keys"],
    }
    assert "hunter2" not in text
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings == ["## Services", "## Pub/Sub", "## Workers"]


def test_a_setting_without_a_description_is_refused(monkeypatch):
    _sample_sections(monkeypatch)

    class Undocumented(Sample):
        pull_mode: Literal["auto", "unary"] = "auto"

    with pytest.raises(ValueError, match="'pull_mode' has no description"):
        reference(Undocumented)


def test_every_setting_is_described_and_in_one_section():
    grouped = sections(Settings)
    assert [title for title, _ in grouped] == [title for title, _ in SECTIONS]
    assert [name for _, names in grouped for name in names] == list(Settings.model_fields)
    assert [n for n, f in Settings.model_fields.items() if not (f.description or "").strip()] == []


def test_a_section_must_start_at_a_real_setting(monkeypatch):
    monkeypatch.setattr(
        config_reference, "SECTIONS", (("Services", "database_url"), ("Gone", "no_such_field"))
    )
    with pytest.raises(ValueError, match="no_such_field"):
        sections(Sample)


def test_writing_replaces_only_the_generated_part():
    document = f"# Configuration\n\nIntro.\n\n{BEGIN}\nold table\n{END}\n\nAfter.\n"
    generated = f"{BEGIN}\nnew table\n{END}\n"
    assert replace_generated(document, generated) == (
        f"# Configuration\n\nIntro.\n\n{BEGIN}\nnew table\n{END}\n\nAfter.\n"
    )
    with pytest.raises(MarkersMissing):
        replace_generated("# Configuration\n", generated)


def test_the_command_prints_the_reference_from_the_defaults(capsys, monkeypatch):
    monkeypatch.setenv("AM_API_PORT", "9999")
    args = argparse.Namespace(command="config", config_command="reference", write=False)
    assert config_reference.run_config_command(args, Settings()) == 0
    printed = capsys.readouterr().out
    assert printed == reference()
    assert _rows(printed)["AM_API_PORT"][0] == "`8080`"


def test_write_refuses_a_document_without_markers(capsys, monkeypatch, tmp_path):
    target = tmp_path / "configuration.md"
    target.write_text("# Configuration\n", encoding="utf-8")
    monkeypatch.setattr(config_reference, "CONFIGURATION_MD", target)
    args = argparse.Namespace(command="config", config_command="reference", write=True)
    assert config_reference.run_config_command(args, Settings()) == 2
    assert "markers of the generated part are missing" in capsys.readouterr().err
    assert target.read_text(encoding="utf-8") == "# Configuration\n"
    target.write_text(f"Intro.\n\n{BEGIN}\n{END}\n", encoding="utf-8")
    assert config_reference.run_config_command(args, Settings()) == 0
    assert target.read_text(encoding="utf-8") == "Intro.\n\n" + reference()
