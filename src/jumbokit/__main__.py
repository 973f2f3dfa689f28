"""``python -m jumbokit COMMAND ...`` (and ``accelerate launch -m jumbokit COMMAND ...``)."""
import sys

from .cli import main

sys.exit(main())
