"""SFT rows that teach a judge-like seat the ground truth: reviews of another seat's checked
answers, answered with the verdict the truth calls for (``SFTOptions(verdicts="truth")``).

A critic trained on its own right verdicts (rejection sampling) learns little when it says
"correct" to nearly everything: it is right only about right answers, so its rows teach its
prior back. Here every answer checked against the ground truth can make a row, whatever the
judge seat said about it, and also when the judge seat did not play (solo practice, where a
scripted stand-in sat in it).

The game declares how (``GameSpec.truth_verdicts``, ``graphs.contract.TruthVerdicts``): the judge
seat (the role the rows train), the answering seat whose turns are read, the judge seat's
review prompt for one answer, and its response for a correct and for an incorrect answer. The
rows are read from the answering seat's model turns (never a scripted bot's); a build's
``LogFilter.policy`` and watermark apply to those turns. An answer is checked when its turn has
a ``correct`` reward; an unparsed answer counts as incorrect.

- prompt: the game's review of the answer (``TruthVerdicts.review`` of the answer turn's prompt
  and response); completion: the verdict its truth calls for. Format as for the other SFT rows
  (``prompt_completion`` or ``messages``).
- Balanced at each difficulty level (``training.datasets.balance``): as many correct as incorrect
  answers, a seeded choice; with ``max_rows``, at most that many rows (pairs of a correct and an
  incorrect answer of one level, a seeded choice), so every level stays balanced. Rows keep the
  order they were read in.

Metadata: ``correct`` (the truth about the reviewed answer), ``difficulty``, and ``episode_id``,
``turn_id``, ``task_id``, ``seat`` of the answer turn. Counted: ``no_ground_truth``,
``unknown_prompt`` (an answer prompt the game does not recognise), ``duplicate_review`` (the same
review as an earlier row: the same question and answer text), ``balance_dropped``, ``beyond_max_rows``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from datetime import datetime

from datasets import Features, Value

from graphs.contract import GameContractError, TruthVerdicts
from storage.models import DatasetKind
from training.datasets.balance import CheckedAnswer, answer_rank, balanced_pairs, lowest_ranked_pairs
from training.datasets.building import BuildContext, Builder, Row
from training.datasets.credit import CORRECT
from training.datasets.external import registered_game
from training.datasets.formats import MESSAGES, TURN_METADATA, assistant, chat
from training.datasets.reading import EpisodeLog, LogFilter, ReadPlan
from training.datasets.sft import SFTOptions
from training.datasets.spill import Spill


def truth_verdicts_of(game: str, role: str) -> TruthVerdicts:
    """The game's truth verdicts for ``role``; GameContractError, saying what to do instead, when
    the game has none or ``role`` is not their judge seat."""
    spec = registered_game(game)
    truth = spec.truth_verdicts if spec is not None else None
    if truth is None:
        raise GameContractError(f"game {game!r} declares no truth verdicts (GameSpec.truth_verdicts): no seat of "
                                "it learns its verdicts from the ground truth; build the role's own rows instead "
                                "(verdicts 'own')")
    if role != truth.judge_seat:
        raise GameContractError(f"truth verdicts of {game!r} train its judge seat {truth.judge_seat!r}, not "
                                f"{role!r}: build them with role {truth.judge_seat!r}, or {role!r}'s own rows "
                                "(verdicts 'own')")
    return truth


class TruthVerdictRows(Builder[SFTOptions]):
    """Rows of the module docstring: made for ``context.role``, the judge seat, from the turns
    of the game's answering seat."""

    kind = DatasetKind.SFT
    options_type = SFTOptions

    def __init__(self, context: BuildContext, options: SFTOptions) -> None:
        super().__init__(context, options)
        self.truth = truth_verdicts_of(context.game, context.role)
        self._spill = Spill()
        self._answers: list[CheckedAnswer] = []
        self._seen: set[bytes] = set()

    @staticmethod
    def features(options: SFTOptions) -> Features:
        text = {"messages": MESSAGES} if options.format == "messages" else {"prompt": MESSAGES, "completion": MESSAGES}
        return Features({**text, "correct": Value("bool"), "difficulty": Value("string"), **TURN_METADATA})

    def read_plan(self, log_filter: LogFilter, since: datetime | None) -> ReadPlan:
        """The answering seat's turns (the rows are the judge seat's, but made from these)."""
        return ReadPlan(game=self.context.game, role=self.truth.answer_seat, filter=log_filter, since=since)

    def add(self, episode: EpisodeLog) -> Iterable[Row]:
        for turn in self.role_turns(episode):
            if CORRECT not in turn.rewards:
                self.skipped["no_ground_truth"] += 1
                continue
            review = self.truth.review(turn.prompt, turn.text)
            if review is None:
                self.skipped["unknown_prompt"] += 1
                continue
            prompt = chat(review)
            digest = hashlib.blake2b(json.dumps(prompt).encode(), digest_size=16).digest()
            if digest in self._seen:
                self.skipped["duplicate_review"] += 1
                continue
            self._seen.add(digest)
            correct = turn.rewards[CORRECT] >= 0.5
            rank = answer_rank(self.context.seed, turn.turn_id)
            self._answers.append(CheckedAnswer(episode.difficulty, correct, rank))
            verdict = assistant(self.truth.verdicts[correct])
            text = (
                {"messages": prompt + verdict}
                if self.options.format == "messages"
                else {"prompt": prompt, "completion": verdict}
            )
            self._spill.append(
                {
                    **text,
                    "correct": correct,
                    "difficulty": episode.difficulty,
                    "episode_id": episode.episode_id,
                    "turn_id": turn.turn_id,
                    "task_id": episode.task_id,
                    "seat": turn.seat,
                }
            )
        return ()

    def finish(self) -> Iterator[Row]:
        try:
            pairs = balanced_pairs(self._answers)
            self._count("balance_dropped", len(self._answers) - 2 * len(pairs))
            if self.options.max_rows is not None:
                chosen = lowest_ranked_pairs(self._answers, pairs, self.options.max_rows // 2)
                self._count("beyond_max_rows", 2 * (len(pairs) - len(chosen)))
                pairs = chosen
            kept = {i for pair in pairs for i in pair}
            for i, row in enumerate(self._spill):
                if i in kept:
                    yield row
        finally:
            self._spill.close()

    def _count(self, reason: str, n: int) -> None:
        if n:
            self.skipped[reason] += n

    def why_empty(self) -> str | None:
        seat, role = self.truth.answer_seat, self.context.role
        if not self._answers and self.skipped["unknown_prompt"]:
            return (f"none of the {self.skipped['unknown_prompt']} checked {seat} answers read has a prompt the game "
                    f"recognises, so none can be put to {role}: they were logged under other prompts")
        if not self._answers and self.skipped["no_ground_truth"]:
            return (f"none of the {self.skipped['no_ground_truth']} {seat} turns read was checked against a ground "
                    f"truth (no {CORRECT!r} reward): play tasks that have answers with a model in that seat")
        if self._answers:
            right = sum(answer.correct for answer in self._answers)
            return (f"of the {len(self._answers)} {seat} answers read, {right} were correct and "
                    f"{len(self._answers) - right} incorrect, and no difficulty level had both, which the rows "
                    "balance at each level: play harder (or easier) tasks, or at a higher temperature")
        return None
