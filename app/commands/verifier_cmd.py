"""`sparring eval-verifier`: a trained verifier against the rules judge on held-out answers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from app.commands.common import DbOption, FormatOption, err, fail, out, settings_or_exit, store_or_exit
from app.output import Format, emit

if TYPE_CHECKING:
    from graphs.metrics.stats import Estimate


def eval_verifier(
    name: Annotated[str, typer.Argument(help="The verifier: a version (verifier@v2) or a role (its active version).")],
    game: Annotated[str | None, typer.Option(help="Game whose logged answers are judged (default: the one the "
                                                  "verifier was trained on).", show_default=False)] = None,
    answers: Annotated[str | None, typer.Option(help="Role whose answers are judged (default: the one the verifier "
                                                     "was trained on).", show_default=False)] = None,
    split: Annotated[str, typer.Option(help="Task split of the episodes read: heldout (the evaluation problems "
                                            "`sparring eval` plays), eval (task files) or train.")] = "heldout",
    n: Annotated[int | None, typer.Option("--n-answers", "-n", min=1, help="Judge at most this many answers "
                                          "(the earliest episodes first; default: all).", show_default=False)] = None,
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Score logged answers with a trained verifier and compare with the rules judge, per difficulty.

    The answers are the role's model turns that its game checked against the ground truth (their
    `correct` reward), in succeeded episodes of --split. The verifier calls an answer correct when
    its score is above the threshold it was trained with. Per difficulty level and in all: how
    often the two agree (accuracy), the share of correct answers it accepts and of
    incorrect ones it rejects, and their mean (balanced accuracy: 50% for a verifier that says
    the same of every answer), each with its 95% interval and n.

    Examples:

    * `sparring eval -n 200` (logs held-out answers), then `sparring eval-verifier verifier@v1`
    * `sparring eval-verifier verifier --game ensemble --answers solver --format json`
    """
    from evaluation.verifier_report import NoAnswersError, verifier_report
    from graphs.policies.adapter_folder import AdapterFolderError
    from graphs.policies.base_models import ModelLoadError
    from graphs.policies.reward_model import RewardModel
    from storage.dataset_rows import snapshot as dataset_snapshot
    from training.adapter_folders import verify_folder
    from training.registry import TRAINING_EVAL, RegistryError, active_version, get_version

    settings = settings_or_exit(database_url=db)
    engine = store_or_exit(settings)
    try:
        record = get_version(engine, name) if "@" in name else active_version(engine, name)
    except RegistryError as exc:
        fail(f"{exc}; `sparring adapters list` lists the versions")
    if record is None:
        fail(f"role {name!r} has no active version: name a version ({name}@vN), or promote one with "
             f"`sparring adapters promote {name}@vN`")
    if not record.is_verifier:
        fail(f"{record.name} is a policy (trained by {record.trainer}), not a verifier: train one with "
             "`sparring train reward --role verifier --answers actor`")
    snapshot = None if record.dataset_snapshot_id is None else dataset_snapshot(engine, record.dataset_snapshot_id)
    game = game or (snapshot["game"] if snapshot else None)
    answers = answers or (snapshot["role"] if snapshot else None)
    if game is None or answers is None:
        fail(f"{record.name} records no dataset snapshot to take the game and the answering role from: pass "
             "--game and --answers")
    try:
        verify_folder(record.path, base_model=settings.model, status=record.status)
        with err.status(f"loading {record.name}…"):
            verifier = RewardModel.load(record.name, record.path, base_model=settings.model,
                                        threshold=record.eval[TRAINING_EVAL]["threshold"],
                                        cache_dir=settings.cache_dir, device=settings.device, dtype=settings.dtype)
        with err.status(f"scoring the {split} answers of {answers} in {game}…"):
            report = verifier_report(engine, verifier, game=game, role=answers, split=split, limit=n)
    except (AdapterFolderError, ModelLoadError, NoAnswersError) as exc:
        fail(str(exc))
    if fmt != Format.table:
        emit([{"verifier": report.verifier, "threshold": report.threshold, "game": game, "answers": answers,
               "split": split, **level.to_dict()} for level in report.levels], fmt)
        return
    rows = [{"difficulty": level.difficulty, "n": level.n, "correct": level.correct, "incorrect": level.incorrect,
             "balanced accuracy": _cell(level.balanced_accuracy), "accuracy": _cell(level.accuracy),
             "accepted": _cell(level.accepted), "rejected": _cell(level.rejected)}
            for level in report.levels]
    emit(rows, fmt, title=f"{record.name} against the rules judge", console=out,
         caption=f"{answers}'s {split} answers in {game}; correct: a score above {report.threshold:.3f}; "
                 "accepted: of the correct answers, rejected: of the incorrect ones; [95% interval]")


def _cell(estimate: Estimate) -> str:
    """``75.0% [60.1, 85.8]``, or ``-`` when undefined (a level without correct or incorrect answers)."""
    if estimate.value is None or estimate.low is None or estimate.high is None:
        return "-"
    return f"{100 * estimate.value:.1f}% [{100 * estimate.low:.1f}, {100 * estimate.high:.1f}]"
