"""Permission patterns and the tier logic, without I/O."""

from __future__ import annotations

import time

import pytest

from shared.permissions import (
    GLOBAL,
    Candidate,
    PatternError,
    PatternSets,
    command_of,
    decide,
    grant_key,
    pattern_problem,
)


def rule(n: int, pattern: str, action: str, project: str = "P") -> Candidate:
    return Candidate(f"r{n}", project, pattern, action)  # type: ignore[arg-type]


def verdict(rules: list[Candidate], command: str, project: str | None = "P") -> tuple:
    patterns = tuple(r.pattern for r in rules)
    v = decide(rules, PatternSets().matches(patterns, command.encode()), project)
    return v.decision, v.tier, v.rule_id


def test_catastrophic_backtracking_pattern_matches_in_linear_time():
    sets = PatternSets()
    patterns = ("(a+)+$",)
    command = ("a" * 100_000 + "b").encode()
    assert sets.matches(patterns, b"warm") == set()  # compiled outside the timing
    started = time.perf_counter()
    found = sets.matches(patterns, command)
    took = time.perf_counter() - started
    assert found == set()
    assert took < 0.010, f"{took * 1000:.2f} ms"
    assert sets.matches(patterns, b"a" * 100_000) == {0}


def test_patterns_match_anywhere_like_re_search():
    sets = PatternSets()
    patterns = ("rm -rf", "^ls$", "pytest.*--timeout=30", "^$")
    assert sets.matches(patterns, b"sudo rm -rf /") == {0}
    assert sets.matches(patterns, b"ls -la") == set()
    assert sets.matches(patterns, b"ls") == {1}
    assert sets.matches(patterns, b"cd x && pytest -q --timeout=30") == {2}
    assert sets.matches(patterns, b"") == {3}
    assert PatternSets.one_by_one(patterns, b"ls") == {1}


def test_non_ascii_commands_and_patterns():
    sets = PatternSets()
    assert sets.matches(("^écho .$",), "écho ü".encode()) == {0}


def test_a_pattern_that_does_not_compile_names_its_index():
    with pytest.raises(PatternError) as raised:
        PatternSets().matches(("ok", r"(a)\1"), b"x")
    assert raised.value.index == 1
    assert raised.value.message == r"invalid escape sequence: \1"


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        (r"(a)\1", "is not an RE2 pattern (invalid escape sequence: \\1)"),
        ("(?=x)", "is not an RE2 pattern (invalid perl operator: (?=)"),
        ("", "must not be empty (use .* to match every command)"),
        ("a" * 1001, "must be at most 1000 characters"),
    ],
)
def test_pattern_problems(pattern, problem):
    assert pattern_problem(pattern).startswith(problem)


@pytest.mark.parametrize("pattern", ["rm -rf.*", r"^git push\b", "(?i)DROP TABLE", "a" * 1000])
def test_good_patterns(pattern):
    assert pattern_problem(pattern) is None


def test_block_beats_allow_within_a_tier_and_the_project_tier_comes_first():
    allow, block = rule(1, "^git", "ALLOW"), rule(2, "--force", "BLOCK")
    assert verdict([allow, block], "git push --force") == ("BLOCK", "project", "r2")
    assert verdict([allow, block], "git status") == ("ALLOW", "project", "r1")
    global_block = rule(3, "^git", "BLOCK", GLOBAL)
    assert verdict([allow, global_block], "git status") == ("ALLOW", "project", "r1")
    assert verdict([allow, global_block], "git status", project=None) == ("BLOCK", "global", "r3")
    assert verdict([rule(4, "^git", "ALLOW"), global_block], "ls") == ("PENDING", "none", None)


def test_the_oldest_matching_rule_is_named():
    rules = [rule(1, "a", "BLOCK"), rule(2, "b", "BLOCK")]
    assert verdict(rules, "ba") == ("BLOCK", "project", "r1")


def test_the_command_is_commandline_or_canonical_json():
    assert command_of({"CommandLine": "ls -la", "cwd": "/"}) == "ls -la"
    assert command_of({"b": 1, "a": "ü", "CommandLine": 3}) == '{"CommandLine":3,"a":"ü","b":1}'
    assert command_of({}) == "{}"


def test_grant_keys_share_the_sessions_hash_tag_and_differ_by_command():
    key = grant_key("app", "user", "s:1", "run_shell", "ls")
    assert key.startswith("am:{app:user:s%3A1}:grant:")
    assert key != grant_key("app", "user", "s:1", "run_shell", "ls ")
    assert key != grant_key("app", "user", "s:1", "run_shel", "lls")
