"""The README and docs/ stay true: links resolve (files and heading anchors) and the README's Python blocks run and
print what their comments say.

A README ```python block whose first line is ``# docs-test: requires PACKAGE[, PACKAGE]`` is skipped when one of
those packages cannot be imported (for blocks that need an optional extra); every other block must run as written.
Every ``print(...)`` line of a block carries its expected output as a comment, on the same line or on the comment
line right below it: ``print(x.shape)   # torch.Size([8, 10])``. The comment's text up to a gap of three or more
spaces is the output (what follows the gap is explanation); the test compares it with what that line printed.
"""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tokenize
import unicodedata
from functools import lru_cache
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BLOCK_TIMEOUT_S = 120
REQUIRES_MARKER = re.compile(r"#\s*docs-test:\s*requires\s+(.+)")

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# inline links and images: [text](target "title"); reference definitions: [id]: target
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")


def markdown_files() -> list[Path]:
    """README.md and every markdown file under docs/."""
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


def prose_lines(text: str) -> list[str]:
    """The lines of a markdown text outside fenced code blocks."""
    lines, fence = [], None
    for line in text.splitlines():
        match = FENCE.match(line)
        if match:
            if fence is None:
                fence = match.group(1)
            elif match.group(1) == fence:
                fence = None
            continue
        if fence is None:
            lines.append(line)
    return lines


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: markup dropped, lowercase, punctuation removed, spaces -> hyphens."""
    text = INLINE_CODE.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links keep their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.strip().lower()
    kept = []
    for ch in text:
        category = unicodedata.category(ch)
        if ch in " -_" or category[0] in "LN" or category == "Mn":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


@lru_cache(maxsize=None)
def anchors(path: Path) -> frozenset[str]:
    """Every heading anchor of a markdown file, with GitHub's -1, -2 suffixes for repeated headings."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        slug = github_slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return frozenset(found)


def links(path: Path) -> list[str]:
    """Link targets in the prose of a markdown file (code blocks and inline code excluded)."""
    targets = []
    for line in prose_lines(path.read_text(encoding="utf-8")):
        line = INLINE_CODE.sub("", line)
        targets += INLINE_LINK.findall(line)
        match = REFERENCE_DEF.match(line)
        if match:
            targets.append(match.group(1))
    return targets


def broken_link(source: Path, target: str) -> str | None:
    """Why a relative link does not resolve (None when it does or is not relative)."""
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("//"):
        return None  # http(s):, mailto: ... are not checked (no network in tests)
    file_part, _, fragment = target.partition("#")
    resolved = (source.parent / unquote(file_part)).resolve() if file_part else source
    if not resolved.exists():
        return f"{target}: no file {resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else resolved}"
    if fragment and resolved.suffix == ".md" and unquote(fragment).lower() not in anchors(resolved):
        return f"{target}: no heading with anchor #{fragment} in {resolved.relative_to(ROOT)}"
    return None


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    problems = [why for target in links(path) if (why := broken_link(path, target))]
    assert not problems, f"{path.relative_to(ROOT)} has broken links:\n" + "\n".join(problems)


def test_slugs_follow_github() -> None:
    assert github_slug("MAE pretraining: `jumbokit mae-pretrain`") == "mae-pretraining-jumbokit-mae-pretrain"
    assert github_slug("Architecture search (`jumbokit.nas`)") == "architecture-search-jumbokitnas"
    assert github_slug("Test-time adaptation: SAR, Tent, EATA") == "test-time-adaptation-sar-tent-eata"
    assert github_slug("Small sets: `--recipe small-data`") == "small-sets---recipe-small-data"


def test_link_checker_finds_broken_links(tmp_path: Path) -> None:
    page = ROOT / "docs" / "conventions.md"
    assert broken_link(page, "training.md#resume") is None
    assert broken_link(page, "training.md#no-such-heading") is not None
    assert broken_link(page, "no_such_page.md") is not None
    assert broken_link(page, "https://example.com/x") is None


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """(first line number, code) of every ```python block of a markdown file."""
    blocks, current, start = [], None, 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        stripped = line.strip()
        if current is None and re.fullmatch(r"```\s*python", stripped):
            current, start = [], number + 1
        elif current is not None and stripped == "```":
            blocks.append((start, "\n".join(current) + "\n"))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


README_BLOCKS = python_blocks(README)


def test_readme_has_python_blocks() -> None:
    assert len(README_BLOCKS) >= 3


PRINT_LINE = re.compile(r"^print\(")
EXPLANATION_GAP = re.compile(r"\s{3,}")
# Runs a block with print() recording what each of the block's own lines printed (other files print as usual).
RECORDING_RUNNER = """\
import builtins, io, json, runpy, sys
block, record = sys.argv[1], sys.argv[2]
printed, original = {}, builtins.print
def recording_print(*args, **kwargs):
    caller = sys._getframe(1)
    if caller.f_code.co_filename == block and kwargs.get("file") is None:
        text = io.StringIO()
        original(*args, **{**kwargs, "file": text})
        printed.setdefault(str(caller.f_lineno), []).append(text.getvalue().rstrip("\\n"))
    original(*args, **kwargs)
builtins.print = recording_print
try:
    runpy.run_path(block, run_name="__main__")
finally:
    with open(record, "w") as f:
        json.dump(printed, f)
"""


def expected_prints(code: str) -> dict[int, str]:
    """Line number (1-based, within the block) -> the output its print() line's comment promises."""
    lines = code.splitlines()
    expected = {}
    for number, line in enumerate(lines, start=1):
        if not PRINT_LINE.match(line):
            continue
        comments = [tok.string for tok in tokenize.generate_tokens(io.StringIO(line + "\n").readline)
                    if tok.type == tokenize.COMMENT]
        comment = comments[0][1:] if comments else ""
        if not comments and number < len(lines) and lines[number].lstrip().startswith("#"):
            comment = lines[number].lstrip()[1:]
        text = EXPLANATION_GAP.split(comment.strip(), maxsplit=1)[0]
        expected[number] = text
    return expected


def test_expected_prints_reads_the_comments() -> None:
    code = ("x = 1\nprint(x)   # 1\nprint(x, x)\n# 1 1   two of them\nprint(x + 1)      # 2      the sum\n"
            "print('a  #b')   # a  #b\n")
    assert expected_prints(code) == {2: "1", 3: "1 1", 5: "2", 6: "a  #b"}


@pytest.mark.parametrize("line,code", README_BLOCKS, ids=[f"README.md:{line}" for line, _ in README_BLOCKS])
def test_readme_python_block_runs(line: int, code: str, tmp_path: Path) -> None:
    marker = REQUIRES_MARKER.match(code.splitlines()[0]) if code.strip() else None
    if marker:
        for package in (p.strip() for p in marker.group(1).split(",")):
            pytest.importorskip(package)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "MPLBACKEND": "Agg"}
    script = tmp_path / f"readme_block_line{line}.py"
    script.write_text(code, encoding="utf-8")
    (tmp_path / "_record_prints.py").write_text(RECORDING_RUNNER, encoding="utf-8")
    record = tmp_path / "_printed.json"
    done = subprocess.run([sys.executable, "_record_prints.py", str(script.resolve()), str(record)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
    assert done.returncode == 0, f"README.md block at line {line} failed:\n{done.stdout[-2000:]}{done.stderr[-4000:]}"
    printed = json.loads(record.read_text(encoding="utf-8"))
    expected = expected_prints(code)
    wrong = []
    for number, text in expected.items():
        got = printed.get(str(number), [])
        if got != [text]:
            wrong.append(f"README.md line {line + number - 1}: the comment says {text!r}, it printed {got!r}")
    assert not wrong, "\n".join(wrong)

