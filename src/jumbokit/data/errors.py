"""Exceptions raised by :mod:`jumbokit.data` (all are ``ValueError`` so CLIs can catch them together)."""
from __future__ import annotations


class DataError(ValueError):
    """Bad data input: unknown dataset spec, empty folder, wrong channels, batch larger than the data."""


class SplitNotFoundError(DataError):
    """The requested split (train / val / test) does not exist for this dataset."""


class CorruptImageError(DataError):
    """An image file could not be opened or decoded; the message names the file."""
