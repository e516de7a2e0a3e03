"""The `offline` provider's compaction: the previous summary is never cut, the
episodes' most important sentences are added within the bound, deterministically."""

from datetime import UTC, datetime, timedelta

from shared.llm import DialogueTurn, OfflineLLM
from shared.llm.task_prompts import additions_bound, parse_compaction
from shared.tokens import estimate_tokens

T0 = datetime(2025, 11, 1, tzinfo=UTC)


def _episodes(*pairs):
    return [
        DialogueTurn(f"s/t{i}", T0 + timedelta(hours=i), user, assistant)
        for i, (user, assistant) in enumerate(pairs)
    ]


def test_the_first_compaction_keeps_what_matters_and_drops_chatter():
    episodes = _episodes(
        ("Hi! How are you?", "Fine, thanks."),
        ("I prefer Python for scripts. The weather is nice.", "Noted, Python it is."),
        ("The API timeout must be 30 seconds.", "Understood."),
    )
    completion = OfflineLLM().compact("", episodes, 600)
    assert completion.value == (
        "User: I prefer Python for scripts. User: The API timeout must be 30 seconds."
    )
    assert completion.usage.output_tokens == estimate_tokens(completion.value)
    assert completion.usage.input_tokens > 0


def test_every_sentence_of_the_previous_summary_is_kept_first_and_nothing_said_twice():
    previous = "User: The API timeout must be 30 seconds. User asked: What is a p99?"
    episodes = _episodes(
        ("The API timeout must be 30 seconds.", "Yes."),
        ("We decided to use Postgres for the backend.", "Good choice."),
    )
    summary = OfflineLLM().compact(previous, episodes, 600).value
    assert summary == previous + " User: We decided to use Postgres for the backend."


def test_the_bound_takes_the_most_important_new_sentences_in_the_order_said():
    episodes = _episodes(
        ("We are working on the checkout page.", "ok"),  # a goal (1)
        ("I prefer tabs over spaces.", "ok"),  # a choice (2)
        ("Never deploy on Fridays.", "ok"),  # a constraint (3)
    )
    previous = "User: Staging is called orchid, remember."
    # Room for the previous summary and two of the three new lines.
    room = (
        len(previous)
        + len(" User: Never deploy on Fridays.")
        + len(" User: I prefer tabs over spaces.")
    )
    bound = -(-room // 4)  # tokens, rounded up: still short of the third line
    summary = OfflineLLM().compact(previous, episodes, bound).value
    assert summary == (
        "User: Staging is called orchid, remember. "
        "User: I prefer tabs over spaces. User: Never deploy on Fridays."
    )
    assert estimate_tokens(summary) <= bound


def test_a_previous_summary_over_the_bound_is_kept_whole_and_episodes_still_add():
    previous = " ".join(f"User: Rule number {i} must hold." for i in range(40))
    episodes = _episodes(("Never use tabs.", "ok"), ("We must ship the whole catalogue.", "ok"))
    # Bound 40 tokens: the previous summary alone is far over it; the episodes get a
    # quarter of the bound (40 characters): the first line fits, the second does not.
    summary = OfflineLLM().compact(previous, episodes, 40).value
    assert summary == previous + " User: Never use tabs."


def test_episodes_with_nothing_to_keep_leave_one_line_of_gist():
    episodes = _episodes(("What is the capital of France?", "Paris."), ("Thanks!", "Welcome."))
    assert OfflineLLM().compact("", episodes, 600).value == (
        "User asked: What is the capital of France?"
    )
    assert OfflineLLM().compact("User: Never use tabs.", episodes, 600).value == (
        "User: Never use tabs. User asked: What is the capital of France?"
    )
    assert OfflineLLM().compact("", _episodes(("", "")), 600).value == ""


def test_compaction_is_deterministic():
    episodes = _episodes(
        *[(f"Service {i} must answer within {i} ms. Hello.", "We will use Go.") for i in range(30)]
    )
    first = OfflineLLM().compact("User: Never deploy on Fridays.", episodes, 200)
    second = OfflineLLM().compact("User: Never deploy on Fridays.", episodes, 200)
    assert first == second
    assert first.value.startswith("User: Never deploy on Fridays. ")


def test_the_gemini_reply_only_adds_to_the_previous_summary_within_its_bound():
    previous = "x " * 2000  # 1,000 tokens
    assert additions_bound(previous, 100) == 25  # a quarter of the bound, always
    assert additions_bound("short", 100) == 98
    long_reply = "The user prefers tea. " * 100
    alone = parse_compaction({"additions": long_reply}, "", 100)
    assert alone.startswith("The user prefers tea.") and estimate_tokens(alone) <= 100
    kept = parse_compaction({"additions": long_reply}, previous, 100)
    assert kept.startswith(previous.strip() + "\nThe user prefers tea.")
    assert estimate_tokens(kept[len(previous.strip()) + 1 :]) <= 25


def test_no_other_memory_may_take_the_compacted_summary_entity():
    from shared.llm.base import Candidate
    from shared.memory.consolidate import Source, new_memory

    source = Source("app", "user", "", "s1", datetime(2026, 1, 1, tzinfo=UTC), "e1")
    candidate = Candidate("Compacted-Episodes ", "fact", "global", "", "User likes tea.")
    assert new_memory(candidate, source, None).entity_name == ""
