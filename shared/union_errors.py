"""Errors of a union that name the caller's path, not pydantic's members.

Pydantic puts the member it tried into an error's location: a `str | float | bool`
answers `values.name.constrained-str`, `values.name.float` and `values.name.bool`
for one bad value, and a union tagged by `type` answers `fields.0.string.name` for
`fields.0.name`. `Annotated[union, OneOf(message)]` validates the same, and its
errors name the path the caller wrote, each once:

- a member's label (the first part of the error's location under the union) is
  dropped;
- when the value is of no member's type, the members' type errors become one,
  `message` (none: they are kept as pydantic words them);
- when a member took the value but refused it (a string too long), its reason is
  the answer, and the other members' type errors are dropped;
- a tagged union's tag that is missing is the tag's field missing, and one that
  matches no member names the tag's field and lists the tags allowed.

The JSON schema is the union's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, get_args

from pydantic import GetCoreSchemaHandler, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError, core_schema
from pydantic_core.core_schema import ErrorType

_KNOWN: frozenset[str] = frozenset(get_args(ErrorType))
# Errors that say the value is not of a member's type (rather than refusing its content).
_MISMATCH_SUFFIXES = ("_type", "_parsing")
_MISMATCH = frozenset({"is_instance_of", "literal_error", "enum"})


@dataclass(frozen=True)
class OneOf:
    """Put after the union (and after its `Discriminator`, if tagged) in `Annotated`."""

    message: str | None = None

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_wrap_validator_function(self._validate, handler(source))

    def _validate(self, value: Any, handler: core_schema.ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError as exc:
            # Raised in a validator, a ValidationError's errors keep their locations
            # under this one's.
            errors = plain_errors(exc.errors(), value, self.message)
            raise ValidationError.from_exception_data(exc.title, errors) from None


def plain_errors(errors: list[Any], value: Any, message: str | None) -> list[InitErrorDetails]:
    """`errors` of a union validating `value`, as the module's docstring says."""
    own: list[InitErrorDetails] = []  # about the value itself, not a part of it
    inner: list[InitErrorDetails] = []
    for error in errors:
        loc = tuple(error["loc"])
        if error["type"] in ("union_tag_not_found", "union_tag_invalid"):
            inner.append(_tag_error(error, value))  # about the tag's field
            continue
        detail = _detail(error, loc[1:])  # loc[0]: the member's label
        (inner if len(loc) > 1 else own).append(detail)
    refusals = [e for e in own if not _mismatch(e)]
    if own and not refusals and message is not None:
        refusals = [{"type": PydanticCustomError("union_type", message), "loc": (), "input": value}]
    elif not refusals:
        refusals = own
    seen: set[tuple[str, tuple[int | str, ...], str]] = set()
    kept = []
    for detail in refusals + inner:
        key = (str(detail["type"]), tuple(detail["loc"]), str(detail.get("ctx")))
        if key not in seen:
            seen.add(key)
            kept.append(detail)
    return kept


def _mismatch(detail: InitErrorDetails) -> bool:
    kind = detail["type"]
    return isinstance(kind, str) and (kind.endswith(_MISMATCH_SUFFIXES) or kind in _MISMATCH)


def _detail(error: Any, loc: tuple[int | str, ...]) -> InitErrorDetails:
    kind: str | PydanticCustomError = error["type"]
    if kind not in _KNOWN:  # a validator's own PydanticCustomError: its words as they are
        kind = PydanticCustomError(error["type"], str(error["msg"]))
    detail: InitErrorDetails = {"type": kind, "loc": loc, "input": error["input"]}
    if "ctx" in error and isinstance(kind, str):
        detail["ctx"] = error["ctx"]
    return detail


def _tag_error(error: Any, value: Any) -> InitErrorDetails:
    ctx = error.get("ctx") or {}
    field = str(ctx.get("discriminator", "")).strip("'")
    if error["type"] == "union_tag_not_found":
        return {"type": "missing", "loc": (field,), "input": value}
    tags = str(ctx.get("expected_tags", "")).split(", ")
    expected = tags[0] if len(tags) == 1 else f"{', '.join(tags[:-1])} or {tags[-1]}"
    tag = ctx.get("tag")
    return {"type": "literal_error", "loc": (field,), "input": tag, "ctx": {"expected": expected}}
