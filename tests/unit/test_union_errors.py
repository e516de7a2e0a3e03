"""`OneOf`: a union's errors name the caller's path once, whatever pydantic tried."""

from __future__ import annotations

from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from shared.union_errors import OneOf


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int = Field(ge=0, le=9)


class Dog(BaseModel):
    kind: Literal["dog"]
    name: str

    @field_validator("name")
    @classmethod
    def _named(cls, value: str) -> str:
        if value == "{x}":
            raise PydanticCustomError("braced", "a name in {braces}")
        return value


class Home(BaseModel):
    ids: list[
        Annotated[int | Annotated[str, Field(max_length=3)], OneOf("must be a number or a text")]
    ]
    pets: list[Annotated[Cat | Dog, Field(discriminator="kind"), OneOf()]] = []
    any_pet: Annotated[Cat | Dog, OneOf("must be a cat or a dog")] | None = None


def _errors(body: dict) -> list[tuple[tuple, str, str]]:
    with pytest.raises(ValidationError) as refused:
        Home.model_validate(body)
    return [(e["loc"], e["type"], e["msg"]) for e in refused.value.errors()]


def test_a_value_of_no_members_type_is_one_error_with_the_message():
    assert _errors({"ids": [1, [2]]}) == [
        ((("ids", 1)), "union_type", "must be a number or a text")
    ]


def test_the_member_that_took_the_value_gives_the_reason():
    assert _errors({"ids": ["four"]}) == [
        (("ids", 0), "string_too_long", "String should have at most 3 characters")
    ]


def test_a_tagged_members_errors_have_no_tag_in_their_path():
    assert _errors({"ids": [], "pets": [{"kind": "cat", "lives": 10}, {"kind": "dog"}]}) == [
        (("pets", 0, "lives"), "less_than_equal", "Input should be less than or equal to 9"),
        (("pets", 1, "name"), "missing", "Field required"),
    ]


def test_a_bad_or_missing_tag_names_the_tags_field():
    assert _errors({"ids": [], "pets": [{"kind": "cow"}, {"name": "Rex"}]}) == [
        (("pets", 0, "kind"), "literal_error", "Input should be 'cat' or 'dog'"),
        (("pets", 1, "kind"), "missing", "Field required"),
    ]


def test_a_validators_own_error_keeps_its_words():
    assert _errors({"ids": [], "pets": [{"kind": "dog", "name": "{x}"}]}) == [
        (("pets", 0, "name"), "braced", "a name in {braces}")
    ]


def test_an_untagged_union_of_models_keeps_each_members_reasons_by_their_path():
    assert _errors({"ids": [], "any_pet": {"kind": "cat"}}) == [
        (("any_pet", "lives"), "missing", "Field required"),
        (("any_pet", "kind"), "literal_error", "Input should be 'dog'"),
        (("any_pet", "name"), "missing", "Field required"),
    ]
    assert _errors({"ids": [], "any_pet": 3}) == [
        (("any_pet",), "union_type", "must be a cat or a dog")
    ]
