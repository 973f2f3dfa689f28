"""What a front door's bad input or Ctrl-C becomes on the command line: one line on stderr and an exit status."""
from __future__ import annotations

import sys
import traceback
from typing import Any, Callable


RESUME_HINT = "continue with --resume (same --out)"  # after Ctrl-C, unless a front door says otherwise
# what a front door raises for input it cannot use (a missing file, a bad value, a run that cannot go on)
BAD_INPUT = (ValueError, FileNotFoundError, NotADirectoryError, FloatingPointError, RuntimeError)


def run_cli(main: Callable[[], Any], resume_hint: str = RESUME_HINT) -> int:
    """Run ``main()`` and return the exit status: 0 when it finishes; 2 for bad input (:data:`BAD_INPUT`), after
    one line on stderr (``error: ...``; with ``--debug`` on the command line, the traceback first); 130 for
    Ctrl-C, after ``interrupted; <resume_hint>``. argparse's own exits (``--help``, an unknown flag) pass through as
    ``SystemExit``."""
    try:
        main()
    except KeyboardInterrupt:
        print(f"interrupted; {resume_hint}", file=sys.stderr)
        return 130
    except BAD_INPUT as err:
        if "--debug" in sys.argv:
            traceback.print_exc()
        print(f"error: {one_line(err) or type(err).__name__}", file=sys.stderr)
        return 2
    return 0


def one_line(err: BaseException) -> str:
    """The readable part of an error (errors re-raised from DataLoader workers carry a whole traceback)."""
    text = str(err).strip()
    if "Original Traceback" in text:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        last = lines[-1]
        text = last.split(": ", 1)[1] if ": " in last else last
    return " ".join(text.split())
