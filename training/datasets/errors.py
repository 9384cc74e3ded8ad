"""Errors of dataset builds and snapshot loads; each message says how to fix the problem."""

from __future__ import annotations


class DatasetError(Exception):
    """Base class of the errors below."""


class EmptyDatasetError(DatasetError):
    """A build found no row to write; no file and no snapshot row were written."""


class SnapshotNotFoundError(DatasetError, LookupError):
    """No dataset snapshot has this id."""


class DatasetMismatchError(DatasetError, ValueError):
    """A snapshot was built for another role, base model or trainer kind than asked."""


class SnapshotFileError(DatasetMismatchError):
    """A snapshot's file is missing, or no longer matches the content hash it was registered with."""


class EvaluationDataError(DatasetError, ValueError):
    """A build was asked to read evaluation data (a split other than ``train``) without forcing it."""
