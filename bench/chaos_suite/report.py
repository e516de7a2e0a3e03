"""A scenario's row of the table, its tally from what the stores hold, and the report."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from bench.chaos_suite.burst import Turn
from bench.chaos_suite.console import say
from bench.chaos_suite.observe import TARGET_DLQ, TARGETS, Observation


@dataclass
class Row:
    name: str
    fault: str
    at: str = "-"
    sent: int = 0
    accepted: int = 0
    buffer_once: str = "-"
    archive_once: str = "-"
    summary_handled: str = "-"
    lost: int = 0
    duplicated: int = 0
    dlq_valid: int = 0
    dlq_invalid: str = "-"
    lost_with_emulator: str = "-"
    recovery: str = "-"
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    recovered: bool = True

    @property
    def ok(self) -> bool:
        return not self.failures

    def fail(self, reason: str) -> None:
        self.failures.append(reason)


COLUMNS = [
    ("scenario", "name"),
    ("fault", "fault"),
    ("injected at", "at"),
    ("sent", "sent"),
    ("accepted", "accepted"),
    ("buffer 1x", "buffer_once"),
    ("archive 1x", "archive_once"),
    ("summary worker", "summary_handled"),
    ("lost", "lost"),
    ("dup", "duplicated"),
    ("DLQ valid", "dlq_valid"),
    ("DLQ invalid", "dlq_invalid"),
    ("lost w/ emulator", "lost_with_emulator"),
    ("recovery", "recovery"),
    ("result", "result"),
]


def table(rows: list[Row]) -> str:
    cells = [
        [
            ("PASS" if row.ok else "FAIL") if attr == "result" else str(getattr(row, attr))
            for _title, attr in COLUMNS
        ]
        for row in rows
    ]
    titles = [title for title, _attr in COLUMNS]
    widths = [max(len(c) for c in column) for column in zip(titles, *cells, strict=True)]
    numeric = {"sent", "accepted", "lost", "duplicated", "dlq_valid"}

    def line(values: list[str]) -> str:
        return "  ".join(
            v.rjust(w) if attr in numeric else v.ljust(w)
            for v, w, (_t, attr) in zip(values, widths, COLUMNS, strict=True)
        ).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(titles), rule, *(line(c) for c in cells)])


def tally(
    row: Row,
    turns: list[Turn],
    obs: Observation,
    dlq: dict[str, Counter[str]] | None,
    targets: tuple[str, ...] = TARGETS,
    emulator_killed_at: float | None = None,
) -> None:
    """Fill the row's turn columns from the final observation and dead-letter queues.

    lost: accepted, and missing from a store that could be read without being in that
    store's dead-letter queue. A store that cannot be read is reported, not counted."""
    sent = [t for t in turns if t.attempts]
    accepted = [t for t in sent if t.event_id]
    row.sent, row.accepted = len(sent), len(accepted)
    for target, attr in (("buffer", "buffer_once"), ("archive", "archive_once")):
        if target in targets:
            once = sum(1 for t in accepted if obs.count(target, t) == 1)
            readable = obs.readable(target)
            setattr(row, attr, f"{once}/{len(accepted)}" if readable else "unreadable")
    if "summary" in targets:
        row.summary_handled = f"{sum(obs.count('summary', t) for t in accepted)}/{len(accepted)}"
    row.duplicated = sum(1 for t in accepted if any(obs.count(target, t) > 1 for target in targets))

    def dead(target: str, turn: Turn) -> bool:
        return bool(dlq and dlq[TARGET_DLQ[target]][turn.expected_event_id])

    row.dlq_valid = sum(1 for t in sent if any(dead(target, t) for target in targets))
    stores = [target for target in targets if target != "summary" and obs.readable(target)]
    lost = [
        t
        for t in accepted
        if any(obs.count(target, t) == 0 and not dead(target, t) for target in stores)
    ]
    unhandled = [t for t in accepted if obs.count("summary", t) == 0 and not dead("summary", t)]
    if emulator_killed_at is not None:
        lost, unhandled = _with_emulator(row, lost, unhandled, emulator_killed_at)
    row.lost = len(lost)
    if dlq is None:
        row.notes.append("dead-letter queues not readable at the end (emulator down)")
    row.notes.extend(obs.problems)
    _verdict(row, sent, accepted, unhandled if "summary" in targets else [])


def _with_emulator(
    row: Row, lost: list[Turn], unhandled: list[Turn], killed_at: float
) -> tuple[list[Turn], list[Turn]]:
    """`lost` and `unhandled` but the turns published before the emulator was killed
    (their event may have been in the emulator when it died), counted apart."""

    def before_kill(t: Turn) -> bool:
        return bool(t.published_from and t.published_from < killed_at)

    with_emulator = [t for t in lost if before_kill(t)]
    row.lost_with_emulator = str(len(with_emulator))
    lost = [t for t in lost if t not in with_emulator]
    return lost, [t for t in unhandled if not before_kill(t)]


def _verdict(row: Row, sent: list[Turn], accepted: list[Turn], unhandled: list[Turn]) -> None:
    """Fail the row for every turn not accepted, lost, never concluded by the summary
    worker, duplicated or dead-lettered."""
    not_accepted = Counter(t.failure for t in sent if not t.event_id)
    if not_accepted:
        row.notes.append(
            f"{len(sent) - len(accepted)} never accepted: "
            + ", ".join(f"{n}× {why}" for why, n in not_accepted.most_common(3))
        )
        row.fail(f"{len(sent) - len(accepted)} turns never accepted")
    if row.lost:
        row.fail(f"{row.lost} lost")
    if unhandled:
        row.fail(f"{len(unhandled)} events never concluded by the summary worker")
    if row.duplicated:
        row.fail(f"{row.duplicated} duplicated")
    if row.dlq_valid:
        row.fail(f"{row.dlq_valid} valid events dead-lettered")


def print_report(rows: list[Row], seconds: float) -> None:
    say("")
    say(table(rows))
    say("")
    for row in rows:
        say(f"{row.name}: {'PASS' if row.ok else 'FAIL'}")
        for note in row.notes:
            say(f"    {note}")
        for failure in row.failures:
            say(f"    FAIL: {failure}")
    passed = sum(1 for r in rows if r.ok)
    say(f"\n{passed} of {len(rows)} scenarios passed in {seconds:.0f} s")
