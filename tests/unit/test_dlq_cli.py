"""The `dlq` command line refuses bad input itself: exit 2, a clear message, no traceback."""

import argparse

import pytest

from services.cli.main import main
from services.cli.parser import build_parser


def _refused(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    assert exited.value.code == 2
    return capsys.readouterr().err.splitlines()[-1]


@pytest.mark.parametrize("option", ["--older-than", "--newer-than"])
def test_a_bad_age_is_quoted_as_given(capsys, option):
    assert _refused(capsys, "dlq", "replay", "turns-summary", option, "5x") == (
        f"agent-memory dlq replay: error: argument {option}: "
        "'5x' is not a duration such as 90s, 15m, 2h, 7d"
    )
    assert _refused(capsys, "dlq", "replay", "turns-summary", option, "it's late") == (
        f"agent-memory dlq replay: error: argument {option}: "
        '"it\'s late" is not a duration such as 90s, 15m, 2h, 7d'
    )


@pytest.mark.parametrize("action", ["show", "replay"])
@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("0", "must be at least 1, not 0"),
        ("-3", "must be at least 1, not -3"),
        ("x", "'x' is not a whole number"),
    ],
)
def test_a_limit_is_at_least_one(capsys, action, value, problem):
    assert _refused(capsys, "dlq", action, "turns-summary", f"--limit={value}") == (
        f"agent-memory dlq {action}: error: argument --limit: {problem}"
    )


def test_purge_needs_an_event_id(capsys):
    assert _refused(capsys, "dlq", "purge", "turns-summary", "--yes") == (
        "agent-memory dlq purge: error: the following arguments are required: --event-id"
    )


def test_event_ids_and_ages_are_parsed():
    args = build_parser().parse_args(
        ["dlq", "replay", "s", "--event-id", "a", "--event-id", "b", "--older-than", "2h"]
    )
    assert args.event_ids == ["a", "b"]
    assert args.older_than.total_seconds() == 7200
    assert args.newer_than is None


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (found,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return found.choices


def test_every_dlq_action_and_option_has_help():
    dlq = _subparsers(build_parser())["dlq"]
    actions = _subparsers(dlq)
    assert sorted(actions) == ["list", "purge", "replay", "show"]
    (chooser,) = [a for a in dlq._actions if isinstance(a, argparse._SubParsersAction)]
    assert sorted(a.dest for a in chooser._choices_actions if a.help) == sorted(actions)
    missing = [
        f"{name} {action.dest}"
        for name, parser in actions.items()
        for action in parser._actions
        if not action.help
    ]
    assert missing == []
