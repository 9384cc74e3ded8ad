"""`sparring jobs list|show`: training jobs, with each one's history (loss, learning rate,
reward margins... per step) and a loss-curve plot on request."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from app.commands.common import DbOption, FormatOption, engine_or_exit, err, fail, out
from app.output import Format, dumps, emit

jobs_app = typer.Typer(help="Training jobs: their status, final metrics and history per step.", no_args_is_help=True)
JOB_STATUSES = ("queued", "running", "succeeded", "failed")
TABLE_METRICS = 4
"""Metrics a history table shows by default (the most telling first; --metric picks others)."""


def job_summary(job) -> dict:
    """A job as `jobs list` and `sparring report` show it (steps: the step entries it logged)."""
    return {
        "job": job.id,
        "kind": job.kind,
        "role": job.role,
        "status": job.status,
        "adapter": job.adapter,
        "dataset": job.dataset_snapshot_id,
        "steps": len([e for e in job.history if "train_runtime" not in e]),
        "loss": (job.metrics or {}).get("train_loss"),
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "error": job.error,
    }


@jobs_app.command("list")
def jobs_list(
    role: Annotated[str | None, typer.Option(help="Only this role's jobs.", show_default=False)] = None,
    kind: Annotated[str | None, typer.Option(help="Only this trainer (sft, dpo, kto, ppo, grpo, reward).")] = None,
    status: Annotated[str | None, typer.Option(help="queued, running, succeeded or failed.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="Newest jobs shown.")] = 50,
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """List training jobs, newest first: status, adapter published, steps logged, mean loss.

    Examples:

    * `sparring jobs list`
    * `sparring jobs list --role actor --status failed --format json`
    """
    from training.jobs import list_jobs

    if status is not None and status not in JOB_STATUSES:
        fail(f"--status {status!r} is not a job status; use one of {', '.join(JOB_STATUSES)}")
    jobs = list_jobs(engine_or_exit(db), role=role, kind=kind, status=status, limit=limit)
    emit([job_summary(j) for j in jobs], fmt, title="training jobs",
         columns=["job", "kind", "role", "status", "adapter", "steps", "loss", "started_at", "error"])


@jobs_app.command("show")
def jobs_show(
    job_id: Annotated[int, typer.Argument(metavar="JOB", help="Job id (`sparring jobs list`).")],
    metric: Annotated[
        list[str] | None,
        typer.Option("--metric", "-m", help="A logged metric to show (repeat it); default: the most telling ones."),
    ] = None,
    plot: Annotated[
        Path | None, typer.Option(help="Also write a PNG of the chosen metrics against the step here.")
    ] = None,
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Show a training job and its history: what the trainer logged at each step (loss,
    learning rate, grad norm, DPO's reward margins and accuracies, GRPO's reward, PPO's KL and
    clip fraction...). `--format json` prints the job as one object with every logged value;
    `jsonl` prints one line per logged step.

    Examples:

    * `sparring jobs show 3`
    * `sparring jobs show 3 --metric loss --metric rewards/margins --plot loss.png`
    * `sparring jobs show 3 --format jsonl | jq .loss`
    """
    from training.history import metric_names, steps
    from training.history import plot as plot_history
    from training.jobs import get_job

    try:
        job = get_job(engine_or_exit(db), job_id)
    except KeyError as exc:
        fail(str(exc.args[0]))
    logged = metric_names(job.history)
    unknown = [m for m in metric or [] if m not in logged]
    if unknown:
        fail(f"job {job.id} logged no {', '.join(unknown)}; its metrics: {', '.join(logged) or 'none'}")
    chosen = list(metric or logged[:TABLE_METRICS])
    if plot is not None:
        if not chosen:
            fail(f"job {job.id} has no history to plot (status {job.status})")
        plot_history(job.history, chosen, plot, title=f"job {job.id}: {job.kind} {job.role}")
        err.print(f"wrote {plot}")
    if fmt == Format.json:
        sys.stdout.write(dumps({**job_summary(job), "config": job.config, "metrics": job.metrics,
                              "history": job.history}) + "\n")
        return
    if fmt == Format.jsonl:
        emit(steps(job.history), fmt)
        return
    emit([{"field": k, "value": v} for k, v in job_summary(job).items() if v is not None], fmt,
         title=f"training job {job.id}", console=out)
    if job.history:
        emit(steps(job.history), fmt, columns=["step", "epoch", *chosen], title="history", console=out,
             caption=_hidden_note(logged, chosen))
    else:
        err.print(f"job {job.id} has no history: it failed before its first logged step, or it trained before "
                  f"sparring kept histories")


def _hidden_note(logged: list[str], chosen: list[str]) -> str | None:
    hidden = [m for m in logged if m not in chosen]
    return f"also logged: {', '.join(hidden)} (--metric NAME shows one)" if hidden else None
