"""The training progress bar (tqdm) and the per-epoch line: on the bar when bars are shown, else logged."""
from __future__ import annotations

import logging

__all__ = ["Progress"]

logger = logging.getLogger(__name__)


class Progress:
    """A tqdm bar over optimizer steps (drawn when ``enabled``); ``line`` prints above the bar when it is shown
    and logs at INFO otherwise, so hiding bars never hides the summary."""

    def __init__(self, total: int, initial: int = 0, enabled: bool = True, desc: str = "train") -> None:
        from tqdm.auto import tqdm

        self.enabled = enabled
        self.bar = tqdm(total=total, initial=initial, desc=desc, dynamic_ncols=True, disable=not enabled)

    def update(self, n: int = 1) -> None:
        self.bar.update(n)

    def show(self, **values) -> None:
        """Values next to the bar (e.g. epoch, loss, lr)."""
        self.bar.set_postfix(**values)

    def line(self, text: str) -> None:
        if self.enabled:
            self.bar.write(text)
        else:
            logger.info(text)

    def close(self) -> None:
        self.bar.close()
