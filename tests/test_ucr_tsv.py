"""The UCR 2018 archive's TSV layout (``NAME/NAME_TRAIN.tsv``, label first, NaN padding) read from a generated
archive folder: the reader, label remapping, and tstrain's ``--data-dir`` dataset resolution. Nothing downloads."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from jumbokit.timeseries.data import load_dataset, load_raw, local_datasets, user_datasets
from jumbokit.timeseries.ucr_tsv import has_tsv_split_files, load_tsv, read_ucr_tsv

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def write_tsv(root: Path, name: str, split: str, rows: list[list[float]], labels: list[str]) -> Path:
    """One archive file, every row NaN-padded to the longest, as the archive writes them."""
    width = max(len(r) for r in rows)
    path = root / name / f"{name}_{split.upper()}.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["\t".join([label, *(repr(float(v)) if not np.isnan(v) else "NaN" for v in r),
                        *["NaN"] * (width - len(r))]) for r, label in zip(rows, labels)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    """ECG200 (labels -1/1, unequal lengths: NaN padding), DistalPhalanxTW (labels 3..8, one missing value inside
    a series) and Shapes (a set of your own, string labels)."""
    root = tmp_path_factory.mktemp("UCRArchive_2018")
    rng = np.random.default_rng(0)
    for split, n in (("train", 12), ("test", 8)):
        labels = ["-1", "1"] * (n // 2)
        rows = [list(rng.normal(size=30 - 3 * (i % 4)) + (2.0 if lab == "1" else 0.0))
                for i, lab in enumerate(labels)]
        write_tsv(root, "ECG200", split, rows, labels)
        grades = [str(3 + i % 6) for i in range(n)]
        rows = [list(rng.normal(size=16) + int(g)) for g in grades]
        rows[1][5] = np.nan
        write_tsv(root, "DistalPhalanxTW", split, rows, grades)
        shapes = ["circle", "square"] * (n // 2)
        write_tsv(root, "Shapes", split, [list(rng.normal(size=10)) for _ in shapes], shapes)
    return root


def test_read_ucr_tsv(archive):
    x, y = read_ucr_tsv(archive / "ECG200" / "ECG200_TRAIN.tsv")
    assert isinstance(x, list) and len(x) == 12 and y.tolist() == ["-1", "1"] * 6
    assert [s.shape for s in x[:4]] == [(1, 30), (1, 27), (1, 24), (1, 21)]  # the NaN padding is cut off
    assert not any(np.isnan(s).any() for s in x)
    x, y = load_tsv(archive, "DistalPhalanxTW", "test")
    assert isinstance(x, np.ndarray) and x.shape == (8, 1, 16) and x.dtype == np.float64
    assert np.isnan(x[1, 0, 5]) and np.isnan(x).sum() == 1  # a missing value inside a series stays missing
    assert y.tolist() == ["3", "4", "5", "6", "7", "8", "3", "4"]


def test_labels_as_written(tmp_path):
    path = tmp_path / "Set" / "Set_TRAIN.tsv"
    path.parent.mkdir()
    path.write_text("1.0\t0.5\t1\n-1.0000000e+00\t0.1\t2\n2.5\t3\t4\ncat\t1\tNaN\n\n")
    x, y = read_ucr_tsv(path)
    assert y.tolist() == ["1", "-1", "2.5", "cat"]  # integral numbers in their integer form
    assert [s.shape[1] for s in x] == [2, 2, 2, 1]


@pytest.mark.parametrize("text, message", [
    ("1,0.5,0.7\n", "separated by tabs.*tab-separated"),
    ("1\t0.5\tabc\n", "line 1, column 3: expected a number or NaN, got 'abc'"),
    ("1\t0.5\n2\tNaN\tNaN\n", "line 2: the series has no value"),
    ("\n", "holds no series"),
    ("\t0.5\t0.7\n", "expected a class label"),
])
def test_bad_files(tmp_path, text, message):
    path = tmp_path / "bad.tsv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        read_ucr_tsv(path)


def test_load_dataset_remaps_labels(archive):
    assert has_tsv_split_files(archive, "ECG200") and not has_tsv_split_files(archive, "GunPoint")
    data = load_dataset("ECG200", data_dir=archive, download=False)
    assert data.classes.tolist() == ["-1", "1"] and data.num_classes == 2
    assert set(data.train.y.tolist()) == {0, 1} and data.decode(data.train.y[:2]).tolist() == ["-1", "1"]
    assert data.train.x.shape == (12, 1, 30) and data.train.lengths[:4].tolist() == [30, 27, 24, 21]
    assert not data.meta["equal_length"] and data.meta["missing_or_padded"]
    grades = load_dataset("DistalPhalanxTW", data_dir=archive, download=False, protocol="official")
    assert grades.classes.tolist() == ["3", "4", "5", "6", "7", "8"]
    assert grades.train.y[:6].tolist() == [0, 1, 2, 3, 4, 5]
    x, y = load_raw("Shapes", "train", archive, download=False)
    assert x.shape == (12, 1, 10) and sorted(set(y)) == ["circle", "square"]


def test_data_dir_resolution(archive, capsys):
    """tstrain finds the archive's sets by name in --data-dir, lists your own, and trains on them."""
    from jumbokit.cli import tstrain_main

    assert {"ECG200", "DistalPhalanxTW"} <= set(local_datasets("UCR", archive))
    assert user_datasets(archive) == ["Shapes"]
    assert tstrain_main(["--list", "--data-dir", str(archive)]) == 0
    assert "Shapes" in capsys.readouterr().out
    out = archive.parent / "sweep"
    assert tstrain_main(["--dataset", "ECG200", "--data-dir", str(archive), "--model", "patchtst", "--epochs", "1",
                         "--lr", "1e-3", "--dropout", "0.1", "--out", str(out), "--no-progress", "--cpu"]) == 0
    assert "ECG200" in (out / "results.csv").read_text()


def test_a_tstrain_process_on_tsv_files_leaves_the_heavy_readers_unimported(archive, tmp_path):
    """A set read from ``.tsv`` files needs neither aeon's dataset module nor scipy.stats nor scikit-learn (pandas
    and seconds of imports each process would pay): a tstrain run on one (data, a 2-step run, the summary's ranks,
    its reports) leaves them unimported, and its summary still ranks the model."""
    import subprocess
    import sys

    heavy = ("aeon.datasets", "scipy.stats", "sklearn", "pandas")
    code = ("import sys; from jumbokit.cli import tstrain_main; "
            f"tstrain_main(['--dataset', 'DistalPhalanxTW', '--data-dir', {str(archive)!r}, '--model', 'patchtst', "
            "'--recipe', 'fast', '--steps', '2', '--dim', '16', '--cpu', '--threads', '1', '--no-progress', "
            f"'--baseline', '', '--out', {str(tmp_path / 'run')!r}]); "
            f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"
    assert "DistalPhalanxTW" in (tmp_path / "run" / "results.csv").read_text()
