"""Rule patterns: RE2, checked when a rule is written and compiled in `re2.Set`s
for matching.

Patterns are RE2 (linear time in the command, whatever the pattern: no
catastrophic backtracking on agent-supplied input) with `re.search` semantics:
a rule matches when its pattern matches anywhere in the command; anchor it
with `^...$` to match the whole command.

One `re2.Set` of every candidate can exceed RE2's memory budget (8 MiB) with
a few hundred rules of bounded repetitions (`x.{0,100}y`), and every call of
that scope would be PENDING. So the patterns are compiled in Sets of at most
`SET_PROGRAM_BUDGET` instructions (a Set that still fails is halved; a lone
pattern is matched by itself), and a rule is refused (422) when its pattern,
or its scope's rules together, exceed the limits of `shared.permissions.rules`:
any rule set the API accepted then compiles within the guardrail's time bound.

The command is `tool_args["CommandLine"]` when that is a string, else the
canonical JSON of `tool_args`.
"""

from __future__ import annotations

import functools
import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, NamedTuple

import re2
import structlog

from shared.identifiers import text_problem

log = structlog.get_logger("agent_memory.permissions")

MAX_PATTERN_LENGTH = 1000
# RE2 program instructions of one pattern (`.{0,1000}x` is about 9,000).
MAX_PATTERN_PROGRAM = 10_000
# Instructions per compiled Set: half the least that RE2's default max_mem
# (8 MiB) was seen to take, for a margin.
SET_PROGRAM_BUDGET = 40_000
# Each compiled Set may grow a DFA cache of up to RE2's max_mem (8 MiB) on
# unusual input: 128 Sets (not candidate lists: one list may need several) bound
# that at 1 GiB, as the `re2` module's own cache does.
PATTERN_SET_CACHE_SIZE = 128
PROGRAM_SIZE_CACHE_SIZE = 65_536

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # RE2 would print every rejected pattern on stderr


class PatternError(Exception):
    """A stored pattern does not compile (it was written around the API)."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(f"pattern {index} does not compile: {message}")
        self.index = index
        self.message = message


def canonical_json(tool_args: dict[str, Any]) -> str:
    return json.dumps(tool_args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def command_of(tool_args: dict[str, Any], canonical: str | None = None) -> str:
    """The text that patterns and grants see (`canonical`: the args' canonical JSON,
    if the caller has it already)."""
    command = tool_args.get("CommandLine")
    if isinstance(command, str):
        return command
    return canonical if canonical is not None else canonical_json(tool_args)


def pattern_problem(pattern: str) -> str | None:
    """Why `pattern` cannot be a rule's pattern, or None."""
    if not pattern:
        return "must not be empty (use .* to match every command)"
    if len(pattern) > MAX_PATTERN_LENGTH:
        return f"must be at most {MAX_PATTERN_LENGTH} characters"
    problem = text_problem(pattern)
    if problem:
        return problem
    try:
        size = program_size(pattern)
    except re2.error as exc:
        return f"is not an RE2 pattern ({_message(exc)}); RE2 has no back-references or lookarounds"
    if size > MAX_PATTERN_PROGRAM:
        return (
            f"is too complex: its RE2 program has {size} instructions, at most "
            f"{MAX_PATTERN_PROGRAM} (a bounded repetition such as .{{0,100}} costs about "
            "9 instructions per repeat: prefer .*)"
        )
    return None


@functools.lru_cache(maxsize=PROGRAM_SIZE_CACHE_SIZE)
def program_size(pattern: str) -> int:
    """The size of `pattern`'s RE2 program, in instructions (re2.error if it does
    not compile). Cached: a rule write sums those of its whole scope."""
    return re2.compile(pattern, _OPTIONS).programsize


def _compile_error(pattern: str) -> str:
    """RE2's reason for rejecting `pattern` (a Set only says that it did)."""
    try:
        re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        return _message(exc)
    return "rejected by RE2"


def _message(exc: re2.error) -> str:
    raw = exc.args[0] if exc.args else "invalid"
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


class _Group(NamedTuple):
    """Some of a call's patterns, compiled together. `indices`: their positions
    among the call's patterns; `matcher`: an `re2.Set` whose index 0 is the empty
    pattern, or (for a pattern that no Set took) the pattern's own RE2."""

    indices: tuple[int, ...]
    matcher: Any


class PatternSets:
    """Compiled patterns, keyed by the call's patterns (LRU). The rule cache expires
    every few seconds; unchanged rules then reuse their compiled Sets. Safe to use
    from several threads (an RE2 is; the cache takes a lock)."""

    def __init__(self, size: int = PATTERN_SET_CACHE_SIZE) -> None:
        self._size = size  # in compiled groups: each may hold a DFA cache of max_mem
        self._sets: OrderedDict[tuple[str, ...], tuple[_Group, ...]] = OrderedDict()
        self._groups = 0
        self._lock = threading.Lock()

    def matches(self, patterns: tuple[str, ...], command: bytes) -> set[int]:
        """Indices of the patterns that match somewhere in `command`."""
        return self.match_groups(self.compiled(patterns), patterns, command)

    def match_groups(
        self, groups: tuple[_Group, ...], patterns: tuple[str, ...], command: bytes
    ) -> set[int]:
        """`matches`, given `compiled(patterns)`."""
        found: set[int] = set()
        for group in groups:
            found |= self._group_matches(group, patterns, command)
        return found

    def cached(self, patterns: tuple[str, ...]) -> tuple[_Group, ...] | None:
        with self._lock:
            compiled = self._sets.get(patterns)
            if compiled is not None:
                self._sets.move_to_end(patterns)
            return compiled

    def _group_matches(self, group: _Group, patterns: tuple[str, ...], command: bytes) -> set[int]:
        if not isinstance(group.matcher, re2.Set):
            return {group.indices[0]} if group.matcher.search(command) else set()
        # None when nothing matched: never here, as the empty pattern (index 0)
        # matches every text, unless the Set's DFA ran out of memory and said
        # nothing. Then match one by one (a single RE2 falls back to its NFA:
        # slower, still linear, never wrong).
        found = group.matcher.Match(command) or ()
        if 0 not in found:
            log.warning(
                "pattern set out of memory; matching one by one", patterns=len(group.indices)
            )
            own = tuple(patterns[i] for i in group.indices)
            return {group.indices[i] for i in self.one_by_one(own, command)}
        return {group.indices[i - 1] for i in found if i}

    @staticmethod
    def one_by_one(patterns: tuple[str, ...], command: bytes) -> set[int]:
        return {i for i, p in enumerate(patterns) if re2.compile(p, _OPTIONS).search(command)}

    def compiled(self, patterns: tuple[str, ...]) -> tuple[_Group, ...]:
        """`patterns` compiled (from the cache, or now)."""
        compiled = self.cached(patterns)
        if compiled is not None:
            return compiled
        compiled = compile_groups(patterns)
        with self._lock:
            if patterns not in self._sets:
                self._sets[patterns] = compiled
                self._groups += len(compiled)
            # The newest always stays, whatever its size.
            while self._groups > self._size and len(self._sets) > 1:
                _, evicted = self._sets.popitem(last=False)
                self._groups -= len(evicted)
        return compiled


def compile_groups(patterns: Sequence[str]) -> tuple[_Group, ...]:
    """`patterns` compiled in Sets of at most SET_PROGRAM_BUDGET instructions, in
    order (a pattern over the budget gets a Set of its own). PatternError names
    the first pattern that does not compile."""
    groups: list[_Group] = []
    chunk: list[int] = []
    total = 0
    for index, pattern in enumerate(patterns):
        try:
            size = program_size(pattern)
        except re2.error as exc:
            raise PatternError(index, _message(exc)) from None
        if chunk and total + size > SET_PROGRAM_BUDGET:
            groups += _compile_set(patterns, chunk)
            chunk, total = [], 0
        chunk.append(index)
        total += size
    if chunk:
        groups += _compile_set(patterns, chunk)
    return tuple(groups)


def _compile_set(patterns: Sequence[str], indices: list[int]) -> list[_Group]:
    compiled = re2.Set.SearchSet(_OPTIONS)
    compiled.Add("")
    for index in indices:
        try:
            compiled.Add(patterns[index])
        except re2.error:
            raise PatternError(index, _compile_error(patterns[index])) from None
    try:
        compiled.Compile()
    except re2.error:
        # Over RE2's memory budget after all (the sizes only estimate a Set's):
        # halve it; one pattern alone is matched by its own RE2, which compiled.
        log.warning("pattern set over its memory budget; split", patterns=len(indices))
        if len(indices) == 1:
            return [_Group((indices[0],), re2.compile(patterns[indices[0]], _OPTIONS))]
        half = len(indices) // 2
        return _compile_set(patterns, indices[:half]) + _compile_set(patterns, indices[half:])
    return [_Group(tuple(indices), compiled)]
