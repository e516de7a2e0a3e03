from datetime import UTC, datetime, timedelta

from services.summary_worker.folding import FoldPolicy
from shared.llm import DialogueTurn, OfflineLLM
from shared.tokens import clip_to_tokens, estimate_tokens

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _turns(*pairs):
    return [
        DialogueTurn(f"t{i}", T0 + timedelta(seconds=i), user, assistant)
        for i, (user, assistant) in enumerate(pairs)
    ]


def test_the_rules_summary_keeps_choices_constraints_and_goals_and_drops_chatter():
    turns = _turns(
        ("Hi there! How are you today?", "Hello! Fine, thanks."),
        ("I prefer Python for scripts. The weather is nice.", "Noted, Python it is."),
        ("The API timeout must be 30 seconds.", "Understood."),
        ("We are trying to migrate the billing service.", "Good luck with that."),
    )
    completion = OfflineLLM().summarize("", turns, 600)
    assert completion.value == (
        "User: I prefer Python for scripts. "
        "User: The API timeout must be 30 seconds. "
        "User: We are trying to migrate the billing service."
    )
    assert completion.usage.output_tokens == estimate_tokens(completion.value)
    assert completion.usage.input_tokens > 0


def test_the_previous_summary_is_kept_and_nothing_is_said_twice():
    previous = "User: I prefer Python for scripts."
    turns = _turns(("I prefer Python for scripts.", "Sure."), ("Never deploy on Fridays.", "OK."))
    summary = OfflineLLM().summarize(previous, turns, 600).value
    assert summary == "User: I prefer Python for scripts. User: Never deploy on Fridays."


def test_turns_with_nothing_to_keep_leave_a_gist():
    turns = _turns(("What is the capital of France?", "Paris."), ("And of Spain?", "Madrid."))
    assert OfflineLLM().summarize("", turns, 600).value == (
        "User asked: What is the capital of France?"
    )


def test_the_bound_drops_goals_first_then_choices_and_keeps_constraints():
    turns = _turns(
        ("We are working on the checkout page.", "ok"),
        ("I like tabs over spaces.", "ok"),
        ("Production deploys must never happen on Fridays.", "ok"),
    )
    full = OfflineLLM().summarize("", turns, 600).value
    assert full.count("User:") == 3
    # Room for the constraint only (its line is 56 characters: 14 tokens).
    bounded = OfflineLLM().summarize("", turns, 14).value
    assert bounded == "User: Production deploys must never happen on Fridays."
    assert estimate_tokens(bounded) <= 14


def test_the_summary_is_deterministic():
    turns = _turns(("I prefer dark mode and I always use vim.", "Noted."))
    assert OfflineLLM().summarize("x.", turns, 50) == OfflineLLM().summarize("x.", turns, 50)
    # The same text every time, in any process: nothing but the input decides it.
    assert OfflineLLM().summarize("x.", turns, 50).value == (
        "x. User: I prefer dark mode and I always use vim."
    )


def test_clip_to_tokens_cuts_at_a_sentence_end_within_the_bound():
    text = "First sentence here. Second sentence is longer than the first one."
    assert clip_to_tokens(text, 100) == text
    assert clip_to_tokens(text, 8) == "First sentence here."
    assert estimate_tokens(clip_to_tokens("word " * 100, 10)) <= 10


def test_fold_policy_triggers_and_window():
    policy = FoldPolicy(trigger_turns=10, trigger_tokens=4000, kept_turns=4)
    assert not policy.due(10, 3999)
    assert policy.due(11, 0)
    assert policy.due(1, 4001)
    turns = list(range(11))
    assert policy.to_fold(turns) == list(range(7))
    assert FoldPolicy(kept_turns=4).to_fold([1, 2, 3]) == []
