"""Logging for the command-line front doors.

Library modules log through ``logging.getLogger(__name__)`` and never configure logging themselves; each CLI
calls ``configure_logging`` once, so messages reach the terminal as plain lines (on the main process only under
a multi-process launch) and a user's own logging setup in Python is left alone.
"""
from __future__ import annotations

import logging
import os
import sys

FORMAT = "%(message)s"
VERBOSE_FORMAT = "%(asctime)s %(name)s %(levelname)s: %(message)s"


def _is_main_process() -> bool:
    """True on the process with global rank 0 (or when not launched as several processes)."""
    return os.environ.get("RANK", os.environ.get("PMI_RANK", "0")) in ("", "0")


def configure_logging(verbose: bool = False, stream=None) -> None:
    """Send ``jumbokit.*`` log records to ``stream`` (default stderr): INFO as plain lines, DEBUG and a
    timestamped format with ``verbose``; other ranks of a multi-process launch show warnings and errors only."""
    logger = logging.getLogger("jumbokit")
    for handler in list(logger.handlers):
        if getattr(handler, "_jumbokit_cli", False):
            logger.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler._jumbokit_cli = True  # type: ignore[attr-defined]
    handler.setFormatter(logging.Formatter(VERBOSE_FORMAT if verbose else FORMAT))
    logger.addHandler(handler)
    if not _is_main_process():
        level = logging.WARNING
    else:
        level = logging.DEBUG if verbose else logging.INFO
    logger.setLevel(level)
    logger.propagate = False
