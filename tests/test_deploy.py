"""The deploy gate and hot deploys, with a scripted backend whose answers depend on the adapter.

The published adapter folders are real (random LoRA weights on a small Llama config); the
scripted backend stands in for the model, answering correctly only under the "good" adapter.
"""

from __future__ import annotations

import asyncio
import re

import pytest
from sqlalchemy import select

from evaluation.evaluator import Evaluator
from graphs.episodes import play
from graphs.math_reflection.options import ReflectionOptions
from graphs.policies.policy import Policy
from graphs.policies.scripted import BOTS, ScriptedBackend
from graphs.registry import get_game, scripted_bot
from graphs.tasks import load_tasks
from graphs.tasks.base import Task
from storage.engine import open_store
from storage.models import Evaluation, Run
from storage.queries import EpisodeFilter, iter_turns
from storage.recorder import Recorder
from training.deploy import GateError, LivePolicies, gate_and_deploy
from training.registry import active_version, get_version, promote, publish

GAME = get_game("math-reflection")




class AdapterAware(ScriptedBackend):
    """Solves the sums only when serving one of the ``good`` adapters; ``delay`` stalls each answer."""

    def __init__(self, good: set[str], delay: float = 0.0) -> None:
        super().__init__(self._answer, bot_name="adapter-aware")
        self.good, self.delay = good, delay

    def _answer(self, messages, request) -> str:
        if request.adapter in self.good:
            return BOTS["calculator"](messages, request)
        return "Answer: 0"

    async def generate(self, request):
        await asyncio.sleep(self.delay)
        return await super().generate(request)


def _publish(engine, root, template, role="actor"):
    base, trained = template
    return publish(engine, role=role, trained_dir=trained, adapters_root=root, base_model=base, trainer="sft",
                   config={}, parent=None, dataset_snapshot_id=None, metrics={"loss": 1.0})


def test_gate_promotes_a_better_candidate_and_rejects_a_worse_one(store_url, tmp_path, adapter_template, sums):
    engine = open_store(store_url)
    tasks = load_tasks(str(sums), n=8, seed=0, split="heldout")
    v1 = _publish(engine, tmp_path / "adapters", adapter_template)
    backend = AdapterAware(good={"actor@v1"})
    live = LivePolicies({"actor": Policy(backend), "critic": Policy(scripted_bot("always-correct"))})
    evaluate = Evaluator(engine, GAME, tasks, seed=0, options=ReflectionOptions(turns=1))

    result = asyncio.run(gate_and_deploy(engine, v1, backend, live, evaluate))
    assert result.promoted and (result.candidate_value, result.baseline_value) == (1.0, 0.0)
    assert (result.comparison.better, result.comparison.worse, result.comparison.difference.n) == (8, 0, 8)
    assert result.reason.startswith("promoted actor@v1 against base: pass@turn-1 +100.0 pts")
    assert "8 better, 0 worse, p=0.00781" in result.reason
    assert result.baseline == "base" and get_version(engine, "actor@v1").status == "active"
    assert live()["actor"].adapter == "actor@v1" and "actor@v1" in backend.adapters()

    v2 = _publish(engine, tmp_path / "adapters", adapter_template)  # serves wrong answers
    result = asyncio.run(gate_and_deploy(engine, v2, backend, live, evaluate))
    assert not result.promoted and (result.candidate_value, result.baseline_value) == (0.0, 1.0)
    assert result.reason == (
        "rejected actor@v2 against actor@v1: pass@turn-1 -100.0 pts [-100.0, -100.0] n=8 (candidate 0.0% "
        "[0.0, 32.4] n=8, baseline 100.0% [67.6, 100.0] n=8; 0 better, 8 worse, p=0.00781), worse by more than "
        "the margin (0 pts)")
    rejected = get_version(engine, "actor@v2")
    assert rejected.status == "rejected" and rejected.eval["gate"]["candidate"] == 0.0
    assert rejected.eval["gate"]["reason"] == result.reason
    with engine.connect() as conn:
        stored = conn.execute(select(Evaluation.metrics).order_by(Evaluation.id)).scalars().all()
    assert [m["decision"] for m in stored] == ["promoted", "rejected"]
    assert stored[1]["comparison"]["worse"] == 8 and stored[1]["comparison"]["p_value"] == pytest.approx(2 / 2**8)
    assert active_version(engine, "actor").name == "actor@v1" and live()["actor"].adapter == "actor@v1"
    assert backend.adapters() == ["actor@v1"]  # the rejected candidate's slot is freed
    with engine.connect() as conn:  # v2's baseline (actor@v1) reused v1's candidate evaluation
        played = conn.execute(select(Run.config)).scalars().all()
    assert [c["purpose"] for c in played] == ["gate baseline for actor@v1", "gate candidate actor@v1",
                                               "gate candidate actor@v2"]


def test_critic_gate_uses_balanced_accuracy_not_raw_accuracy(store_url, tmp_path, adapter_template, sums):
    """On a weak actor, a critic that says "incorrect" to everything has a high raw accuracy;
    the gate compares balanced accuracies and rejects it against a critic that checks."""
    engine = open_store(store_url)
    tasks = load_tasks(str(sums), n=8, seed=0, split="heldout")
    v1 = _publish(engine, tmp_path / "adapters", adapter_template, role="critic")
    promote(engine, v1.name)
    v2 = _publish(engine, tmp_path / "adapters", adapter_template, role="critic")
    critic = CheckingCritic(checks={"critic@v1"})
    live = LivePolicies({"actor": Policy(ScriptedBackend.from_function(right_on_zero)),
                         "critic": Policy(critic, adapter="critic@v1")})
    evaluate = Evaluator(engine, GAME, tasks, seed=0, options=ReflectionOptions(turns=1))
    result = asyncio.run(gate_and_deploy(engine, v2, critic, live, evaluate))
    assert result.metric == "critic_balanced_accuracy" and not result.promoted
    assert (result.candidate_value, result.baseline_value) == (0.5, 1.0)
    assert result.candidate_eval.metrics["critic_accuracy"].value == 7 / 8  # raw accuracy would look fine
    assert result.comparison.difference.value == pytest.approx(-0.5)
    assert result.reason.startswith("rejected critic@v2 against critic@v1: critic_balanced_accuracy -50.0 pts")
    assert active_version(engine, "critic").name == "critic@v1"

    # a critic reviewing only wrong answers cannot be measured: rejected, and the reason says why
    only_wrong = Evaluator(engine, GAME, tasks, seed=0, options=ReflectionOptions(turns=1))
    always_wrong = ScriptedBackend.from_function(lambda messages, request: "Answer: -1", name="always-wrong")
    live = LivePolicies({"actor": Policy(always_wrong), "critic": Policy(critic, adapter="critic@v1")})
    v3 = _publish(engine, tmp_path / "adapters", adapter_template, role="critic")
    result = asyncio.run(gate_and_deploy(engine, v3, critic, live, only_wrong))
    assert not result.promoted and result.comparison is None
    assert "needs the critic to review both right and wrong answers" in result.reason


def right_on_zero(messages, request) -> str:
    """A weak actor: right on "What is 0 + 7?" only."""
    return "Answer: 7" if "What is 0 + 7?" in messages[-1]["content"] else "Answer: -1"


class CheckingCritic(ScriptedBackend):
    """Checks the answer under the ``checks`` adapters; says "incorrect" to everything otherwise."""

    def __init__(self, checks: set[str]) -> None:
        super().__init__(self._review, bot_name="checking-critic")
        self.checks = checks

    def _review(self, messages, request) -> str:
        text = messages[-1]["content"]
        a = int(re.search(r"What is (\d+) \+ 7", text).group(1))
        right = f"Answer: {a + 7}" in text
        if request.adapter in self.checks:
            return f"Verdict: {'correct' if right else 'incorrect'}"
        return "Verdict: incorrect"


def test_margin_lets_an_equal_candidate_through(tmp_path, adapter_template, sums):
    engine = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    tasks = load_tasks(str(sums), n=4, seed=0, split="heldout")
    v1 = _publish(engine, tmp_path / "adapters", adapter_template)
    promote(engine, v1.name)
    v2 = _publish(engine, tmp_path / "adapters", adapter_template)
    backend = AdapterAware(good={"actor@v1", "actor@v2", "actor@v3"})
    live = LivePolicies({"actor": Policy(backend, adapter="actor@v1"), "critic": Policy(scripted_bot("echo"))})
    evaluate = Evaluator(engine, GAME, tasks, seed=0, options=ReflectionOptions(turns=1))
    result = asyncio.run(gate_and_deploy(engine, v2, backend, live, evaluate, margin=0.0))
    assert result.promoted and result.candidate_value == result.baseline_value == 1.0
    assert sorted(backend.adapters()) == ["actor@v1", "actor@v2"]  # the retired v1 may still serve episodes

    v3 = _publish(engine, tmp_path / "adapters", adapter_template)
    assert asyncio.run(gate_and_deploy(engine, v3, backend, live, evaluate)).promoted
    assert sorted(backend.adapters()) == ["actor@v2", "actor@v3"]  # v1 is unloaded at the next deploy


def test_hot_deploy_while_episodes_run(tmp_path, adapter_template, sums):
    """Episodes in flight finish on the version they started with; later ones use the new one."""
    engine = open_store(f"sqlite:///{tmp_path / 'h.db'}")
    v1 = _publish(engine, tmp_path / "adapters", adapter_template)
    backend = AdapterAware(good={"actor@v1"}, delay=0.02)
    asyncio.run(backend.load_adapter(v1.name, str(v1.path)))
    live = LivePolicies({"actor": Policy(backend), "critic": Policy(scripted_bot("always-incorrect"))})
    tasks = load_tasks(str(sums), n=8, seed=0, split="train") * 2

    async def main(recorder):
        running = asyncio.create_task(play(GAME, tasks, live, recorder, concurrency=4, seed=0,
                                           options=ReflectionOptions(turns=3, stop_on_correct=False)))
        await asyncio.sleep(0.1)  # some episodes are mid-way now
        live.swap("actor", v1.name)
        return await running

    with Recorder(engine) as recorder:
        report = asyncio.run(main(recorder))
    assert all(e.status == "succeeded" for e in report.episodes)
    served: dict[str, set[str]] = {}
    for turn in iter_turns(engine, EpisodeFilter(seat="actor")):
        served.setdefault(turn["episode_id"], set()).add(turn["served_by"])
    assert all(len(versions) == 1 for versions in served.values())  # no episode mixes versions
    assert {next(iter(v)) for v in served.values()} == {"scripted:adapter-aware", "actor@v1"}


# --- the guard: no family of tasks worse beyond noise -----------------------------------------


def _family_tasks(split: str, **counts: int) -> list[Task]:
    """``counts[family]`` sums ("What is a + 5?") or products ("What is a * 3?") per family."""
    operator = {"add": "+", "mul": "*"}
    return [Task(f"{split}-{family}-{a}", f"What is {a} {operator[family]} {3 if family == 'mul' else 5}?",
                 str(a * 3 if family == "mul" else a + 5), "generated", split, meta={"family": family})
            for family, n in counts.items() for a in range(1, n + 1)]


class OneOperation(ScriptedBackend):
    """Solves only sums under the ``sums`` adapters and only products under any other adapter
    (or none): the candidate that learned addition and unlearned multiplication."""

    def __init__(self, sums: set[str]) -> None:
        super().__init__(self._answer, bot_name="one-operation")
        self.sums = sums

    def _answer(self, messages, request) -> str:
        question = messages[-1]["content"]
        if ("+" in question) == (request.adapter in self.sums):
            return BOTS["calculator"](messages, request)
        return "Answer: 0"


def test_a_candidate_better_overall_but_worse_on_one_family_is_refused_naming_it(store_url, tmp_path,
                                                                                 adapter_template):
    engine = open_store(store_url)
    v1 = _publish(engine, tmp_path / "adapters", adapter_template)
    backend = OneOperation(sums={"actor@v1"})
    live = LivePolicies({"actor": Policy(backend), "critic": Policy(scripted_bot("always-correct"))})
    options = ReflectionOptions(turns=1)
    evaluate = Evaluator(engine, GAME, _family_tasks("unseen", add=12, mul=8), seed=0, options=options,
                         name="unseen")
    result = asyncio.run(gate_and_deploy(engine, v1, backend, live, evaluate))
    assert (result.candidate_value, result.baseline_value) == (0.6, 0.4)  # +20 pts overall ...
    assert not result.promoted  # ... but every product is now wrong
    assert "worse beyond noise on family mul (unseen) -100.0 pts" in result.reason
    assert "0 better, 8 worse, p=0.00781" in result.reason and "family add" not in result.reason
    assert get_version(engine, "actor@v1").status == "rejected" and live()["actor"].adapter is None
    figures = get_version(engine, "actor@v1").eval["gate"]
    assert figures["families"]["unseen"]["add"]["better"] == 12 and len(figures["regressions"]) == 1


def test_a_guard_set_refuses_a_candidate_the_deciding_set_would_promote(store_url, tmp_path, adapter_template):
    """Only sums in the deciding set (the candidate solves them all), products in the guard set:
    the guard's family mul refuses it; without the guard it is promoted."""
    engine = open_store(store_url)
    backend = OneOperation(sums={"actor@v1", "actor@v2"})
    live = LivePolicies({"actor": Policy(backend), "critic": Policy(scripted_bot("always-correct"))})
    options = ReflectionOptions(turns=1)
    evaluate = Evaluator(engine, GAME, _family_tasks("unseen", add=8), seed=0, options=options, name="unseen")
    guard = Evaluator(engine, GAME, _family_tasks("gsm", mul=6), seed=0, options=options, name="gsm.jsonl")
    v1 = _publish(engine, tmp_path / "adapters", adapter_template)
    result = asyncio.run(gate_and_deploy(engine, v1, backend, live, evaluate, guards=[guard]))
    assert not result.promoted and result.comparison.difference.value == 1.0
    assert "family mul (gsm.jsonl) -100.0 pts" in result.reason
    assert set(result.guard_evals) == {"gsm.jsonl"}
    assert [e.metrics["pass@turn-1"].value for e in result.guard_evals["gsm.jsonl"]] == [0.0, 1.0]

    v2 = _publish(engine, tmp_path / "adapters", adapter_template)
    assert asyncio.run(gate_and_deploy(engine, v2, backend, live, evaluate)).promoted


def test_guard_sets_need_distinct_names(store_url, tmp_path, adapter_template, sums):
    engine = open_store(store_url)
    v1 = _publish(engine, tmp_path / "adapters", adapter_template)
    backend = AdapterAware(good={"actor@v1"})
    live = LivePolicies({"actor": Policy(backend), "critic": Policy(scripted_bot("always-correct"))})
    evaluate = Evaluator(engine, GAME, load_tasks(str(sums), n=4, seed=0, split="heldout"), seed=0,
                         options=ReflectionOptions(turns=1))
    with pytest.raises(GateError, match="distinct names"):
        asyncio.run(gate_and_deploy(engine, v1, backend, live, evaluate, guards=[evaluate]))
    assert get_version(engine, "actor@v1").status == "candidate"
