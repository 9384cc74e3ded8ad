"""Which training recipe makes the actor learn most in the same time: a comparison in one run.

1. The base model plays ``--train-tasks`` training problems of ``--train-source`` ``--samples``
   times each (sampled at ``--temperature``, one actor turn; a scripted critic that approves,
   so only the actor is a model) into a fresh store. Every recipe learns from these same logs.
   The defaults make data at the main job's rate: level-1 problems at temperature 0.3.
2. Each recipe trains a fresh actor adapter (from the base) for at most ``--budget`` seconds:
   rejection-sampling SFT, DPO (best vs worst of a task's samples), DPO with an NLL term on the
   chosen side, offline PPO, online GRPO (its own rollouts inside the budget), and SFT then
   DPO (half the budget each).
3. The base model and every adapter answer the same problems greedily: by default the dev
   set (``--eval-on dev``: the 4,001st-4,050th training problem of each level, which no
   recipe trains on), since the winner is chosen from this table and choices are never made
   on the held-out problems; ``--eval-on heldout`` checks a choice there. The table reports
   pass@turn-1 with its 95% interval and each recipe's paired change against the base.

    python -m bench.learning_recipes                       # about 40 minutes on 2 CPU cores
    python -m bench.learning_recipes --recipes sft,dpo --budget 60 --train-tasks 16 --eval-tasks 32
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from app.settings import load_settings
from app.wiring import PolicyFactory
from evaluation.evaluator import EvaluationResult, Evaluator
from graphs.games import get_game
from graphs.math_reflection.options import ReflectionOptions
from graphs.metrics.stats import Estimate, paired
from graphs.policies.base import SamplingParams
from graphs.policies.policy import Policy
from graphs.runner import play
from graphs.tasks import load_tasks
from graphs.tasks.arithmetic import LEVELS, problems
from graphs.tasks.base import Task
from storage.engine import open_store
from storage.recorder import Recorder
from storage.records import RunRecord
from training.datasets import DatasetError, LogFilter, build_snapshot, load_snapshot
from training.jobs import run_training_job
from training.registry import AdapterRecord
from training.trainers.kinds import trainer_kind

RECIPES = ("sft", "dpo", "dpo-nll", "ppo", "grpo", "sft-dpo")
GAME = get_game("math-reflection")
OPTIONS = ReflectionOptions(turns=1)
CRITIC = "scripted:always-correct"
DEV_START = 4000
"""The dev set: DEV_START onwards of each level's training problems; training tasks stay below it."""


@dataclass(frozen=True)
class Stage:
    """One training job of a recipe: a trainer kind, config overrides and its share of the budget."""

    kind: str
    overrides: dict[str, Any]
    share: float = 1.0


STAGES: dict[str, list[Stage]] = {
    "sft": [Stage("sft", {})],
    "dpo": [Stage("dpo", {})],
    "dpo-nll": [Stage("dpo", {"rpo_alpha": 1.0})],
    "ppo": [Stage("ppo", {})],
    "grpo": [Stage("grpo", {"learning_rate": 1e-4, "max_completion_length": 96})],
    "sft-dpo": [Stage("sft", {}, 0.5), Stage("dpo", {}, 0.5)],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipes", default=",".join(RECIPES), help=f"comma-separated, from {', '.join(RECIPES)}")
    parser.add_argument("--train-source", default="arithmetic:1", help="task source of the training problems")
    parser.add_argument("--train-tasks", type=int, default=256)
    parser.add_argument("--samples", type=int, default=2, help="samples per training task (DPO pairs need 2+)")
    parser.add_argument("--temperature", type=float, default=0.3, help="sampling temperature of the training play")
    parser.add_argument("--eval-on", choices=("dev", "heldout"), default="dev",
                        help="dev: training-split problems no recipe trains on; heldout: the held-out split")
    parser.add_argument("--eval-tasks", type=int, default=200, help="problems evaluated (dev: a multiple of 4)")
    parser.add_argument("--budget", type=float, default=240, help="training seconds per recipe")
    parser.add_argument("--epochs", type=float, default=2, help="at most this many passes within the budget")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--workdir", type=Path, default=None, help="store and adapters (default: a temp dir)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    recipes = [r.strip() for r in args.recipes.split(",") if r.strip()]
    unknown = sorted(set(recipes) - set(RECIPES))
    if unknown:
        parser.error(f"unknown recipe(s) {', '.join(unknown)}; choose from {', '.join(RECIPES)}")
    if args.train_tasks > DEV_START:
        parser.error(f"--train-tasks must be at most {DEV_START}: the dev set starts there")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="sparring-recipes-"))
    workdir.mkdir(parents=True, exist_ok=True)
    results = asyncio.run(compare(recipes, args, workdir))
    print_table(results, args)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


async def compare(recipes: list[str], args: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    settings = load_settings()
    engine = open_store(f"sqlite:///{workdir / 'recipes.db'}")
    sampling = SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    factory = PolicyFactory(settings, sampling, None)
    try:
        backend = factory.model_backend()
        critic = await factory.policy("critic", CRITIC)
        actor = Policy(backend, sampling)
        train = load_tasks(args.train_source, n=args.train_tasks, seed=settings.seed, split="train")
        say(f"playing {len(train)} training tasks x {args.samples} samples")
        started = time.perf_counter()
        await play_logged(engine, [t for t in train for _ in range(args.samples)],
                          {"actor": actor, "critic": critic}, args.concurrency, settings.seed)
        say(f"  {time.perf_counter() - started:.0f} s")
        snapshots = build_datasets(engine, recipes, settings, workdir)
        evaluate = Evaluator(engine, GAME, eval_tasks(args, settings.seed), settings.seed, OPTIONS,
                             args.concurrency, say=say)
        base = await evaluate({"actor": actor, "critic": critic}, label="base")
        results = [{"recipe": "base (no training)", "rows": None, "steps": None, "train_s": 0.0,
                    **figures(base, None)}]
        for recipe in recipes:
            say(f"recipe {recipe}")
            try:
                adapter, rows, steps, seconds = train_recipe(engine, recipe, args, settings, train, critic, workdir,
                                                             snapshots)
            except Exception as exc:  # one recipe failing (e.g. no pairs) must not lose the others
                say(f"  {recipe} failed: {type(exc).__name__}: {exc}")
                results.append({"recipe": recipe, "error": f"{type(exc).__name__}: {exc}"})
                continue
            await backend.load_adapter(adapter.name, str(adapter.path))
            scored = await evaluate({"actor": Policy(backend, sampling, adapter=adapter.name), "critic": critic},
                                    label=recipe)
            results.append({"recipe": recipe, "rows": rows, "steps": steps, "train_s": seconds, "adapter": adapter.name,
                            **figures(scored, base)})
        return results
    finally:
        await factory.aclose()


def eval_tasks(args: argparse.Namespace, seed: int) -> list[Task]:
    """The problems every policy answers: the dev set (an equal share of each level) or held-out ones."""
    if args.eval_on == "heldout":
        return load_tasks("arithmetic", n=args.eval_tasks, seed=seed, split="heldout")
    per_level = args.eval_tasks // len(LEVELS)
    return [task for level in LEVELS for task in islice(problems("train", level), DEV_START, DEV_START + per_level)]


def figures(scored: EvaluationResult, base: EvaluationResult | None) -> dict[str, Any]:
    """pass@turn-1 with its interval, and the paired change against the base's outcomes."""
    result: dict[str, Any] = {"pass@turn-1": scored.metrics["pass@turn-1"].to_dict()}
    if base is not None:
        comparison = paired(scored.per_task["pass@turn-1"], base.per_task["pass@turn-1"])
        result["vs base"] = comparison.to_dict()
        result["change"] = f"{comparison.difference.signed(with_n=False)}, p={comparison.p_text(2)}"
    return result


def build_datasets(engine, recipes: list[str], settings, workdir: Path) -> dict[str, Any]:
    """Every dataset the recipes need, built once from the shared logs before any recipe runs
    (GRPO's own rollouts must not leak into the others' data)."""
    kinds = {stage.kind for recipe in recipes for stage in STAGES[recipe]} - {"grpo"}
    snapshots: dict[str, Any] = {}
    for kind in sorted(kinds):
        try:
            snapshots[kind] = build_snapshot(engine, kind, "actor", game=GAME.name, base_model=settings.model,
                                             out_dir=workdir / "datasets", since=None,
                                             log_filter=LogFilter(split="train"), seed=settings.seed)
            say(f"{kind} dataset: {snapshots[kind].row_count} rows")
        except DatasetError as exc:
            snapshots[kind] = exc
            say(f"{kind} dataset: none ({exc})")
    return snapshots


def train_recipe(engine, recipe, args, settings, train_tasks, critic, workdir,
                 snapshots) -> tuple[AdapterRecord, int, int, float]:
    """Run a recipe's stages in order, each continuing from the previous one's adapter."""
    parent, rows_used, steps, seconds = None, 0, 0, 0.0
    for stage in STAGES[recipe]:
        config_type = trainer_kind(stage.kind).config_type
        config = config_type(model=settings.model, device=settings.device, seed=settings.seed,
                             num_train_epochs=args.epochs, max_seconds=args.budget * stage.share,
                             **stage.overrides)
        common = {"config": config, "adapters_root": workdir / "adapters", "cache_dir": settings.cache_dir,
                  "parent": parent}
        if stage.kind == "grpo":
            with Recorder(engine) as sink:
                run = RunRecord.new(GAME.name, {"purpose": "grpo rollouts"}, settings.seed)
                sink.start_run(run)
                job = run_training_job(engine, kind="grpo", role="actor", rows=train_tasks, **common,
                                       extra={"game": GAME.name, "other_policies": {"critic": critic}, "sink": sink,
                                              "run_id": run.id, "options": OPTIONS})
                sink.finish_run(run.id, "finished", {})
            rows = len(train_tasks)
        else:
            snapshot = snapshots[stage.kind]
            if isinstance(snapshot, Exception):
                raise snapshot
            data = load_snapshot(engine, snapshot.id, role="actor", base_model=settings.model, kind=stage.kind)
            job = run_training_job(engine, kind=stage.kind, role="actor", rows=data,
                                   dataset_snapshot_id=snapshot.id, **common)
            rows = snapshot.row_count
        parent = job.adapter
        rows_used += rows
        steps += int(job.metrics.get("steps", 0))
        seconds += float(job.metrics.get("runtime_s", 0.0))
        say(f"  {stage.kind}: {rows} rows, {steps} steps, {seconds:.0f} s")
    return parent, rows_used, steps, seconds


async def play_logged(engine, tasks, policies, concurrency: int, seed: int) -> None:
    run = RunRecord.new(GAME.name, {"purpose": "recipe data"}, seed)
    with Recorder(engine) as recorder:
        recorder.start_run(run)
        await play(GAME, tasks, policies, recorder, concurrency=concurrency, seed=seed, options=OPTIONS,
                   run_id=run.id)
        recorder.finish_run(run.id, "finished", {})


def print_table(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    where = "dev (training-split problems no recipe trains on)" if args.eval_on == "dev" else "held-out"
    print(f"\n{where} arithmetic, greedy, pass@turn-1 [95%]; training budget {args.budget:.0f} s per recipe on "
          f"{args.train_tasks} {args.train_source} tasks x {args.samples} samples at T={args.temperature}")
    print("| recipe | rows | steps | train s | pass@turn-1 | vs base, paired | better/worse |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        if "error" in r:
            print(f"| {r['recipe']} | failed: {r['error']} |")
            continue
        vs = r.get("vs base")
        flips = "" if vs is None else f"{vs['better']}/{vs['worse']}"
        print(f"| {r['recipe']} | {r['rows'] or ''} | {r['steps'] or ''} | {r['train_s']:.0f} | "
              f"{Estimate.from_dict(r['pass@turn-1']).format()} | {r.get('change', '')} | {flips} |")


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
