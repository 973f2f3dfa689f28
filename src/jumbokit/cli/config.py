"""``--config FILE``: a YAML or JSON file of flags that sets a parser's defaults (timm's ``-c``), and which flags
a command line gave explicitly.

```python
add_config_arg(parser)
args, given = parse_flags(parser, ["--config", "run.yaml", "--lr", "0.01"])  # the file's values, --lr winning
```
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from .errors import one_line


def add_config_arg(parser: argparse.ArgumentParser, written: str = "config.json and args.yaml") -> None:
    """``--config FILE``: a YAML or JSON file of flags that sets the defaults of a new run (see ``parse_flags``);
    ``written`` names where the run writes its full settings back (for the help)."""
    parser.add_argument("--config", "-c", default=None, metavar="FILE",
                        help="YAML or JSON file of flags (keys as the flags' names: lr, batch_size or batch-size) "
                             "whose values a new run starts from; flags given on the command line win; the run "
                             f"writes its full settings back to {written} (default: none)")


class _Unset:
    """Marks a flag the command line did not give (see ``given_flags``)."""

    def __repr__(self) -> str:
        return "<unset>"


_UNSET = _Unset()


class _GivenOnly(argparse.Namespace):
    """A namespace that claims to hold every attribute, so argparse fills in no default: after parsing, its
    ``vars`` are exactly the flags on the command line."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # argparse's own bookkeeping (unrecognised arguments)
            raise AttributeError(name)
        return _UNSET


def given_flags(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The flags given explicitly in ``argv`` (dest -> parsed value), without any default: ``argv`` is parsed a
    second time into a namespace on which argparse sets no default."""
    argv = list(sys.argv[1:] if argv is None else argv)
    return dict(vars(parser.parse_args(argv, namespace=_GivenOnly())))


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The mapping of a ``--config`` file: JSON (``.json``) or YAML (anything else; JSON is YAML too)."""
    import yaml

    path = Path(path).expanduser()
    try:
        text = path.read_text()
    except OSError as err:
        raise FileNotFoundError(f"--config {path}: cannot read it ({err.strerror or err})") from None
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        raise ValueError(f"--config {path}: not valid {'JSON' if path.suffix.lower() == '.json' else 'YAML'} "
                         f"({one_line(err)})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"--config {path}: expected a mapping of flag names to values, got a "
                         f"{type(data).__name__}")
    return data


def _config_value(action: argparse.Action, flag: str, value: Any, path: Path) -> Any:
    """``value`` of ``flag`` from a config file, converted and checked as argparse would check it typed."""
    where = f"--config {path}: {flag}"
    if value is None:
        return None
    if action.nargs == 0:  # store_true / BooleanOptionalAction / store_const
        if not isinstance(value, bool):
            raise ValueError(f"{where} takes true or false, got {value!r}")
        return action.const if value and action.const is not None else value
    many = action.nargs in ("+", "*") or isinstance(action.nargs, int)
    items = list(value) if many and isinstance(value, (list, tuple)) else [value]
    if isinstance(action.nargs, int) and len(items) != action.nargs:
        raise ValueError(f"{where} takes {action.nargs} values, got {value!r}")
    converted = []
    for item in items:
        try:
            item = (action.type or str)(str(item))  # as typed: argparse hands every type a string
        except argparse.ArgumentTypeError as err:
            raise ValueError(f"{where}: {one_line(err)}") from None
        except (TypeError, ValueError):
            kind = getattr(action.type, "__name__", "value")
            raise ValueError(f"{where} takes {'an' if kind[0] in 'aeiou' else 'a'} {kind}, got {item!r}") from None
        if action.choices is not None and item not in action.choices:
            raise ValueError(f"{where} must be one of {', '.join(map(str, action.choices))}, got {item!r}")
        converted.append(item)
    return converted if many else converted[0]


def config_file_defaults(parser: argparse.ArgumentParser, path: str | Path) -> dict[str, Any]:
    """The flags a ``--config`` file sets (dest -> value, converted and checked like typed flags).

    Keys are flag names with or without dashes (``batch_size``, ``batch-size``, ``--batch-size``). A key that is no
    flag of ``parser`` raises one ``ValueError`` naming it and the closest flag."""
    import difflib

    path = Path(path).expanduser()
    actions = {action.dest: action for action in parser._actions  # argparse has no public list of its actions
               if action.option_strings and action.dest not in ("help", "config")}
    names = flag_names(parser)
    values = {}
    for key, value in read_config_file(path).items():
        dest = str(key).lstrip("-").replace("-", "_")
        if dest not in actions:
            close = difflib.get_close_matches(dest, list(actions), n=1)
            hint = f"; did you mean {names[close[0]]}?" if close else f"; see {parser.prog} --help"
            raise ValueError(f"--config {path}: {key!r} is not a flag of {parser.prog}{hint}")
        values[dest] = _config_value(actions[dest], names.get(dest, "--" + dest), value, path)
    return values


def parse_flags(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None
                ) -> tuple[argparse.Namespace, dict[str, Any]]:
    """Parse ``argv`` after the ``--config`` file (when given) has set the parser's defaults, like timm's ``-c``:
    flags on the command line win over the file, the file over the recipe's defaults. Returns the flags and those
    the user chose (dest -> value: the file's, then the command line's)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    from_file = config_file_defaults(parser, args.config) if getattr(args, "config", None) else {}
    if from_file:
        parser.set_defaults(**from_file)
        args = parser.parse_args(argv)
    return args, {**from_file, **given_flags(parser, argv)}


def flag_names(parser: argparse.ArgumentParser) -> dict[str, str]:
    """dest -> the flag as typed (``lr`` -> ``--lr``)."""
    names = {}
    for action in parser._actions:  # argparse has no public list of its actions
        longs = [o for o in action.option_strings if o.startswith("--")] or action.option_strings
        if longs:
            names.setdefault(action.dest, longs[0])
    return names


