"""Metrics from the store: scripted players with known right and wrong answers, real stores.

Each test plays a few episodes with bots whose outcome per task is known in advance and
checks every figure against what those outcomes imply (values, n and the Wilson interval).
"""

from __future__ import annotations

import asyncio
import re

import pytest

from evaluation.metrics import run_estimates, run_metrics
from graphs.debate.options import DebateOptions
from graphs.episodes import play
from graphs.math_reflection.options import ReflectionOptions
from graphs.metrics.stats import paired, wilson
from graphs.policies.base import ChoiceUnsupportedError
from graphs.policies.policy import Policy
from graphs.policies.scripted import ScriptedBackend
from graphs.registry import get_game, scripted_bot
from graphs.tasks.base import Task
from storage.engine import open_store
from storage.recorder import Recorder
from storage.records import RunRecord

REFLECTION = get_game("math-reflection")
DEBATE = get_game("debate")
TASKS = [Task(f"sum-{a}", f"What is {a} + 7?", str(a + 7), "test", "heldout") for a in range(8)]


def _bot(name, reply) -> Policy:
    return Policy(ScriptedBackend.from_function(reply, name=name))


def _addend(messages) -> int:
    text = " ".join(m["content"] for m in messages)
    return int(re.search(r"What is (\d+) \+ 7", text).group(1))


def even_only(messages, request) -> str:
    """Right on the even sums (4 of 8), a wrong number on the odd ones."""
    a = _addend(messages)
    return f"Answer: {a + 7}" if a % 2 == 0 else "Answer: -1"


def right_on_refinement(messages, request) -> str:
    """Wrong first, right once it has seen a critique."""
    refining = any(m["role"] == "assistant" for m in messages)
    return f"Answer: {_addend(messages) + 7}" if refining else "Answer: -1"


def right_then_wrong(messages, request) -> str:
    refining = any(m["role"] == "assistant" for m in messages)
    return "Answer: -1" if refining else f"Answer: {_addend(messages) + 7}"


class Mumbler(ScriptedBackend):
    """A critic states no verdict, on a backend that cannot constrain its last line (a plain
    OpenAI-compatible API): the only way a verdict can still be unreadable."""

    def __init__(self) -> None:
        super().__init__(lambda messages, request: "Hmm, let me think about it.", bot_name="mumble")

    async def generate(self, request):
        if request.choice is not None:
            raise ChoiceUnsupportedError("this backend cannot constrain a response")
        return await super().generate(request)


def _played(engine, game, policies, options, tasks=TASKS):
    run = RunRecord.new(game.name, {"purpose": "test"}, 0)
    with Recorder(engine) as recorder:
        recorder.start_run(run)
        asyncio.run(play(game, tasks, policies, recorder, concurrency=4, seed=0, options=options, run_id=run.id))
        recorder.finish_run(run.id, "finished", {})
    return run.id


@pytest.fixture
def engine(store_url):
    engine = open_store(store_url)
    yield engine
    engine.dispose()


def test_an_actor_that_is_always_right(engine):
    run_id = _played(engine, REFLECTION, {"actor": Policy(scripted_bot("calculator")),
                                          "critic": Policy(scripted_bot("always-correct"))}, ReflectionOptions(turns=1))
    measured = run_estimates(engine, run_id)
    first = measured.metrics["pass@turn-1"]
    assert first == wilson(8, 8) and first.value == 1.0 and first.n == 8
    assert first.low == pytest.approx(0.6756, abs=1e-4) and first.high == 1.0
    assert measured.per_task["pass@turn-1"] == {t.id: 1.0 for t in TASKS}
    assert measured.metrics["critic_recall_correct"].value == 1.0
    # every reviewed answer was right: a balanced accuracy cannot be measured, and is not made up
    assert measured.metrics["critic_balanced_accuracy"].value is None
    assert measured.per_task["critic_balanced_accuracy"] == {}
    assert run_metrics(engine, run_id)["pass@turn-1"] == 1.0


def test_balanced_accuracy_does_not_reward_always_saying_incorrect(engine):
    run_id = _played(engine, REFLECTION, {"actor": _bot("even-only", even_only),
                                          "critic": Policy(scripted_bot("always-incorrect"))},
                     ReflectionOptions(turns=1))
    m = run_estimates(engine, run_id).metrics
    assert m["pass@turn-1"] == wilson(4, 8)
    assert m["critic_accuracy"].value == 0.5  # raw: right on the 4 wrong answers only
    assert m["critic_recall_incorrect"] == wilson(4, 4) and m["critic_recall_correct"] == wilson(0, 4)
    assert m["critic_precision_incorrect"] == wilson(4, 8)
    assert m["critic_balanced_accuracy"].value == 0.5 and m["critic_balanced_accuracy"].n == 8
    assert m["critic_unparsed_rate"] == wilson(0, 8)


def test_a_perfect_critic_scores_one_and_unreadable_verdicts_count_as_misses(engine):
    class Checker(ScriptedBackend):
        """Says "correct" exactly when the reviewed answer is right."""

        def __init__(self):
            super().__init__(self._review, bot_name="checker")

        def _review(self, messages, request):
            text = messages[-1]["content"]
            a = int(re.search(r"What is (\d+) \+ 7", text).group(1))
            right = f"Answer: {a + 7}" in text
            return f"Verdict: {'correct' if right else 'incorrect'}"

    perfect = run_estimates(engine, _played(engine, REFLECTION, {"actor": _bot("even-only", even_only),
                                                                 "critic": Policy(Checker())},
                                            ReflectionOptions(turns=1)))
    assert perfect.metrics["critic_balanced_accuracy"].value == 1.0
    assert perfect.metrics["critic_balanced_accuracy"].low > 0.5
    mute = run_estimates(engine, _played(engine, REFLECTION, {"actor": _bot("even-only", even_only),
                                                              "critic": Policy(Mumbler())},
                                         ReflectionOptions(turns=1)))
    assert mute.metrics["critic_unparsed_rate"] == wilson(8, 8)
    assert mute.metrics["critic_balanced_accuracy"].value == 0.0
    assert mute.metrics["critic_accuracy"].value == 0.0

    # paired on the same tasks: the perfect critic is better on every task
    comparison = paired(perfect.per_task["critic_balanced_accuracy"], mute.per_task["critic_balanced_accuracy"])
    assert comparison.difference.value == pytest.approx(1.0)
    assert comparison.better == 8 and comparison.worse == 0
    assert comparison.p_value == pytest.approx(2 / 2**8)


def test_refinement_gain_and_flips(engine):
    options = ReflectionOptions(turns=2, stop_on_correct=False)
    critic = Policy(scripted_bot("always-incorrect"))
    fixed = run_estimates(engine, _played(engine, REFLECTION, {"actor": _bot("fixer", right_on_refinement),
                                                               "critic": critic}, options))
    m = fixed.metrics
    assert m["pass@turn-1"].value == 0.0 and m["pass@final-turn"].value == 1.0 and m["pass@any-turn"].value == 1.0
    assert m["majority@N"].value == 1.0  # one vote each: the tie goes to the latest answer
    assert m["refinement_gain"].value == 1.0 and m["wrong->right"] == wilson(8, 8)
    assert m["right->wrong"].value == 0.0

    broken = run_estimates(engine, _played(engine, REFLECTION, {"actor": _bot("breaker", right_then_wrong),
                                                                "critic": critic}, options))
    assert broken.metrics["refinement_gain"].value == -1.0 and broken.metrics["right->wrong"] == wilson(8, 8)
    assert broken.metrics["pass@any-turn"].value == 1.0 and broken.metrics["pass@final-turn"].value == 0.0
    comparison = paired(fixed.per_task["pass@final-turn"], broken.per_task["pass@final-turn"])
    assert (comparison.better, comparison.worse, comparison.difference.value) == (8, 0, 1.0)


def test_debate_win_and_tie_rates(engine):
    policies = {"debater_a": _bot("even-only", even_only), "debater_b": Policy(scripted_bot("calculator"))}
    m = run_estimates(engine, _played(engine, DEBATE, policies, DebateOptions(rounds=1))).metrics
    # rules judge: both right on even sums (a tie), only debater_b on odd ones
    assert m["tie_rate"] == wilson(4, 8) and m["debater_b_win_rate"] == wilson(4, 8)
    assert m["debater_a_win_rate"] == wilson(0, 8)
