"""The task sets an evaluation plays: its source's evaluation splits, then the user's guard sets.

``sparring eval``, the gate (``sparring deploy``, each retrain round) and the retrain before/after
report play the same sets: for the arithmetic generator the template-held-out ``unseen`` split
(the deciding set) and ``heldout`` (new numbers in the training wordings); for a task file or
another source its ``heldout`` tasks. ``--guard SOURCE`` adds sets (another level, a user's file
such as GSM8K's test problems) on which no family may get worse for a candidate to be promoted.
Each set is an ``Evaluator`` of its own (a run per set and policy set, remembered by its key);
the evaluators of one command share their greedy replay.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from sqlalchemy import Engine

from evaluation.evaluator import Deciding, Evaluator, PhaseProgress, Player, PlayerSpecs
from evaluation.families import family_of
from graphs.context import GameOptions
from graphs.registry import GameSpec
from graphs.tasks.base import Task, TaskSourceError


def evaluation_sets(game: GameSpec, spec: str, n: int, seed: int, guards: Sequence[str] = (),
                    splits: Sequence[str] | None = None) -> dict[str, list[Task]]:
    """Set name -> its tasks: ``n`` of each evaluation split of ``spec`` (``splits``, default
    the source's, the deciding split first), then ``n`` of each guard source's first evaluation
    split, named by the source. Raises TaskSourceError for a source without tasks, a task
    without an answer to check in a game whose own tasks have answers, or two sets of one name."""
    sets: dict[str, list[Task]] = {}
    origins: dict[str, str] = {}
    for split in splits or game.tasks.evaluation_splits(spec):
        sets[split], origins[split] = _checked(spec, game.tasks.load(spec, n=n, seed=seed, split=split)), spec
    # a game judged against the truth (its own tasks have answers) needs an answer on every task
    answered = any(_answered(t) for tasks in sets.values() for t in tasks)
    for guard in guards:
        name = Path(guard).name if Path(guard).is_file() else guard
        if name in sets:
            raise TaskSourceError(f"--guard {guard}: a set named {name!r} is played already; give each guard once")
        split = game.tasks.evaluation_splits(guard)[0]
        sets[name] = _checked(f"--guard {guard}", game.tasks.load(guard, n=n, seed=seed, split=split))
        origins[name] = f"--guard {guard}"
    for name, tasks in sets.items():
        unanswered = [t.id for t in tasks if not _answered(t)]
        if answered and unanswered:
            raise TaskSourceError(f"{origins[name]}: {len(unanswered)} task(s) have no answer to check against "
                                  f"(first: {unanswered[0]}); an evaluation of {game.name} needs each task's "
                                  "ground truth")
    return sets


def _answered(task: Task) -> bool:
    return task.answer is not None and bool(str(task.answer).strip())


def _checked(what: str, tasks: list[Task]) -> list[Task]:
    if not tasks:
        raise TaskSourceError(f"{what}: no tasks; give a file with rows or another source")
    if len({t.id for t in tasks}) < len(tasks):
        raise TaskSourceError(f"{what}: repeated task ids; a paired comparison needs one episode per task")
    return tasks


def evaluators(engine: Engine, game: GameSpec, sets: dict[str, list[Task]], seed: int, options: GameOptions,
               concurrency: int, *, say: Callable[[str], None] = lambda message: None,
               progress: PhaseProgress = lambda phase, done, total: None,
               deciding: Deciding | None = None, player: Player | None = None,
               player_specs: PlayerSpecs | None = None) -> list[Evaluator]:
    """One evaluator per set, in order, sharing one greedy replay; ``deciding``, ``player``,
    ``player_specs``: see ``Evaluator``."""
    made: list[Evaluator] = []
    for name, tasks in sets.items():
        replay = {"replay": made[0].replay} if made else {}
        made.append(Evaluator(engine, game, tasks, seed, options, concurrency, say=say, progress=progress,
                              name=name, deciding=deciding, player=player, player_specs=player_specs, **replay))
    return made


def only_families(sets: dict[str, list[Task]], wanted: Sequence[str]) -> dict[str, list[Task]]:
    """Each set's tasks of the ``wanted`` families; raises TaskSourceError naming the families
    there are when one of ``wanted`` matches no task."""
    present = {family_of(t) for tasks in sets.values() for t in tasks}
    missing = [f for f in wanted if f not in present]
    if missing:
        raise TaskSourceError(f"--family {', '.join(missing)}: no such family in these tasks; "
                              f"families: {', '.join(sorted(present))}")
    kept = {name: [t for t in tasks if family_of(t) in wanted] for name, tasks in sets.items()}
    return {name: tasks for name, tasks in kept.items() if tasks}


def check_held_out(training: Sequence[Task], sets: dict[str, list[Task]], *, same_wordings: str = "heldout") -> None:
    """Raise TaskSourceError when an evaluation set (but ``same_wordings``, the held-out problems
    in the training wordings) has a task whose ``template`` some training task has too: a
    template-held-out figure must come from wordings training never saw."""
    trained = {t.meta.get("template") for t in training} - {None}
    for name, tasks in sets.items():
        if name == same_wordings:
            continue
        shared = sorted({t.meta.get("template") for t in tasks} & trained)
        if shared:
            first = next(t for t in tasks if t.meta.get("template") == shared[0])
            raise TaskSourceError(
                f"evaluation set {name}: template {shared[0]!r} (task {first.id}) is in the training tasks too"
                f"{f' (and {len(shared) - 1} more)' if len(shared) > 1 else ''}; a held-out set must share no "
                "wording with training: drop those rows from one of the files, or give them another template")
