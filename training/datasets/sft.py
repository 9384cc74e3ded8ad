"""SFT rows by rejection sampling: the best trajectories of each state.

For each state (seat and hash of the exact prompt messages) across the build, keep the
turns with the highest credit (``training.datasets.credit``), at most ``per_group`` of them
(default 1; of equal credits the earliest read), and only turns whose credit is at least
``threshold`` (default 0.5: a correct actor answer). Rows come out state by state, in the
order the states first had a kept turn, best first.

Formats (TRL conversational):

- ``prompt_completion`` (default): ``{"prompt": messages, "completion": [assistant answer]}``. TRL's
  SFTTrainer then computes the loss on the completion only. Prefer it for roles whose
  prompts hold earlier assistant messages (the math-reflection actor's refinement prompt
  holds its previous, possibly wrong, answer), which ``assistant_only_loss`` on the
  ``messages`` format would also train on.
- ``messages``: ``{"messages": prompt messages + the answer as an assistant message}``.

With ``balance``, the kept rows are balanced across the turns' parsed values (a critic's
"correct" and "incorrect" verdicts): each label keeps at most as many rows as the rarest one,
chosen by a seeded shuffle. A judge-like seat trained on the right verdicts about a weak actor
would otherwise see mostly "incorrect" and learn the base rate instead of checking.

Metadata: ``reward`` (the credit), ``episode_id``, ``turn_id``, ``task_id``, ``seat``.
Counted: ``no_reward``, ``below_threshold``, ``beyond_per_group`` (good turns of a state that
already had ``per_group`` better or earlier ones), ``balanced_out`` (rows dropped by ``balance``).
"""

from __future__ import annotations

import heapq
import json
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from datasets import Features

from storage.models import DatasetKind
from training.datasets.building import BuildContext, Builder, Row
from training.datasets.credit import turn_credits
from training.datasets.formats import FLOAT, MESSAGES, TURN_METADATA, assistant, chat
from training.datasets.reading import EpisodeLog

SFTFormat = Literal["messages", "prompt_completion"]
SFT_FORMATS: tuple[SFTFormat, ...] = ("messages", "prompt_completion")


@dataclass(frozen=True)
class SFTOptions:
    threshold: float = 0.5
    """the least credit a kept turn has"""
    per_group: int = 1
    """the most turns kept per state"""
    format: SFTFormat = "prompt_completion"
    balance: bool = False
    """keep equally many rows of each parsed value of the turns (see the module docstring)"""

    def __post_init__(self) -> None:
        if self.per_group < 1:
            raise ValueError(f"per_group must be >= 1 (turns kept per state), got {self.per_group}")
        if self.format not in SFT_FORMATS:
            raise ValueError(f"format must be one of {', '.join(SFT_FORMATS)}; got {self.format!r}")


class RejectionSampling(Builder[SFTOptions]):
    kind = DatasetKind.SFT
    options_type = SFTOptions

    def __init__(self, context: BuildContext, options: SFTOptions) -> None:
        super().__init__(context, options)
        self._best: dict[tuple[str, str], list[tuple[float, int, str, str | None]]] = {}
        """state -> min-heap of (credit, -read order, row as JSON, parsed value): the worst kept turn on top;
        JSON text keeps the rows of the many one-sample states compact until ``finish``"""
        self._read = 0

    @staticmethod
    def features(options: SFTOptions) -> Features:
        text = {"messages": MESSAGES} if options.format == "messages" else {"prompt": MESSAGES, "completion": MESSAGES}
        return Features({**text, "reward": FLOAT, **TURN_METADATA})

    def add(self, episode: EpisodeLog) -> Iterable[Row]:
        credits = turn_credits(episode, self.context.role)
        for turn in self.role_turns(episode):
            reward = credits.get(turn.turn_id)
            if reward is None:
                self.skipped["no_reward"] += 1
                continue
            if reward < self.options.threshold:
                self.skipped["below_threshold"] += 1
                continue
            prompt, answer = chat(turn.prompt), assistant(turn.text)
            text = (
                {"messages": prompt + answer}
                if self.options.format == "messages"
                else {"prompt": prompt, "completion": answer}
            )
            row = {
                **text,
                "reward": reward,
                "episode_id": episode.episode_id,
                "turn_id": turn.turn_id,
                "task_id": episode.task_id,
                "seat": turn.seat,
            }
            self._read += 1
            kept = self._best.setdefault((turn.seat, turn.prompt_key), [])
            heapq.heappush(kept, (reward, -self._read, json.dumps(row, ensure_ascii=False), turn.parsed_value))
            if len(kept) > self.options.per_group:
                heapq.heappop(kept)
                self.skipped["beyond_per_group"] += 1
        return ()

    def finish(self) -> Iterator[Row]:
        ordered = [(row, label) for kept in self._best.values() for _, _, row, label in sorted(kept, reverse=True)]
        if self.options.balance:
            ordered = self._balanced(ordered)
        for row, _ in ordered:
            yield json.loads(row)

    def _balanced(self, ordered: list[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
        by_label: dict[str | None, list[int]] = {}
        for index, (_, label) in enumerate(ordered):
            by_label.setdefault(label, []).append(index)
        if len(by_label) < 2:
            return ordered
        per_label = min(len(indices) for indices in by_label.values())
        rng = random.Random(self.context.seed)
        keep: set[int] = set()
        for indices in by_label.values():
            keep.update(rng.sample(indices, per_label))
        self.skipped["balanced_out"] += len(ordered) - len(keep)
        return [item for index, item in enumerate(ordered) if index in keep]
