"""KTO rows: one per credited turn of the role, desirable or not.

TRL's conversational unpaired-preference format, ``{"prompt", "completion", "label"}``:
prompt = the turn's prompt messages, completion = its response as one assistant message,
label = ``credit > threshold`` (credit: ``training.datasets.credit``; default threshold
0.5, so a correct actor answer is desirable and an incorrect or unparsed one is not).
Metadata: ``reward`` (the credit), ``episode_id``, ``turn_id``, ``task_id``, ``seat``.
Turns without credit are counted as ``no_reward``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from datasets import Features, Value

from storage.models import DatasetKind
from training.datasets.building import Builder, Row
from training.datasets.credit import turn_credits
from training.datasets.formats import FLOAT, MESSAGES, TURN_METADATA, assistant, chat
from training.datasets.reading import EpisodeLog


@dataclass(frozen=True)
class KTOOptions:
    threshold: float = 0.5
    """a turn is desirable when its credit is above this"""


class UnpairedPreferences(Builder[KTOOptions]):
    kind = DatasetKind.KTO
    options_type = KTOOptions

    @staticmethod
    def features(options: KTOOptions) -> Features:
        return Features(
            {"prompt": MESSAGES, "completion": MESSAGES, "label": Value("bool"), "reward": FLOAT, **TURN_METADATA}
        )

    def add(self, episode: EpisodeLog) -> Iterable[Row]:
        credits = turn_credits(episode, self.context.role)
        for turn in self.role_turns(episode):
            reward = credits.get(turn.turn_id)
            if reward is None:
                self.skipped["no_reward"] += 1
                continue
            yield {
                "prompt": chat(turn.prompt),
                "completion": assistant(turn.text),
                "label": reward > self.options.threshold,
                "reward": reward,
                "episode_id": episode.episode_id,
                "turn_id": turn.turn_id,
                "task_id": episode.task_id,
                "seat": turn.seat,
            }
