"""Errors a user can cause.

Anything raised as a ``BenchfillError`` reaches the terminal as one line and a
non-zero exit; everything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class BenchfillError(Exception):
    """A problem with the user's input, configuration or environment.

    The message must name the file, line or field at fault, on one line.
    """

    exit_code = 2


class DataError(BenchfillError):
    """A malformed items or responses file."""


class ConfigError(BenchfillError):
    """A bad configuration file, option or benchmark spec."""


class EndpointError(BenchfillError):
    """A model endpoint that cannot be reached or does not serve the named model."""

    exit_code = 3
