"""Build a dataset snapshot: one role's rows of one trainer kind, read from the logged episodes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from app.api.errors import InputError
from app.api.store import open_store, settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from app.settings import Settings
    from training.datasets import BuilderOptions, DPOOptions, LogFilter, PPOOptions, SFTOptions, SnapshotResult

KINDS = ("dpo", "kto", "ppo", "sft", "reward")
"""the kinds of rows a snapshot holds"""
OWN_ROW_FLAGS = "--refinements, --first-repairs and --answer-lines"
"""the options that add rows of the role's own turns to sft rows, as the messages name them"""


class BuildProgress(Protocol):
    """What a build tells as it goes (the CLI shows a spinner meanwhile)."""

    def building(self, kind: str, role: str, game: str) -> None:
        """``kind`` rows for ``role`` are being built from ``game``'s logs."""

    def built(self) -> None:
        """They are built (not called when the build fails)."""


class _Silent:
    def building(self, kind: str, role: str, game: str) -> None:
        pass

    def built(self) -> None:
        pass


def build_dataset(
    kind: str,
    *,
    role: str,
    game: str = "math-reflection",
    since: str = "latest",
    split: str = "train",
    train_on_eval_data: bool = False,
    policy: str | None = None,
    verdicts: str | None = None,
    max_rows: int | None = None,
    refinements: bool = False,
    first_repairs: bool = False,
    answer_lines: bool = False,
    pairs: str | None = None,
    baseline: str | None = None,
    database_url: str | None = None,
    progress: BuildProgress | None = None,
) -> SnapshotResult:
    """What `sparring datasets build` does: ``kind`` rows (dpo, kto, ppo, sft, reward) for the
    learner ``role`` from the model turns (never a scripted bot's) of the succeeded ``game``
    episodes of ``split``, written as TRL conversational JSONL and registered as a snapshot.

    ``since``: "latest", only what is newer than the last settled snapshot, or "all". A split
    other than "train" is evaluation data and needs ``train_on_eval_data``. ``policy``: only the
    turns of this policy ("actor@v1", "base"). ``verdicts``, ``max_rows``, ``refinements``,
    ``first_repairs``, ``answer_lines`` choose sft rows, ``pairs`` dpo rows, ``baseline`` the
    advantages of ppo rows, as the command's
    options of those names do (`sparring datasets build --help`). InputError, writing nothing, for
    bad input or when no row comes out.
    """
    if kind not in KINDS:
        raise InputError(f"unknown dataset kind {kind!r}; kinds: {', '.join(KINDS)}")
    if since not in ("latest", "all"):
        raise InputError(f"--since {since!r}: use 'latest' or 'all'")
    options = row_options(kind, game, role, verdicts, max_rows, refinements, first_repairs, answer_lines, pairs,
                          baseline)
    chosen_filter = log_filter(split, train_on_eval_data, policy)
    chosen = settings(database_url=database_url)
    return build_rows(open_store(chosen.database_url), chosen, kind, role, game, chosen_filter, since=since,
                      options=options, progress=progress or _Silent())


def row_options(kind: str, game: str, role: str, verdicts: str | None, max_rows: int | None, refinements: bool,
                first_repairs: bool, answer_lines: bool, pairs: str | None, baseline: str | None,
                ) -> BuilderOptions | None:
    """The builder's options from the arguments that choose rows (those of ``build_dataset``;
    None: the builder's defaults), each checked against ``kind`` and what ``game`` gives ``role``."""
    from_sft = _sft_options(kind, game, role, verdicts, max_rows, refinements, first_repairs, answer_lines)
    return _dpo_options(kind, pairs) or _ppo_options(kind, baseline) or from_sft


def _sft_options(kind: str, game: str, role: str, verdicts: str | None, max_rows: int | None,
                refinements: bool = False, first_repairs: bool = False, answer_lines: bool = False,
                ) -> SFTOptions | None:
    """The SFT builder's options from ``verdicts``, ``max_rows``, ``refinements``,
    ``first_repairs`` and ``answer_lines`` (None: the builder's defaults), checked against what
    ``game`` can give ``role``."""
    if verdicts is None and max_rows is None and not (refinements or first_repairs or answer_lines):
        return None
    if kind != "sft":
        raise InputError(f"--verdicts, --max-rows, {OWN_ROW_FLAGS} apply to sft rows only, not to {kind}")
    if max_rows is not None and verdicts != "truth":
        raise InputError("--max-rows caps the rows of --verdicts truth only: add --verdicts truth, or leave "
                         "--max-rows out")
    from graphs.contract import GameContractError
    from graphs.registry import UnknownGameError
    from training.datasets import SFTOptions
    from training.datasets.sft import refinements_of
    from training.datasets.truth_verdicts import truth_verdicts_of

    try:
        options = SFTOptions(verdicts=verdicts or "own", max_rows=max_rows, refinements=refinements,
                             first_repairs=first_repairs, answer_lines=answer_lines)
        if options.verdicts == "truth":
            truth_verdicts_of(game, role)
        if refinements or first_repairs or answer_lines:
            refinements_of(game, role, answer_line=answer_lines)
    except (GameContractError, UnknownGameError, ValueError) as exc:
        raise InputError(str(exc)) from exc
    return options


def _ppo_options(kind: str, baseline: str | None) -> PPOOptions | None:
    """The policy-gradient builder's options from ``baseline`` (None: the builder's defaults)."""
    from training.datasets import PPOOptions

    return _option(kind, "ppo", "--baseline", "baseline", baseline, PPOOptions)


def _dpo_options(kind: str, pairs: str | None) -> DPOOptions | None:
    """The DPO builder's options from ``pairs`` (None: the builder's defaults)."""
    from training.datasets import DPOOptions

    return _option(kind, "dpo", "--pairs", "group_pairs", pairs, DPOOptions)


def _option(kind: str, for_kind: str, flag: str, field: str, value: str | None, options_type: type) -> Any:
    """``options_type(field=value)`` for ``for_kind`` rows; None when ``value`` is; InputError, in
    the command's words (``flag``), for another kind or a value the builder refuses."""
    if value is None:
        return None
    if kind != for_kind:
        raise InputError(f"{flag} applies to {for_kind} rows only, not to {kind}")
    try:
        return options_type(**{field: value})
    except ValueError as exc:
        raise InputError(str(exc).replace(field, flag, 1)) from exc


def log_filter(split: str, evaluation_data: bool, policy: str | None) -> LogFilter:
    """Which logged turns a build reads; evaluation data only when asked for by name."""
    from training.datasets import EvaluationDataError, LogFilter

    try:
        return LogFilter(policy=policy, split=None if split == "all" else split, evaluation_data=evaluation_data)
    except EvaluationDataError as exc:
        raise InputError(str(exc).replace("evaluation_data=True", "--train-on-eval-data")) from exc


def build_rows(engine: Engine, chosen: Settings, kind: str, role: str, game: str, chosen_filter: LogFilter, *,
               since: str = "latest", for_training: bool = False, options: BuilderOptions | None = None,
               progress: BuildProgress) -> SnapshotResult:
    """Build and register the snapshot (``for_training``: a job trains on it next, so it stays
    unsettled until one succeeds); InputError, writing nothing, when no row comes out."""
    from training.datasets import EmptyDatasetError, build_snapshot

    progress.building(kind, role, game)
    try:
        snapshot = build_snapshot(
            engine, kind, role, game=game, base_model=chosen.model, out_dir=chosen.store_dir / "datasets",
            since=None if since == "all" else "latest", log_filter=chosen_filter, seed=chosen.seed,
            for_training=for_training, options=options,
        )
    except EmptyDatasetError as exc:
        raise InputError(str(exc)) from exc
    progress.built()
    return snapshot
