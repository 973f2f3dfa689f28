"""Series of one's own: ``.npz`` / ``_X.npy`` + ``_y.npy`` / a CSV with a label column in tstrain's folder layout,
read to the same arrays; a kept model remembers its folder, so validate scores its own set with no flags."""
from __future__ import annotations

import json

import numpy as np
import pytest

from jumbokit.timeseries.data import load_dataset, user_datasets
from jumbokit.timeseries.user_files import array_format, load_array_split

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def waves(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Three waveform classes with string labels, (n, 40) each."""
    rng = np.random.default_rng(seed)
    t = np.linspace(0, 4 * np.pi, 40)
    y = np.array(["sine", "square", "saw"] * (n // 3 + 1))[:n]
    base = {"sine": np.sin(t), "square": np.sign(np.sin(t)), "saw": (t % np.pi) / np.pi}
    return np.stack([base[c] + 0.1 * rng.normal(size=40) for c in y]), y


def write_set(root, name: str, fmt: str) -> None:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    for split, n, seed in (("TRAIN", 12, 0), ("TEST", 9, 1)):
        x, y = waves(n, seed)
        if fmt == "npz":
            np.savez(folder / f"{name}_{split}.npz", X=x, y=y)
        elif fmt == "npy":
            np.save(folder / f"{name}_{split}_X.npy", x)
            np.save(folder / f"{name}_{split}_y.npy", y)
        else:  # steps first, the label column last: found by its name
            lines = [",".join([f"t{i}" for i in range(x.shape[1])] + ["Label"])]
            lines += [",".join([f"{v:.17g}" for v in row] + [label]) for row, label in zip(x, y)]
            (folder / f"{name}_{split}.csv").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("fmt", ["npz", "npy", "csv"])
def test_each_format_reads_to_the_same_series_and_labels(tmp_path, fmt):
    write_set(tmp_path, "Waves", fmt)
    assert array_format(tmp_path, "Waves") == fmt and user_datasets(tmp_path) == ["Waves"]
    x, y = load_array_split(tmp_path, "Waves", "train")
    ref_x, ref_y = waves(12, 0)
    assert x.shape == (12, 1, 40) and np.array_equal(x[:, 0], ref_x) and list(y) == list(ref_y)
    data = load_dataset("Waves", data_dir=tmp_path)
    assert list(data.classes) == ["saw", "sine", "square"] and data.meta["data_dir"] == str(tmp_path.resolve())


def test_bad_files_name_what_was_expected(tmp_path):
    folder = tmp_path / "Bad"
    folder.mkdir()
    for split in ("TRAIN", "TEST"):
        np.savez(folder / f"Bad_{split}.npz", X=np.zeros((3, 5)), labels=np.zeros(3))
    with pytest.raises(ValueError, match=r"Bad_TRAIN.npz: expected arrays named X and y .*got \['X', 'labels'\]"):
        load_array_split(tmp_path, "Bad", "train")
    for split in ("TRAIN", "TEST"):
        np.savez(folder / f"Bad_{split}.npz", X=np.zeros((3, 5)), y=np.zeros(4))
    with pytest.raises(ValueError, match=r"y must hold one label per series \(3\), got shape \(4,\)"):
        load_array_split(tmp_path, "Bad", "train")
    (tmp_path / "Csv").mkdir()
    for split in ("TRAIN", "TEST"):
        (tmp_path / "Csv" / f"Csv_{split}.csv").write_text("label,a,b,c\nx,1,2,3\ny,1,oops,3\n")
    with pytest.raises(ValueError, match=r"Csv_TRAIN.csv, line 3, column 3: expected a number .*'oops'"):
        load_array_split(tmp_path, "Csv", "train")


def test_ragged_csv_rows_are_said_once(tmp_path):
    (tmp_path / "Rag").mkdir()
    for split in ("TRAIN", "TEST"):
        (tmp_path / "Rag" / f"Rag_{split}.csv").write_text("label,a,b,c\nx,1,2,3\ny,1,2\n")
    with pytest.warns(UserWarning, match="rows hold 2 to 3 values; shorter rows are read as shorter series"):
        x, _ = load_array_split(tmp_path, "Rag", "train")
    assert np.isnan(x[1, 0, 2]) and x[0, 0, 2] == 3


def test_kept_model_of_own_folder_validates_with_no_flags(tmp_path):
    from jumbokit.cli import tstrain_main
    from jumbokit.recipes import validate

    write_set(tmp_path / "mine", "Waves", "npz")
    out = tmp_path / "sweep"
    assert tstrain_main(["--dataset", "Waves", "--data-dir", str(tmp_path / "mine"), "--model", "patchtst",
                         "--epochs", "2", "--lr", "1e-3", "--dropout", "0.1", "--out", str(out), "--no-progress",
                         "--cpu"]) == 0
    kept = json.loads(next(out.glob("models/Waves/*/kept.json")).read_text())
    scored = validate.main(["--checkpoint", str(out), "--no-progress", "--out", str(tmp_path / "v")])
    assert scored["dataset"] == "Waves" and scored["n"] == 4  # the test half of the 9 test series (val 5, test 4)
    assert scored["top1"] == pytest.approx(kept["chosen"]["test_top1"])


def test_estimator_takes_a_wide_dataframe_as_it_takes_the_array():
    """aeon's "pd-wide" layout (one series per row, one column per step) gives the numpy array's fit."""
    import pandas as pd

    from jumbokit.timeseries.estimator import PatchTSTClassifier

    x, y = waves(12, 0)
    test_x, _ = waves(9, 1)
    from_frame = PatchTSTClassifier(epochs=2, random_state=0).fit(pd.DataFrame(x), y)
    from_array = PatchTSTClassifier(epochs=2, random_state=0).fit(x, y)
    assert np.array_equal(from_frame.predict_proba(pd.DataFrame(test_x)), from_array.predict_proba(test_x))
