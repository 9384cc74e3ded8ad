"""The run-scoped context every game node receives (LangGraph ``Runtime.context``).

It holds the policy of each seat and the sink that logs turns, rewards and judgments, so
the nodes of a game only say *what* happens; ``generate`` makes the model call and logs it.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from graphs.policies.base import BackendError, GenerationResult, Message
from graphs.policies.policy import Policy
from graphs.seats import Seat
from graphs.tasks.base import Task
from storage.records import JudgmentRecord, RecordSink, RewardRecord, TurnRecord


@dataclass(frozen=True)
class GameOptions:
    """Options shared by the games; each game reads the ones it needs."""

    turns: int = 3
    """math-reflection: maximum number of actor answers (the first answer plus refinements)."""
    rounds: int = 2
    """debate: number of rounds in which both debaters speak."""
    stop_on_correct: bool = True
    """math-reflection: stop as soon as the critic says the latest answer is correct."""

    def __post_init__(self) -> None:
        if self.turns < 1:
            raise ValueError(f"turns must be >= 1, got {self.turns}")
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {self.rounds}")


@dataclass(frozen=True)
class Turn:
    """What a node gets back from ``EpisodeContext.generate``."""

    id: str
    seat: str
    index: int
    text: str
    parsed: str | None
    """The value the node's parser extracted, None when nothing parseable was found."""
    result: GenerationResult


def derive_seed(*parts: object) -> int:
    """A stable 31-bit seed from the episode seed and the turn position."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & 0x7FFFFFFF


@dataclass
class EpisodeContext:
    episode_id: str
    task: Task
    seats: dict[str, Seat]
    policies: dict[str, Policy]
    sink: RecordSink
    seed: int
    options: GameOptions = field(default_factory=GameOptions)
    stage: str = "start"
    """Where the episode is now; recorded as the failure place if something raises."""
    _turns: int = 0

    async def generate(
        self,
        seat: str,
        messages: list[Message],
        *,
        round: int,
        parse: Callable[[str], str | None] | None = None,
    ) -> Turn:
        """Ask the seat's policy, log the turn, and return it with its parsed value."""
        policy = self.policies[seat]
        index = self._turns
        self._turns += 1
        self.stage = f"{seat} turn {index}"
        seed = derive_seed(self.seed, self.task.id, index) if policy.sampling.temperature > 0 else None
        started = time.perf_counter()
        try:
            result = await policy.act(messages, seed=seed)
        except BackendError:
            raise
        except Exception as exc:  # a backend bug is still a model-boundary failure
            raise BackendError(f"{type(exc).__name__}: {exc}") from exc
        parsed = parse(result.text) if parse else None
        turn = Turn(uuid.uuid4().hex, seat, index, result.text, parsed, result)
        self.sink.turn(
            TurnRecord(
                id=turn.id,
                episode_id=self.episode_id,
                index=index,
                round=round,
                seat=seat,
                seat_kind=str(self.seats[seat].kind),
                policy=policy.label,
                served_by=result.served_by,
                backend=policy.backend.name,
                messages=list(messages),
                response=result.text,
                prompt_token_ids=result.prompt_token_ids,
                completion_token_ids=result.completion_token_ids,
                logprobs=result.logprobs,
                finish_reason=result.finish_reason,
                latency_ms=(time.perf_counter() - started) * 1000,
                sampling={**asdict(policy.sampling), "seed": seed},
                parsed=None if parse is None else parsed is not None,
                parsed_value=parsed,
            )
        )
        return turn

    @property
    def num_turns(self) -> int:
        return self._turns

    def reward(self, seat: str, name: str, value: float, *, turn_id: str | None = None, **info: object) -> None:
        self.sink.reward(RewardRecord(self.episode_id, seat, name, float(value), turn_id, info or None))

    def judgment(
        self,
        *,
        judge_seat: str,
        winner_seat: str | None,
        loser_seat: str | None,
        preferred_turn_id: str | None,
        rejected_turn_id: str | None,
        rationale: str,
        judge_turn_id: str | None = None,
    ) -> None:
        self.sink.judgment(
            JudgmentRecord(
                episode_id=self.episode_id,
                judge_seat=judge_seat,
                judge_policy=self.policies[judge_seat].label if judge_seat in self.policies else judge_seat,
                winner_seat=winner_seat,
                loser_seat=loser_seat,
                preferred_turn_id=preferred_turn_id,
                rejected_turn_id=rejected_turn_id,
                rationale=rationale,
                judge_turn_id=judge_turn_id,
            )
        )
