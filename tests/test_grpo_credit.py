"""GRPO's default reward (``first_turn``) is the trained turn's credit by the game's own credit
rule, the quantity the dataset builders and the gate read, not the first reward event logged
on the turn (for the negotiation proposer that was ``valid``, 1 for any well-formed move).

The rollouts here are played by scripted seats (no model): what is checked is the reward the
rollout hands to TRL for each episode.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from memory_sink import MemorySink

from graphs.episodes import play
from graphs.negotiation.bots import BOTS as NEGOTIATORS
from graphs.negotiation.tasks import load_negotiation_tasks
from graphs.policies.policy import Policy
from graphs.policies.scripted import ScriptedBackend
from graphs.registry import get_game, scripted_bot
from graphs.tasks.base import Task
from training.trainers import GRPOTrainingConfig
from training.trainers.grpo import REWARD_KEY, GameRollout, _Tap

TOKENIZER = SimpleNamespace(eos_token_id=0)


def babbler(messages, request) -> str:
    """A proposer whose first move has no move line (invalid, so incoherent), then plays fair."""
    if not any(m["role"] == "assistant" for m in messages):
        return "Hello! Let us get to know each other."
    return NEGOTIATORS["fair"](messages, request)


def rollout_rewards(game_name: str, role: str, tasks: list[Task], policies: dict[str, Policy],
                    **options) -> tuple[list[float | None], list]:
    """Play ``tasks`` as a GRPO rollout records them; the rewards it hands to TRL and the episodes."""
    game = get_game(game_name)
    tap = _Tap(MemorySink())
    report = asyncio.run(play(game, tasks, policies, tap, concurrency=4, seed=0, options=game.make_options(options)))
    rollout = GameRollout(game=game, role=role, tasks={}, other_policies={}, sink=tap.sink,
                          config=GRPOTrainingConfig())
    return rollout._collect(tap, report.episodes, tasks, TOKENIZER)[REWARD_KEY], report.episodes


def test_the_proposer_is_rewarded_by_negotiations_credit_rule() -> None:
    tasks = load_negotiation_tasks("negotiation", n=4, seed=0, split="train")
    fair = {"proposer": Policy(scripted_bot("fair")), "counterpart": Policy(scripted_bot("fair"))}
    rewards, episodes = rollout_rewards("negotiation", "proposer", tasks, fair)
    shares = [e.outcome["value_share"]["proposer"] for e in episodes]
    assert rewards == shares and any(share != 1.0 for share in shares)  # not the first move's 'valid' (1.0)

    babbling = {"proposer": Policy(ScriptedBackend.from_function(babbler)),
                "counterpart": Policy(scripted_bot("tough"))}
    rewards, episodes = rollout_rewards("negotiation", "proposer", tasks, babbling, constrain_moves=False,
                                        max_turns=4)
    assert all(e.outcome["moves"][0] is None for e in episodes)  # the first move was invalid
    assert rewards == [e.outcome["value_share"]["proposer"] - 1.0 for e in episodes]


def test_the_actor_is_still_rewarded_by_its_first_answers_correctness() -> None:
    tasks = [Task("t1", "What is 2 + 3?", "5", "test"), Task("t2", "What is 7 - 4?", "2", "test")]
    policies = {"actor": Policy(scripted_bot("calculator")), "critic": Policy(scripted_bot("always-correct"))}
    rewards, _ = rollout_rewards("math-reflection", "actor", tasks, policies)
    assert rewards == [1.0, 0.0]
