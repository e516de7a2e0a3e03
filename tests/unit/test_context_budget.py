"""The context's budget rule (shared.memory.context_budget) and how the session's
part is fitted (shared.memory.context_text): relevance per token, diversity across
sessions, neighbours after their hit, caps, and never over the budget."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.memory.context_budget import SPREAD, Candidate, choose, piece
from shared.memory.context_text import HEADER, TITLES, SessionPart, render
from shared.tokens import estimate_tokens


def turn(key, relevance, session="s1", words=10, needs="", counted=True):
    text = " ".join([key] * words)
    return Candidate(
        "recalled_turns",
        key,
        relevance,
        text,
        group=f"### Session {session}",
        needs=needs,
        spread=session,
        counted=counted,
    )


def memory(key, relevance, words=5):
    return Candidate("memories", key, relevance, "- " + " ".join([key] * words))


def keys(chosen):
    return [c.key for c in chosen.taken]


def test_the_most_relevance_per_token_goes_first():
    short = memory("m1", 0.5, words=2)
    long = turn("t1", 1.0, words=40)
    chosen = choose([long, short], 1000, TITLES, {})
    assert keys(chosen) == ["m1", "t1"]


def test_what_does_not_fit_is_left_and_counted():
    chosen = choose([turn("t1", 1.0, words=40), memory("m1", 0.5)], 20, TITLES, {})
    assert keys(chosen) == ["m1"]
    assert chosen.omitted([turn("t1", 1.0, words=40), memory("m1", 0.5)]) == {"recalled_turns": 1}


def test_a_neighbour_waits_for_its_hit_and_is_not_counted_when_left_out():
    hit = turn("t1", 0.2, words=30)
    neighbour = turn("t2", 0.9, words=3, needs="t1", counted=False)
    chosen = choose([neighbour, hit], 1000, TITLES, {})
    assert keys(chosen) == ["t1", "t2"]
    room = piece(hit.line) + piece(hit.group) + estimate_tokens("\n\n" + TITLES["recalled_turns"])
    only_hit = choose([neighbour, hit], room, TITLES, {})
    assert keys(only_hit) == ["t1"] and only_hit.omitted([neighbour, hit]) == {}


def test_one_session_cannot_fill_the_budget():
    # Three hits of one session and one of another, alike but for their relevance.
    same = [turn(f"a{i}", r, session="s1", words=40) for i, r in enumerate([1.0, 0.9, 0.8])]
    other = turn("b0", 0.8, session="s2", words=40)
    # Per token, s1's second hit beats s2's (whose session heading costs 4 tokens
    # more) until the first hit of s1 scales it by SPREAD.
    assert 0.9 / 30 > 0.8 / 34 > 0.9 * SPREAD / 30
    chosen = choose([*same, other], 1000, TITLES, {})
    assert keys(chosen) == ["a0", "b0", "a1", "a2"]


def test_a_cap_bounds_its_section_with_its_headings():
    candidates = [turn(f"t{i}", 1 / (i + 1)) for i in range(5)] + [memory("m1", 0.1)]
    cap = 40
    chosen = choose(candidates, 1000, TITLES, {"recalled_turns": cap})
    assert 0 < chosen.by_section["recalled_turns"] <= cap
    assert "m1" in keys(chosen)
    off = choose(candidates, 1000, TITLES, {"recalled_turns": 0})
    assert keys(off) == ["m1"]


@settings(max_examples=200, deadline=None)
@given(
    budget=st.integers(min_value=100, max_value=800),
    rules=st.lists(st.text(min_size=1, max_size=120), max_size=4),
    summary=st.text(max_size=600),
    turns=st.lists(st.text(min_size=1, max_size=300), max_size=5),
    flexible=st.lists(
        st.tuples(
            st.sampled_from(["memories", "recalled_turns", "long_term_summaries"]),
            st.floats(min_value=0.01, max_value=1.0),
            st.text(min_size=1, max_size=400),
            st.sampled_from(["s1", "s2", "s3"]),
        ),
        max_size=12,
    ),
)
def test_the_instruction_is_never_over_the_budget(budget, rules, summary, turns, flexible):
    part = SessionPart(list(rules), summary, "## Summary", list(turns))
    part.fit(budget, {})
    candidates = [
        Candidate(
            section,
            f"k{i}",
            relevance,
            text,
            group=f"### Session {session}" if section == "recalled_turns" else "",
            spread=session if section == "recalled_turns" else "",
        )
        for i, (section, relevance, text, session) in enumerate(flexible)
    ]
    chosen = choose(candidates, max(0, budget - part.tokens()), TITLES, {})
    sections = part.sections()
    for name in ("memories", "long_term_summaries", "recalled_turns"):
        lines: list[str] = []
        for c in chosen.taken:
            if c.section == name:
                if c.group and c.group not in lines:
                    lines.append(c.group)
                lines.append(c.line)
        sections.append((TITLES[name], lines))
    text = render(sections)
    assert estimate_tokens(text) <= budget or part.tokens() > budget
    # The session's part alone fits unless its header alone does not.
    assert part.tokens() <= budget or estimate_tokens(HEADER) > budget


def test_the_session_part_drops_old_turns_then_clips_the_summary_then_rules():
    part = SessionPart(["r1 " * 20, "r2 " * 20], "summary " * 60, "## Summary", ["t " * 40] * 3)
    full = part.tokens()
    part.fit(full - 10, {})
    assert part.omitted == {"recent_turns": 1} and len(part.turns) == 2
    part.fit(part.tokens() - 50, {})
    assert part.omitted["recent_turns"] == 2 and part.summary.startswith("summary")
    assert part.tokens() <= full - 10 - 50


def test_the_session_parts_caps():
    part = SessionPart(["rule one", "rule two"], "summary " * 60, "## Summary", ["t " * 40] * 3)
    part.fit(10_000, {"recent_turns": 0, "rules": 10, "summary": 30})
    assert part.turns == [] and part.rules == ["rule one"]
    assert part.section_tokens()["summary"] <= 30
    assert part.omitted == {"recent_turns": 3, "rules": 1, "summary": 1}
