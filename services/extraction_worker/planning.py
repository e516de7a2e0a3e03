"""What a window of turns (or a generate request) does to the user's memories,
decided with no transaction open: the model's extraction call (one per window;
more only when the window is over `AM_LLM_MAX_INPUT_TOKENS`; a model provider's
shown the known entities the turns' names may be, to judge), the candidates
corrected to their turn's bounds, embedded in one batch, then weighed against
their neighbours in one consolidation call (`shared.memory.decisions.weigh`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from shared.config import Settings
from shared.db.entities import known_of
from shared.db.unit_of_work import UnitOfWork
from shared.embeddings.base import Embedder
from shared.entities.judging import Listing, listing
from shared.entities.names import mentions
from shared.llm import extraction_prompts
from shared.llm.base import LLM, ExtractionInput
from shared.llm.topics import EXTRACTION_SETTING, of_setting
from shared.memory import agents, expiry
from shared.memory.consolidate import Source, correct, new_memory
from shared.memory.decisions import Planned, weigh
from shared.memory.ranking import Fusion
from shared.profiles import schema as profile_schema
from shared.profiles.writing import Update
from shared.tokens import estimate_tokens

Units = Callable[[], UnitOfWork]


def split(inp: ExtractionInput, max_tokens: int) -> list[ExtractionInput]:
    """`inp` in consecutive parts whose extraction request is at most `max_tokens`
    (the instruction and the turns), a whole turn in each; no turn is ever cut.
    Settings make sure one turn alone always fits (`AM_LLM_MAX_INPUT_TOKENS`)."""
    parts: list[ExtractionInput] = []
    turns: list = []
    for turn in inp.turns:
        trial = replace(inp, turns=(*turns, turn))
        if turns and _request_tokens(trial) > max_tokens:
            parts.append(replace(inp, turns=tuple(turns)))
            turns = []
        turns.append(turn)
    if turns:
        parts.append(replace(inp, turns=tuple(turns)))
    return parts


def _request_tokens(inp: ExtractionInput) -> int:
    return estimate_tokens(
        extraction_prompts.extraction_instruction(inp) + extraction_prompts.extraction_prompt(inp)
    )


@dataclass
class Planner:
    units: Units
    llm: LLM
    embedder: Embedder
    settings: Settings

    def plan(self, inp: ExtractionInput, sources: dict[str, Source]) -> list[Planned]:
        """The decisions for what the turns of `inp` state; `sources` maps each
        turn id to where its memories come from (owner, project, session, time,
        event)."""
        first = next(iter(sources.values()))
        app = first.app
        with self.units() as uow:
            inp = replace(inp, topics=of_setting(uow.app_settings.get(app, EXTRACTION_SETTING)))
            ttl = expiry.load(uow, app)
            sharing = agents.of_setting(uow.app_settings.get(app, agents.AGENTS_SETTING))
            if self.llm.judges_entities:
                inp = replace(inp, entities=_listing(uow, inp, app, first.user_id))
        found = []
        for part in split(inp, self.settings.llm_max_input_tokens):
            found += self.llm.extract(part).value
        # Whatever the model answered: a memory of a topic the app does not keep is not made.
        found = [item for item in found if inp.topics.keeps(item.candidate.topic)]
        # In the order the turns were said, whatever order the model answered in: the
        # decisions are applied in this order (a stable sort keeps a turn's own order).
        said = {turn.turn_id: n for n, turn in enumerate(inp.turns)}
        found.sort(key=lambda item: said[item.turn_id])
        candidates = []
        for item in found:
            source = sources[item.turn_id]
            candidate = correct(item.candidate, source)
            if source.agent_id:  # the agent's, unless the app shares its kind or topic
                owner = agents.owner(source.agent_id, candidate.kind, candidate.topic, sharing)
                source = replace(source, agent_id=owner)
            # The config's metadata as it is now (a later change is not retroactive).
            source = replace(source, metadata=inp.topics.metadata_of(candidate.topic))
            if candidate.text.strip():
                candidates.append((candidate, source))
        candidates = _latest(candidates)
        if not candidates:
            return []
        vectors = self.embedder.embed([c.text for c, _source in candidates])
        news = [
            (
                expiry.with_expiry(
                    new_memory(candidate, source, vector),
                    ttl,
                    "generate_created",
                    "generate_updated",
                ),
                source,
            )
            for (candidate, source), vector in zip(candidates, vectors, strict=True)
        ]
        fusion = Fusion.from_settings(self.settings)
        limit = self.settings.consolidation_neighbours
        return weigh(self.units, self.llm, fusion, limit, news, self.settings.llm_max_input_tokens)

    def plan_profile(self, inp: ExtractionInput, sources: dict[str, Source]) -> list[Update]:
        """The profile values the turns of `inp` state, for the app's schema as it is
        now (none, and no model call, when the app has no profile). The writer checks
        them against the schema again, under the lock."""
        app = next(iter(sources.values())).app
        with self.units() as uow:
            stored = uow.app_settings.get(app, profile_schema.PROFILE_SETTING)
        fields = profile_schema.of_setting(stored).fields
        if not fields:
            return []
        inp = replace(inp, profile=fields)
        said = {turn.turn_id: n for n, turn in enumerate(inp.turns)}
        found = []
        for part in split(inp, self.settings.llm_max_input_tokens):
            found += self.llm.fill_profile(part).value
        # In the order the turns were said: a later statement of a field wins.
        found.sort(key=lambda item: said[item.turn_id])
        return [
            Update(
                item.field,
                item.value,
                sources[item.turn_id].observed_at,
                source_event_id=sources[item.turn_id].event_id or "",
            )
            for item in found
        ]


def _listing(uow: UnitOfWork, inp: ExtractionInput, app: str, user_id: str) -> Listing:
    """The known entities the window's names may be (`shared.entities.judging`), read
    with no lock: the write checks the model's answer against them again."""
    said = [(t.project_id, mentions(f"{t.user}\n{t.assistant}")) for t in inp.turns]
    if not any(names for _project, names in said):
        return Listing()
    projects = sorted({""} | {t.project_id for t in inp.turns})
    known = uow.run(known_of(app, user_id, projects))
    return listing(said, known, min(t.observed_at for t in inp.turns))


def _latest(candidates: list) -> list:
    """Each candidate once: of the same text in the same scope and owner, the latest
    turn's (a statement repeated within a window is one memory)."""
    kept: dict[tuple[str, str, str, str, str], int] = {}
    for index, (candidate, source) in enumerate(candidates):
        text = candidate.text.strip()
        key = (candidate.scope, candidate.project_id, source.agent_id, candidate.entity_name, text)
        kept[key] = index
    return [candidates[i] for i in sorted(kept.values())]
