"""The results pages' generated tables (benchmarks/pages.toml) agree with the raw records they are computed from, and
a number edited by hand in a page is caught."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from jumbokit.benchmarking import pages, write_result

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "benchmarks" / "pages.toml"


def test_every_generated_row_matches_its_record():
    spec = pages.load_spec(SPEC, ROOT)
    assert {table.page for table in spec.tables} >= {"README.md", "docs/results/timeseries.md",
                                                     "docs/results/images.md"}
    problems = pages.check(spec)
    assert not problems, "pages differ from their records (python -m jumbokit.benchmarking.pages --write):\n" + \
        "\n\n".join(problems)


def _copy_checkout(tmp_path: Path) -> Path:
    """The spec, every page it writes and a link to the records, under tmp_path."""
    spec = pages.load_spec(SPEC, ROOT)
    for table in spec.tables:
        target = tmp_path / table.page
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / table.page, target)
    (tmp_path / "benchmarks").mkdir(exist_ok=True)
    shutil.copyfile(SPEC, tmp_path / "benchmarks" / "pages.toml")
    (tmp_path / spec.results).symlink_to(ROOT / spec.results, target_is_directory=True)
    return tmp_path


def test_a_number_edited_by_hand_fails_the_check_and_write_restores_it(tmp_path, capsys):
    root = _copy_checkout(tmp_path)
    page = root / "docs" / "results" / "timeseries.md"
    text = page.read_text(encoding="utf-8")
    assert "77.58 vs 84.19" in text
    page.write_text(text.replace("77.58 vs 84.19", "77.68 vs 84.19", 1), encoding="utf-8")
    assert pages.main(["--check", "--root", str(root)]) == 1
    out = capsys.readouterr().out
    assert "-| UCR 2018 archive" in out and "77.68" in out and "77.58" in out
    assert pages.main(["--write", "--root", str(root)]) == 0
    assert page.read_text(encoding="utf-8") == text
    assert pages.main(["--check", "--root", str(root)]) == 0


def test_prose_outside_the_markers_is_left_alone(tmp_path):
    root = _copy_checkout(tmp_path)
    page = root / "README.md"
    edited = page.read_text(encoding="utf-8").replace("## Headline results", "## Headline results\n\nA new line.")
    page.write_text(edited, encoding="utf-8")
    assert pages.main(["--check", "--root", str(root)]) == 0
    page.write_text(edited.replace("<!-- end generated -->", ""), encoding="utf-8")
    assert pages.main(["--check", "--root", str(root)]) == 2  # a broken block is an error, not a silent pass


def test_templates_rows_and_the_legacy_mark(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "old.json").write_text(json.dumps({"acc": [70.0, 71.0, 72.5], "base": [69.0, 69.5, 70.0]}))
    write_result(results / "new.json", {"acc": [80.0, 81.0]}, "# new", quiet=True)
    (tmp_path / "page.md").write_text("# P\n\nprose\n\n<!-- generated: t -->\nstale\n<!-- end generated -->\n\nmore\n")
    (tmp_path / "spec.toml").write_text('''results = "results"
[[table]]
id = "t"
page = "page.md"
marker = "t"
columns = ["claim", "number", "met?"]

[[row]]
table = "t"
record = "old.json"
let.t = 'paired(r["acc"], r["base"], target=1.0)'
cells = ["old {{braces}}", "{mean(r['acc']):.2f} ({t.mean:+.2f}) a|b", "{t}"]

[[row]]
table = "t"
record = "new.json"
cells = ["new", "{r['acc'][1]:.1f}", "{len(r['stamp']['argv']) > 0}"]

[[row]]
table = "t"
cells = ["hand", "3 min 46 s", "-"]
''')
    spec = pages.load_spec(tmp_path / "spec.toml", tmp_path)
    assert pages.write(spec) == ["page.md"]
    text = (tmp_path / "page.md").read_text()
    assert text.startswith("# P\n\nprose\n\n<!-- generated: t -->\n| claim | number | met? | record |") and \
        text.endswith("<!-- end generated -->\n\nmore\n")
    assert "| old {braces} | 71.17 (+1.67) a\\|b | inside the noise (p 0.13) | [old](results/old.json) (legacy) |" \
        in text
    assert "| new | 81.0 | True | [new](results/new.md) |" in text
    assert "| hand | 3 min 46 s | - | no raw record |" in text
    assert "Legacy: a record written before" in text
    assert pages.check(spec) == []


def test_bad_specs_and_templates_say_what_is_wrong(tmp_path):
    namespace = dict(pages.HELPERS, __builtins__={}, r={"x": 1.5})
    assert pages.render_template("{r['x']:.2f} and {{literal}} {r['x'] * 2}", namespace) == "1.50 and {literal} 3.0"
    with pytest.raises(pages.PageError, match="KeyError"):
        pages.render_template("{r['y']}", namespace)
    with pytest.raises(pages.PageError, match="unclosed"):
        pages.render_template("{r['x']", namespace)
    with pytest.raises(pages.PageError, match="NameError"):
        pages.render_template("{open('x')}", namespace)  # no builtins beyond the helpers
    (tmp_path / "spec.toml").write_text('results = "r"\n[[table]]\nid = "t"\npage = "p.md"\nmarker = "m"\n'
                                        'columns = ["a", "b"]\n[[row]]\ntable = "t"\ncells = ["only one"]\n')
    with pytest.raises(pages.PageError, match="1 cells for 2 columns"):
        pages.load_spec(tmp_path / "spec.toml", tmp_path)


def test_benchmarks_readme_lists_every_cited_result_file():
    cited = set()
    link = re.compile(r"benchmarks/results/([A-Za-z0-9_.+-]+?)\.(md|json|png)")
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        cited |= {m.group(1) + (".png" if m.group(2) == "png" else "") for m in link.finditer(page.read_text())}
    cited |= {m.group(1) for m in re.finditer(r'"([A-Za-z0-9_.+-]+)\.json"', SPEC.read_text())}
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    listed = {m.group(1) + (".png" if m.group(2) == "png" else "")
              for m in re.finditer(r"\]\(results/([A-Za-z0-9_.+-]+?)\.(md|json|png)\)", readme)}
    assert cited - listed == set(), f"cited by a page but not listed in benchmarks/README.md: {sorted(cited - listed)}"
    missing = [name for name in cited if not (ROOT / "benchmarks" / "results" /
                                               (name if name.endswith(".png") else f"{name}.json")).exists()]
    assert not missing, f"cited result files that do not exist: {missing}"
