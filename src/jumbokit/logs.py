"""Logging for the command-line front doors.

Library modules log through ``logging.getLogger(__name__)`` and never configure logging themselves; each CLI
calls ``configure_logging`` once, so messages reach the terminal as plain lines (on the main process only under
a multi-process launch) and a user's own logging setup in Python is left alone.
"""
from __future__ import annotations

import logging
import os
import sys
import warnings

FORMAT = "%(message)s"
VERBOSE_FORMAT = "%(asctime)s %(name)s %(levelname)s: %(message)s"


def _is_main_process() -> bool:
    """True on the process with global rank 0 (or when not launched as several processes)."""
    return os.environ.get("RANK", os.environ.get("PMI_RANK", "0")) in ("", "0")


def one_line_warning(message, category, filename, lineno, line=None) -> str:
    """``warnings.formatwarning`` for the command line: ``warning: MESSAGE`` on one line, without the source file
    and line that Python prints by default (they name jumbokit's code, not what the user should do)."""
    return f"warning: {' '.join(str(message).split())}\n"


def configure_logging(verbose: bool = False, stream=None) -> None:
    """Send ``jumbokit.*`` log records to ``stream`` (default stderr): INFO as plain lines, DEBUG and a
    timestamped format with ``verbose``; other ranks of a multi-process launch show warnings and errors only.
    Python warnings print as one ``warning: ...`` line (with ``verbose``: Python's own format)."""
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
    if not verbose:
        warnings.formatwarning = one_line_warning
