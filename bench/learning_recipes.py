"""Which training recipe makes the actor learn most in the same time: a comparison in one run.

Everything goes through ``app.api`` into one store in ``--workdir`` (SPARRING_DATA_DIR is set
there too, so its dataset snapshots and adapters stay beside it):

1. The base model plays ``--train-tasks`` training problems of ``--train-source`` ``--samples``
   times each (``api.play``: sampled at ``--temperature``, one actor turn; a scripted critic
   that approves, so only the actor is a model). Every recipe learns from these same logs: each
   dataset a recipe needs is built from them once (``api.build_dataset``) before any recipe runs.
   The defaults make data at the main job's rate: level-1 problems at temperature 0.3.
2. Each recipe trains a fresh actor adapter (from the base) for at most ``--budget`` seconds
   (``api.train``): rejection-sampling SFT, DPO (best vs worst of a task's samples), DPO with an
   NLL term on the chosen side, offline PPO, online GRPO (its own rollouts inside the budget, on
   the training problems ``api.train`` loads from ``--train-source``: the first 100 of an
   arithmetic source), and SFT then DPO (half the budget each, DPO continuing SFT's adapter).
3. The base model and every adapter answer the same problems greedily (``api.evaluate``, in its
   float32): by default the dev set (``--eval-on dev``: the 4,001st-4,050th training problem of
   each level, which no recipe trains on, written to ``dev.jsonl`` in the workdir as a task
   file), since the winner is chosen from this table and choices are never made on the
   held-out problems; ``--eval-on heldout`` checks a choice there. The table reports
   pass@turn-1 with its 95% interval and each recipe's paired change against the base.

    python -m bench.learning_recipes                       # about 40 minutes on 2 CPU cores
    python -m bench.learning_recipes --recipes sft,dpo --budget 60 --train-tasks 16 --eval-tasks 32
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from app import api
from graphs.metrics.stats import Estimate, paired
from graphs.tasks.arithmetic import LEVELS, problems

if TYPE_CHECKING:
    from evaluation.evaluator import EvaluationResult
    from training.datasets import SnapshotResult

RECIPES = ("sft", "dpo", "dpo-nll", "ppo", "grpo", "sft-dpo")
GAME = "math-reflection"
OPTIONS = {"turns": 1}
CRITIC = "scripted:always-correct"
BASE = "model:base"
DEV_START = 4000
"""The dev set: DEV_START onwards of each level's training problems; training tasks stay below it."""


@dataclass(frozen=True)
class Stage:
    """One training job of a recipe: a trainer kind, its config settings and its share of the budget."""

    kind: str
    settings: dict[str, Any]
    share: float = 1.0


STAGES: dict[str, list[Stage]] = {
    "sft": [Stage("sft", {})],
    "dpo": [Stage("dpo", {})],
    "dpo-nll": [Stage("dpo", {"rpo_alpha": 1.0})],
    "ppo": [Stage("ppo", {})],
    "grpo": [Stage("grpo", {"learning_rate": 1e-4, "max_completion_length": 96})],
    "sft-dpo": [Stage("sft", {}, 0.5), Stage("dpo", {}, 0.5)],
}


@dataclass(frozen=True)
class Trained:
    """A recipe's last adapter and what its stages trained on, in how many steps and seconds."""

    adapter: str
    rows: int
    steps: int
    seconds: float


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
    if args.eval_on == "dev" and args.eval_tasks < len(LEVELS):
        parser.error(f"--eval-tasks must be at least {len(LEVELS)} on the dev set: an equal share of each level")
    workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="sparring-recipes-"))).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    os.environ["SPARRING_DATA_DIR"] = str(workdir)
    try:
        results = compare(recipes, args, workdir)
    except api.SparringError as exc:
        sys.exit(f"learning_recipes: {exc}")
    print_table(results, args)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


def compare(recipes: list[str], args: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    """The base's figures, then each recipe's (or why it failed), all measured in this run."""
    store = f"sqlite:///{workdir / 'recipes.db'}"
    play_training(args, store)
    snapshots = build_datasets(recipes, store)
    eval_set = evaluation_set(args, workdir)
    say("evaluating the base model")
    base = evaluate(BASE, args, store, eval_set)
    results = [{"recipe": "base (no training)", "rows": None, "steps": None, "train_s": 0.0, **figures(base, None)}]
    for recipe in recipes:
        say(f"recipe {recipe}")
        try:
            trained = train_recipe(recipe, args, store, workdir, snapshots)
            scored = evaluate(f"model:{trained.adapter}", args, store, eval_set)
        except api.SparringError as exc:  # one recipe failing (e.g. no pairs) must not lose the others
            say(f"  {recipe} failed: {type(exc).__name__}: {exc}")
            results.append({"recipe": recipe, "error": f"{type(exc).__name__}: {exc}"})
            continue
        results.append({"recipe": recipe, "rows": trained.rows, "steps": trained.steps, "train_s": trained.seconds,
                        "adapter": trained.adapter, **figures(scored, base)})
    return results


def play_training(args: argparse.Namespace, store: str) -> None:
    """The base model's sampled answers to the training problems, logged to the store."""
    say(f"playing {args.train_tasks} training tasks x {args.samples} samples")
    started = time.perf_counter()
    played = api.play(GAME, episodes=args.train_tasks * args.samples, samples=args.samples,
                      seats={"actor": BASE, "critic": CRITIC}, tasks=args.train_source, split="train",
                      options=OPTIONS, temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                      concurrency=args.concurrency, database_url=store)
    say(f"  {played.succeeded}/{played.episodes} episodes succeeded, {time.perf_counter() - started:.0f} s")
    if played.first_failure is not None:
        say(f"  first failure: {played.first_failure}")


def build_datasets(recipes: list[str], store: str) -> dict[str, SnapshotResult | api.InputError]:
    """Every dataset the recipes need, built once from the shared logs before any recipe runs
    (GRPO's own rollouts must not leak into the others' data); a kind with no rows keeps its error."""
    kinds = {stage.kind for recipe in recipes for stage in STAGES[recipe]} - {"grpo"}
    snapshots: dict[str, SnapshotResult | api.InputError] = {}
    for kind in sorted(kinds):
        try:
            snapshots[kind] = api.build_dataset(kind, role="actor", game=GAME, since="all", split="train",
                                                database_url=store)
            say(f"{kind} dataset: {snapshots[kind].row_count} rows")
        except api.InputError as exc:
            snapshots[kind] = exc
            say(f"{kind} dataset: none ({exc})")
    return snapshots


def train_recipe(recipe: str, args: argparse.Namespace, store: str, workdir: Path,
                 snapshots: dict[str, SnapshotResult | api.InputError]) -> Trained:
    """Run a recipe's stages in order, the first from the base, each next one continuing the previous one's adapter."""
    jobs: list[api.TrainResult] = []
    for number, stage in enumerate(STAGES[recipe], start=1):
        parent = jobs[-1].adapter.name if jobs else None
        jobs.append(train_stage(stage, args, store, config_file(stage, workdir / f"{recipe}-{number}.yaml"), parent,
                                snapshots))
        say(f"  {stage.kind}: {jobs[-1].rows} rows, {steps(jobs[-1])} steps, {seconds(jobs[-1]):.0f} s")
    return Trained(jobs[-1].adapter.name, sum(job.rows for job in jobs), sum(map(steps, jobs)), sum(map(seconds, jobs)))


def steps(job: api.TrainResult) -> int:
    return int(job.metrics.get("steps", 0))


def seconds(job: api.TrainResult) -> float:
    return float(job.metrics.get("runtime_s", 0.0))


def train_stage(stage: Stage, args: argparse.Namespace, store: str, settings: Path | None, parent: str | None,
                snapshots: dict[str, SnapshotResult | api.InputError]) -> api.TrainResult:
    """One stage's training job: from its dataset, or online (GRPO) against the scripted critic."""
    common: dict[str, Any] = {"role": "actor", "game": GAME, "fresh": parent is None, "parent": parent,
                              "epochs": args.epochs, "max_seconds": args.budget * stage.share,
                              "config_file": settings, "database_url": store}
    if stage.kind == "grpo":
        job = api.train("grpo", tasks=args.train_source, seats={"critic": CRITIC}, **common)
    else:
        snapshot = snapshots[stage.kind]
        if isinstance(snapshot, api.InputError):
            raise snapshot
        job = api.train(stage.kind, dataset=snapshot.id, **common)
    assert job is not None  # None only in the other processes of `accelerate launch`
    return job


def config_file(stage: Stage, path: Path) -> Path | None:
    """The stage's trainer settings as the YAML file ``api.train`` reads (JSON is YAML); None when it has none."""
    if not stage.settings:
        return None
    path.write_text(json.dumps(stage.settings) + "\n")
    return path


def evaluation_set(args: argparse.Namespace, workdir: Path) -> tuple[str, str]:
    """The task source and split every policy answers: the dev set (an equal share of each level,
    as a task file) or the held-out problems."""
    if args.eval_on == "heldout":
        return "arithmetic", "heldout"
    per_level = args.eval_tasks // len(LEVELS)
    dev = [task for level in LEVELS for task in islice(problems("train", level), DEV_START, DEV_START + per_level)]
    path = workdir / "dev.jsonl"
    path.write_text("".join(json.dumps({"question": t.question, "answer": f"#### {t.answer}"}) + "\n" for t in dev))
    return str(path), "eval"


def evaluate(actor: str, args: argparse.Namespace, store: str, eval_set: tuple[str, str]) -> EvaluationResult:
    """``actor`` (a seat spec) answering the evaluation set greedily beside the scripted critic."""
    tasks, split = eval_set
    report = api.evaluate(GAME, seats={"actor": actor, "critic": CRITIC}, tasks=tasks, split=split,
                          n=args.eval_tasks, options=OPTIONS, max_new_tokens=args.max_new_tokens,
                          concurrency=args.concurrency, database_url=store)
    return report.sets[0].result


def figures(scored: EvaluationResult, base: EvaluationResult | None) -> dict[str, Any]:
    """pass@turn-1 with its interval, and the paired change against the base's outcomes."""
    result: dict[str, Any] = {"pass@turn-1": scored.metrics["pass@turn-1"].to_dict()}
    if base is not None:
        comparison = paired(scored.per_task["pass@turn-1"], base.per_task["pass@turn-1"])
        result["vs base"] = comparison.to_dict()
        result["change"] = f"{comparison.difference.signed(with_n=False)}, p={comparison.p_text(2)}"
    return result


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
