"""Policy-gradient rows (offline PPO / GRPO-style): one per credited turn of the role.

Columns: ``prompt`` (messages), ``completion`` (one assistant message), ``prompt_token_ids``,
``completion_token_ids``, ``behaviour_logprobs`` (the logged logprob of each completion token
under the policy that generated it), ``reward`` (the turn's credit, see
``training.datasets.credit``), ``advantage``, ``group_size``, ``episode_id``, ``turn_id``,
``task_id``, ``seat``.

Advantage, group-normalised (``baseline="group"``, the default): the group of a turn is every
turn of the build with the same seat and the same prompt hash (an identical state, e.g. the
samples of one task's first prompt). ``advantage = (reward - mean) / (std + 1e-6)`` with the
group's mean and population standard deviation, and ``group_size`` its number of samples. A
turn alone in its group falls back to the mean and population standard deviation of every row
of the build (``group_size`` 1). Groups form within one build only: samples split across two
builds by a watermark are normalised apart. With ``baseline="batch"`` every row is normalised
by the whole build's mean and deviation: a right answer whose sibling samples were right too
keeps a positive advantage, where the group baseline gives every row of such a group none.

Left out, and counted: turns without credit (``no_reward``), without behaviour logprobs
(``no_logprobs``), and with a number of logprobs that differs from the number of
completion tokens (``logprob_length_mismatch``).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from datasets import Features, List, Value

from storage.models import DatasetKind
from training.datasets.building import BuildContext, Builder, EncodedRow, Row
from training.datasets.credit import turn_credits
from training.datasets.formats import FLOAT, MESSAGES, TURN_METADATA, assistant, chat
from training.datasets.reading import EpisodeLog
from training.datasets.spill import Spill

ADVANTAGE_EPS = 1e-6


BASELINES = ("group", "batch")


@dataclass(frozen=True)
class PPOOptions:
    """``baseline``: what a row's reward is compared with, "group" (its state's samples) or
    "batch" (every row of the build); see the module docstring."""

    baseline: str = "group"

    def __post_init__(self) -> None:
        if self.baseline not in BASELINES:
            raise ValueError(f"baseline must be one of {', '.join(BASELINES)}, got {self.baseline!r}")


class PolicyGradientRows(Builder[PPOOptions]):
    kind = DatasetKind.PPO
    options_type = PPOOptions
    tokens = True

    def __init__(self, context: BuildContext, options: PPOOptions) -> None:
        super().__init__(context, options)
        self._spill = Spill()
        self._keys: list[tuple[str, str]] = []
        self._rewards: list[float] = []

    @staticmethod
    def features(options: PPOOptions) -> Features:
        return Features(
            {
                "prompt": MESSAGES,
                "completion": MESSAGES,
                "prompt_token_ids": List(Value("int64")),
                "completion_token_ids": List(Value("int64")),
                "behaviour_logprobs": List(FLOAT),
                "reward": FLOAT,
                "advantage": FLOAT,
                "group_size": Value("int64"),
                **TURN_METADATA,
            }
        )

    def add(self, episode: EpisodeLog) -> Iterable[Row]:
        credits = turn_credits(episode, self.context.role)
        for turn in self.role_turns(episode):
            reward = credits.get(turn.turn_id)
            logprobs, completion_ids = turn.logprobs, turn.completion_token_ids
            if reward is None:
                self.skipped["no_reward"] += 1
            elif not logprobs:
                self.skipped["no_logprobs"] += 1
            elif completion_ids is None or len(logprobs) != len(completion_ids):
                self.skipped["logprob_length_mismatch"] += 1
            else:
                self._keys.append((turn.seat, turn.prompt_key))
                self._rewards.append(reward)
                head = json.dumps(
                    {
                        "prompt": chat(turn.prompt),
                        "completion": assistant(turn.text),
                        "reward": reward,
                        "episode_id": episode.episode_id,
                        "turn_id": turn.turn_id,
                        "task_id": episode.task_id,
                        "seat": turn.seat,
                    },
                    ensure_ascii=False,
                )
                prompt_ids = turn.prompt_token_ids.text if turn.prompt_token_ids is not None else "null"
                # the token columns are spliced in as stored (see JSONNumbers)
                tail = (f', "prompt_token_ids": {prompt_ids}, "completion_token_ids": {completion_ids.text}, '
                        f'"behaviour_logprobs": {logprobs.text}}}')
                self._spill.append_encoded(head[:-1].encode() + tail.encode())
        return ()

    def finish(self) -> Iterator[EncodedRow]:
        try:
            groups: dict[tuple[str, str], list[float]] = {}
            for key, reward in zip(self._keys, self._rewards, strict=True):
                groups.setdefault(key, []).append(reward)
            everyone = _stats(self._rewards) if self._rewards else (0.0, 0.0)
            stats = {} if self.options.baseline == "batch" else {
                key: _stats(rewards) for key, rewards in groups.items() if len(rewards) > 1}
            # rows leave as the JSON they were parked as, the two columns spliced on at the end
            for line, key, reward in zip(self._spill.lines(), self._keys, self._rewards, strict=True):
                mean, std = stats.get(key, everyone)
                advantage = (reward - mean) / (std + ADVANTAGE_EPS)
                tail = f', "advantage": {advantage!r}, "group_size": {len(groups[key])}}}'
                yield EncodedRow(line[:-1] + tail.encode())
        finally:
            self._spill.close()


def _stats(rewards: list[float]) -> tuple[float, float]:
    """Mean and population standard deviation."""
    return statistics.fmean(rewards), statistics.pstdev(rewards)
