"""Errors of the trainers; each message says what is wrong and how to fix it.

All are ``ValueError`` subclasses: they are raised before training starts (bad data, a bad
parent adapter, an output folder in the way), except ``TrainingDivergedError``.
"""

from __future__ import annotations


class TrainerError(ValueError):
    """Base class of the errors below."""


class EmptyTrainingDataError(TrainerError):
    """The dataset has no row (raised before any model is loaded)."""


class DatasetColumnsError(TrainerError):
    """The dataset lacks the columns this trainer reads, or a row's values are unusable."""


class AdapterError(TrainerError):
    """A parent adapter folder is missing, incomplete or unreadable."""


class AdapterMismatchError(AdapterError):
    """A parent adapter was built for another base model or another role."""


class OutputExistsError(TrainerError):
    """The output folder already holds files; trainers never overwrite an adapter."""


class TrainingDivergedError(TrainerError):
    """The training loss became NaN or infinite; no adapter was written."""
