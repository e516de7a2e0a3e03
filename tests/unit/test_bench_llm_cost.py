"""bench/llm_cost.py's pure helpers: the metrics it reads, the quantile it
interpolates, and the backlog it queues."""

import math

import pytest

from bench.llm_cost_metrics import (
    Scrape,
    buckets,
    histogram_quantile,
    is_embedding,
    is_model,
    usage,
)

EXPOSITION = """\
# HELP agent_memory_llm_calls_total Model requests.
# TYPE agent_memory_llm_calls_total counter
agent_memory_llm_calls_total{app="a",worker="x",purpose="extract",result="ok"} 10.0
agent_memory_llm_calls_total{app="b",worker="x",purpose="extract",result="ok"} 2.0
agent_memory_llm_calls_total{app="a",worker="x",purpose="extract",result="retried"} 1.0
agent_memory_llm_calls_total{app="a",worker="x",purpose="extract",result="rate_limited"} 7.0
agent_memory_llm_calls_total{app="a",worker="x",purpose="consolidate",result="ok"} 3.0
agent_memory_llm_calls_total{app="a",worker="x",purpose="embed_documents",result="ok"} 20.0
agent_memory_llm_calls_created{app="a",worker="x",purpose="extract",result="ok"} 1.7e9
# TYPE agent_memory_llm_tokens_total counter
agent_memory_llm_tokens_total{app="a",worker="x",purpose="extract",direction="input"} 900.0
agent_memory_llm_tokens_total{app="a",worker="x",purpose="extract",direction="output"} 50.0
agent_memory_llm_tokens_total{app="a",worker="x",purpose="consolidate",direction="input"} 100.0
agent_memory_llm_tokens_total{app="a",worker="x",purpose="embed_documents",direction="input"} 400.0
# TYPE agent_memory_db_transaction_seconds histogram
agent_memory_db_transaction_seconds_bucket{worker="extraction",le="0.05"} 80.0
agent_memory_db_transaction_seconds_bucket{worker="extraction",le="0.1"} 95.0
agent_memory_db_transaction_seconds_bucket{worker="extraction",le="+Inf"} 100.0
agent_memory_db_transaction_seconds_bucket{worker="sweep",le="0.05"} 10.0
agent_memory_db_transaction_seconds_bucket{worker="sweep",le="0.1"} 10.0
agent_memory_db_transaction_seconds_bucket{worker="sweep",le="+Inf"} 10.0
agent_memory_db_transaction_seconds_count{worker="extraction"} 100.0
"""


def test_the_model_calls_and_tokens_are_summed_over_every_other_label():
    scrape = Scrape.parse(EXPOSITION)
    model = usage(scrape, is_model)
    # every HTTP attempt of extract and consolidate, of both apps; rate_limited is
    # counted again under another result, and `_created` is a timestamp
    assert model.calls == 10 + 2 + 1 + 3
    assert (model.input_tokens, model.output_tokens, model.tokens) == (1000, 50, 1050)
    embeddings = usage(scrape, is_embedding)
    assert (embeddings.calls, embeddings.tokens) == (20, 400)


def test_older_metrics_name_the_purpose_task():
    old = 'agent_memory_llm_calls_total{provider="gemini",task="extract",result="ok"} 4.0\n'
    assert usage(Scrape.parse(old), is_model).calls == 4


def test_a_difference_of_two_scrapes_is_what_was_counted_between_them():
    before = Scrape.parse('agent_memory_llm_calls_total{purpose="extract",result="ok"} 4.0\n')
    after = Scrape.parse(
        'agent_memory_llm_calls_total{purpose="extract",result="ok"} 10.0\n'
        'agent_memory_llm_calls_total{purpose="consolidate",result="ok"} 2.0\n'
    )
    assert usage(after - before, is_model).calls == 8
    assert usage((after - before) + before, is_model).calls == 12


def test_the_histogram_buckets_are_summed_over_the_workers():
    assert buckets(Scrape.parse(EXPOSITION)) == [(0.05, 90.0), (0.1, 105.0), (math.inf, 110.0)]


def test_the_quantile_is_interpolated_within_its_bucket_as_prometheus_does():
    cumulative = [(0.05, 90.0), (0.1, 99.0), (0.25, 100.0), (math.inf, 100.0)]
    # rank 99 is the last of the (0.05, 0.1] bucket's 9
    assert histogram_quantile(0.99, cumulative) == pytest.approx(0.1)
    # rank 94.5: half of that bucket
    assert histogram_quantile(0.945, cumulative) == pytest.approx(0.075)
    # the first bucket's lower bound is 0
    assert histogram_quantile(0.5, cumulative) == pytest.approx(0.05 * 50 / 90)
    # in the +Inf bucket: the highest finite bound
    assert histogram_quantile(0.99, [(0.1, 5.0), (math.inf, 10.0)]) == 0.1
    assert histogram_quantile(0.99, [(0.1, 0.0), (math.inf, 0.0)]) is None
    assert histogram_quantile(0.99, []) is None


def test_the_backlog_is_cut_to_whole_windows_one_session_per_user_turn_by_turn():
    from bench.llm_cost_play import agent_users, backlog, conversations, kept

    convs = conversations(12)
    assert len({(c["seed"], c["conversation_id"]) for c in convs}) == 12
    events = backlog("d1", convs[:3], range(2, 4), 8)
    users = [e.user_id for e in events[:6]]
    assert len(set(users)) == 6  # turn 0 of every session first
    assert [e.turn_id for e in events if e.user_id == users[0]] == [
        t["turn_id"] for t in kept(convs[0]["sessions"][2]["turns"], 8)
    ]
    assert all(e.prev_session_id == "" for e in events)
    chains = agent_users("p1", convs[:2], 2)
    assert [s.prev_session_id for s in chains[0]] == ["", chains[0][0].session_id]


def test_a_drained_session_holds_whole_windows_of_turns_the_filter_keeps():
    from bench.llm_cost_play import kept

    def turn(user: str, assistant: str) -> dict:
        return {"user": user, "assistant": assistant}

    said = [turn(f"My editor is now vim {n}.", "Noted.") for n in range(6)]
    chatter = turn("thanks!", "You're welcome!")
    session = [said[0], chatter, *said[1:]]
    assert kept(session, 4) == [said[0], chatter, said[1], said[2], said[3]]
    with pytest.raises(ValueError):
        kept(session, 8)
