"""The rules a setting's value must keep beyond its type and bounds, one function
each, as `Settings` validates them (`field_validator`). A ValueError's message
becomes the configuration error that names the variable."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationInfo

_RESOURCE_CHARACTERS = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~+%"
)


def e5_dimension(value: int, info: ValidationInfo) -> int:
    # The model's vectors have 384 dimensions, no other number. (embedding_provider is
    # declared before embedding_dim: info.data holds it once it is valid.)
    if info.data.get("embedding_provider") == "e5" and value != 384:
        raise ValueError(f"must be 384 with AM_EMBEDDING_PROVIDER=e5, not {value}")
    return value


def iam_url(value: bool, info: ValidationInfo) -> bool:
    url = info.data.get("database_url")
    if value and url:
        from shared.db.iam import check_iam_url

        check_iam_url(url)  # a ValueError names what is wrong with AM_DATABASE_URL
    return value


def one_turn_fits(value: int, info: ValidationInfo) -> int:
    # Windows are split between turns, never inside one: the largest turn must fit.
    # (max_message_bytes is declared before: info.data holds it once it is valid.)
    least = info.data.get("max_message_bytes", 0) // 2 + 2_000
    if value < least:
        raise ValueError(f"must be at least {least} for AM_MAX_MESSAGE_BYTES")
    return value


def readable_file(value: Path | None) -> Path | None:
    if value is not None and not value.is_file():
        raise ValueError(f"{value} is not a readable file")
    return value


def explicit_true(value: object) -> object:
    # Only an explicit `true` turns authentication off ("1", "yes", "on" do not).
    if isinstance(value, str) and value.strip().lower() not in ("true", "false"):
        raise ValueError("must be true or false")
    return value


def scale_parses(value: str) -> str:
    from shared.scale import parse_scale

    parse_scale(value)
    return value


def resource_prefix(value: str) -> str:
    # Pub/Sub names start with a letter and hold letters, digits and -_.~+%.
    if not value or not value[0].isalpha() or value.lower().startswith("goog"):
        raise ValueError("must start with a letter and not with 'goog'")
    if set(value) - _RESOURCE_CHARACTERS:
        raise ValueError("may hold only letters, digits and - _ . ~ + %")
    return value


def offline_alias(value: object) -> object:
    """`rules`, the offline LLM provider's former name, is `offline` (deprecated)."""
    return "offline" if value == "rules" else value
