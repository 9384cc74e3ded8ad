"""DPO preference pairs, only from siblings that share the same state.

Each row is TRL's conversational preference format, ``{"prompt", "chosen", "rejected"}``,
with metadata: ``pair_kind``, ``seat``, ``task_id``, the episode and turn ids of both sides,
and ``chosen_reward`` / ``rejected_reward`` (the rewards that ranked the pair). The pair kinds:

- ``refinement``: within one episode, two consecutive answers of the role that were both
  checked against ground truth (a ``correct`` event), exactly one of them correct (math-
  reflection: an actor answer and its refinement). The prompt is the role's first prompt of
  the episode (round 0: the question), so both answers stand as answers to the same state;
  chosen is the correct one.
- ``group``: several samples of the role on the same state, key ``(seat, hash of the exact
  prompt messages)``, across the episodes of the build (credit: ``training.datasets.credit``).
  ``group_pairs="extremes"`` (the default): the best-credited sample against the worst, one
  pair per group, only when their credit differs; of equal credits, the earliest read wins.
  ``group_pairs="all"``: every sample against every sample of strictly lower credit (two right
  and two wrong answers: four pairs), in read order of the chosen side, then of the rejected.
  Either way a group of one sample is skipped as ``group_single_sample`` and one whose samples
  all earned the same credit as ``group_equal_rewards``.
- ``judge``: a judgment's preferred turn against its rejected turn, when one of them is the
  role's. A pair is made only when both turns were generated from identical prompt messages
  (the prompt); in a debate the two debaters see different prompts, so such judgments are
  skipped and counted as ``judge_prompts_differ``; ties (no winner) as ``judge_tie``.
  The rewards are the turns' ``win`` events.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

from datasets import Features, Value

from storage.models import DatasetKind
from storage.records import JudgmentRecord
from training.datasets.building import BuildContext, Builder, Row
from training.datasets.credit import CORRECT, turn_credits
from training.datasets.formats import MESSAGES, PAIR_METADATA, assistant, chat
from training.datasets.reading import EpisodeLog, LoggedTurn

PairKind = Literal["refinement", "group", "judge"]
PAIR_KINDS: tuple[PairKind, ...] = ("refinement", "group", "judge")
GroupPairs = Literal["extremes", "all"]
GROUP_PAIRS: tuple[GroupPairs, ...] = ("extremes", "all")
WIN = "win"


@dataclass(frozen=True)
class DPOOptions:
    pair_kinds: tuple[PairKind, ...] = PAIR_KINDS
    """which kinds of pairs to make"""
    group_pairs: GroupPairs = "extremes"
    """which pairs a group of samples of one state makes: 'extremes', the best-credited sample
    against the worst (one pair); 'all', every sample against every sample of lower credit"""

    def __post_init__(self) -> None:
        unknown = [k for k in self.pair_kinds if k not in PAIR_KINDS]
        if unknown or not self.pair_kinds:
            raise ValueError(
                f"pair_kinds must be a non-empty subset of {', '.join(PAIR_KINDS)}; got {list(self.pair_kinds)}"
            )
        if self.group_pairs not in GROUP_PAIRS:
            raise ValueError(
                f"group_pairs must be 'extremes' (the best sample of a state against the worst) or 'all' "
                f"(every sample against every sample of lower credit); got {self.group_pairs!r}"
            )
        if self.group_pairs != "extremes" and "group" not in self.pair_kinds:
            raise ValueError(
                f"group_pairs={self.group_pairs!r} chooses the group pairs, and pair_kinds "
                f"{list(self.pair_kinds)} makes none: add 'group' to pair_kinds, or leave group_pairs out"
            )


@dataclass(frozen=True, slots=True)
class _Side:
    """What a pair row needs of one turn."""

    turn_id: str
    episode_id: str
    text: str
    reward: float | None


def _side(turn: LoggedTurn, reward: float | None) -> _Side:
    return _Side(turn.turn_id, turn.episode_id, turn.text, reward)


@dataclass(slots=True)
class _Group:
    """The samples of one state seen so far: their number, the best and the worst, and with
    ``group_pairs="all"`` every one of them. The prompt is kept (as the stored JSON text) from
    the second sample on: most states are seen once (a refinement prompt holds the answer it
    follows) and never make a pair."""

    prompt_json: str
    """"" until the second sample"""
    task_id: str
    best: _Side
    worst: _Side
    best_reward: float
    worst_reward: float
    size: int = 1
    samples: list[tuple[float, _Side]] | None = None
    """every sample with its credit, in read order (``group_pairs="all"``); None: only the best and
    the worst are kept"""


class PreferencePairs(Builder[DPOOptions]):
    kind = DatasetKind.DPO
    options_type = DPOOptions

    def __init__(self, context: BuildContext, options: DPOOptions) -> None:
        super().__init__(context, options)
        self._groups: dict[tuple[str, str], _Group] = {}

    def needs_judgments(self) -> bool:
        return "judge" in self.options.pair_kinds

    def needs_samples(self) -> bool:
        return "group" in self.options.pair_kinds

    @staticmethod
    def features(options: DPOOptions) -> Features:
        return Features(
            {
                "prompt": MESSAGES,
                "chosen": MESSAGES,
                "rejected": MESSAGES,
                "pair_kind": Value("string"),
                **PAIR_METADATA,
                "chosen_reward": Value("float64"),
                "rejected_reward": Value("float64"),
            }
        )

    def add(self, episode: EpisodeLog) -> Iterable[Row]:
        turns = self.role_turns(episode)
        kinds = self.options.pair_kinds
        rows: list[Row] = []
        if "refinement" in kinds:
            rows += self._refinement_pairs(episode, turns)
        if "group" in kinds:
            self._add_to_groups(episode, turns)
        if "judge" in kinds:
            for judgment in episode.judgments:
                row = self._judge_pair(episode, judgment)
                if row is not None:
                    rows.append(row)
        return rows

    def finish(self) -> Iterator[Row]:
        for group in self._groups.values():
            if group.size == 1:
                self.skipped["group_single_sample"] += 1
            elif group.best_reward == group.worst_reward:
                self.skipped["group_equal_rewards"] += 1
            else:
                prompt = chat(json.loads(group.prompt_json))
                for chosen, rejected in _group_pairs(group):
                    yield _pair("group", self.context.role, prompt, group.task_id, chosen, rejected)

    def _refinement_pairs(self, episode: EpisodeLog, turns: list[LoggedTurn]) -> Iterator[Row]:
        checked = [t for t in turns if CORRECT in t.rewards]
        first = next((t for t in turns if t.round == 0), None)
        for before, after in pairwise(checked):
            before_ok, after_ok = before.rewards[CORRECT] >= 0.5, after.rewards[CORRECT] >= 0.5
            if before_ok == after_ok:
                continue
            if first is None:
                self.skipped["refinement_without_first_prompt"] += 1
                continue
            chosen, rejected = (before, after) if before_ok else (after, before)
            yield _pair(
                "refinement",
                self.context.role,
                chat(first.prompt),
                episode.task_id,
                _side(chosen, chosen.rewards[CORRECT]),
                _side(rejected, rejected.rewards[CORRECT]),
            )

    def _add_to_groups(self, episode: EpisodeLog, turns: list[LoggedTurn]) -> None:
        credits = turn_credits(episode, self.context.role)
        for turn in turns:
            reward = credits.get(turn.turn_id)
            if reward is None:
                self.skipped["no_reward"] += 1
                continue
            sample = _side(turn, reward)
            key = (turn.seat, turn.prompt_key)
            group = self._groups.get(key)
            if group is None:
                samples = [(reward, sample)] if self.options.group_pairs == "all" else None
                self._groups[key] = _Group("", episode.task_id, sample, sample, reward, reward, samples=samples)
                continue
            if not group.prompt_json:  # same hash, same prompt as the first sample's
                group.prompt_json = turn.prompt_json or ""
            group.size += 1
            if group.samples is not None:
                group.samples.append((reward, sample))
            if reward > group.best_reward:
                group.best, group.best_reward = sample, reward
            if reward < group.worst_reward:
                group.worst, group.worst_reward = sample, reward

    def _judge_pair(self, episode: EpisodeLog, judgment: JudgmentRecord) -> Row | None:
        if judgment.winner_seat is None:
            self.skipped["judge_tie"] += 1
            return None
        if self.context.role not in (judgment.winner_seat, judgment.loser_seat):
            return None
        preferred, rejected = episode.turn(judgment.preferred_turn_id), episode.turn(judgment.rejected_turn_id)
        if preferred is None or rejected is None or preferred.prompt_json is None or rejected.prompt_json is None:
            self.skipped["judge_turn_missing"] += 1
            return None
        if not (preferred.selected or rejected.selected):
            return None  # the role's side did not pass the build's filter
        if preferred.prompt_json != rejected.prompt_json:
            self.skipped["judge_prompts_differ"] += 1
            return None
        return _pair(
            "judge",
            self.context.role,
            chat(preferred.prompt),
            episode.task_id,
            _side(preferred, preferred.rewards.get(WIN)),
            _side(rejected, rejected.rewards.get(WIN)),
        )


def _group_pairs(group: _Group) -> Iterator[tuple[_Side, _Side]]:
    """The (chosen, rejected) pairs of a group whose credits differ: the best against the worst,
    or, with every sample kept, each against each of strictly lower credit, in read order."""
    if group.samples is None:
        yield group.best, group.worst
        return
    for chosen_credit, chosen in group.samples:
        for rejected_credit, rejected in group.samples:
            if chosen_credit > rejected_credit:
                yield chosen, rejected


def _pair(kind: PairKind, seat: str, prompt: list[dict[str, str]], task_id: str, chosen: _Side, rejected: _Side) -> Row:
    return {
        "prompt": prompt,
        "chosen": assistant(chosen.text),
        "rejected": assistant(rejected.text),
        "pair_kind": kind,
        "seat": seat,
        "task_id": task_id,
        "chosen_episode_id": chosen.episode_id,
        "rejected_episode_id": rejected.episode_id,
        "chosen_turn_id": chosen.turn_id,
        "rejected_turn_id": rejected.turn_id,
        "chosen_reward": chosen.reward,
        "rejected_reward": rejected.reward,
    }
