"""The Hugging Face Hub without a network: ``push_to_hub`` up to the ``HfApi`` calls (a fake API that writes what
it is given into a local Hub cache), and ``jumbokit.load("hf-hub:...")`` from that cache or a local folder in
offline mode."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

import jumbokit
from jumbokit.data.data_config import data_config_from_record, eval_transform
from jumbokit.hub import parse_hub_name, push_to_hub, snapshot

torch.set_num_threads(1)

RECORD = dict(dataset="digits", img_size=16, in_chans=1, mean=[0.3], std=[0.35], crop_pct=1.0,
              interpolation="bicubic", classes=[str(i) for i in range(10)])


def old_run(tmp_path):
    """A run directory as written before models carried their data config: weights, config.json, results.csv."""
    run = tmp_path / "run"
    model = jumbokit.create_model("vit_pico_jumbo", img_size=16, patch_size=4, in_chans=1, num_classes=10)
    jumbokit.save(model, run)
    (run / "config.json").write_text(json.dumps({"recipe": "supervised", "model_name": "vit_pico_jumbo",
                                                 "num_params": 123456, "data": RECORD}))
    (run / "results.csv").write_text("model,dataset,split,top1,top5,loss,n\n"
                                     "vit_pico_jumbo,digits,val,91.1111,99.4444,0.41,180\n"
                                     "vit_pico_jumbo,digits,test,90.2778,99.7222,0.43,360\n")
    return run, model


def test_push_then_load_offline_gives_the_same_weights_and_transform(tmp_path, offline_cache, hub_api):
    run, model = old_run(tmp_path)
    api = hub_api
    url = push_to_hub(run, "my-org/pico-digits", api=api, private=True)
    assert url.endswith(api.commit)
    assert api.calls[0] == ("create_repo", "my-org/pico-digits",
                            {"repo_type": "model", "private": True, "exist_ok": True})
    assert api.calls[1] == ("upload_folder", "my-org/pico-digits",
                            ["README.md", "model.safetensors", "model_config.json"])
    card = (offline_cache / "models--my-org--pico-digits" / "snapshots" / api.commit / "README.md").read_text()
    for text in ("library_name: jumbokit", "`vit_pico_jumbo`", "trained by `jumbokit supervised` on `digits`",
                 "| test | 90.28 | 99.72 | 0.4300 | 360 |", 'jumbokit.load("hf-hub:my-org/pico-digits")',
                 "classes (10): 0, 1, 2"):
        assert text in card, text

    loaded = jumbokit.load("hf-hub:my-org/pico-digits")
    assert loaded.state_dict().keys() == model.state_dict().keys()
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in loaded.state_dict().items())
    assert loaded.pretrained_cfg == data_config_from_record(RECORD) == jumbokit.load(run).pretrained_cfg
    img = Image.fromarray(np.random.RandomState(0).randint(0, 256, (20, 24), dtype=np.uint8), "L")
    assert torch.equal(eval_transform(loaded.pretrained_cfg)(img), eval_transform(data_config_from_record(RECORD))(img))


def test_push_without_a_network_is_one_line_error(tmp_path, offline_cache, hub_api):
    """A connection error of the HTTP client reads as one ValueError line, not the client's traceback."""

    class Unreachable(type(hub_api)):
        def create_repo(self, repo_id, **kwargs):
            raise ConnectionError("[Errno -3] Temporary failure in name resolution")

    run, _ = old_run(tmp_path)
    with pytest.raises(ValueError, match=r"push to org/x: cannot reach the Hugging Face Hub \(ConnectionError: "
                                         r"\[Errno -3\] Temporary failure"):
        push_to_hub(run, "org/x", api=Unreachable(offline_cache))


def test_a_pushed_model_object_keeps_its_data_config(tmp_path, offline_cache, hub_api):
    model = jumbokit.create_model("vit_pico_cls", img_size=16, patch_size=4, in_chans=1, num_classes=10)
    model.pretrained_cfg = data_config_from_record(RECORD)
    push_to_hub(model, "org/bare", api=hub_api)
    assert jumbokit.load("hf-hub:org/bare@main").pretrained_cfg == model.pretrained_cfg


def test_a_local_snapshot_folder_loads_offline(tmp_path, offline_cache):
    run, model = old_run(tmp_path)
    folder = tmp_path / "downloaded"
    folder.mkdir()
    for name in ("model.safetensors", "model_config.json"):
        shutil.copy(run / name, folder / name)
    assert snapshot("hf-hub:org/anything", local_dir=folder) == folder.resolve()


def test_unknown_repo_offline_is_one_clear_line(tmp_path, offline_cache, capsys):
    from jumbokit.cli import main

    with pytest.raises(ValueError, match="not in the local Hugging Face cache"):
        jumbokit.load("hf-hub:org/unknown")
    image = tmp_path / "x.png"
    Image.new("L", (16, 16)).save(image)
    code = main(["predict", "--checkpoint", "hf-hub:org/unknown", str(image), "--out", str(tmp_path / "p.csv")])
    err = capsys.readouterr().err
    assert code != 0 and len(err.strip().splitlines()) == 1 and "hf-hub:org/unknown" in err
    assert not (tmp_path / "p.csv").exists()


@pytest.mark.parametrize("name", ["org/name", "hf-hub:name", "hf-hub:org/", "hf-hub:a/b/c"])
def test_bad_hub_names_are_refused(name):
    with pytest.raises(ValueError, match="hf-hub:ORG/NAME"):
        parse_hub_name(name)
    assert parse_hub_name("hf-hub:org/name@v1") == ("org/name", "v1")


def test_validate_and_predict_take_a_hub_name(tmp_path, offline_cache, hub_api, monkeypatch):
    from jumbokit.recipes import predict, validate

    run, _ = old_run(tmp_path)
    push_to_hub(run, "org/pico", api=hub_api)
    direct = validate.main(["--checkpoint", str(run), "--no-progress", "--out", str(tmp_path / "direct")])
    monkeypatch.chdir(tmp_path)
    hub = validate.main(["--checkpoint", "hf-hub:org/pico", "--dataset", "digits", "--no-progress"])
    assert hub["out"] == "validate_pico_digits_test" and (tmp_path / hub["out"] / "confusion.csv").is_file()
    assert (hub["top1"], hub["n"], hub["confusion"]) == (direct["top1"], direct["n"], direct["confusion"])
    image = tmp_path / "x.png"
    Image.new("L", (16, 16)).save(image)
    rows = predict.main(["--checkpoint", "hf-hub:org/pico", str(image), "--no-progress"])["rows"]
    assert rows[0]["file"] == str(image) and (tmp_path / "predictions.csv").is_file()


def test_create_model_takes_pretrained_weights_from_a_hub_name_or_a_run(tmp_path, offline_cache, hub_api):
    run, model = old_run(tmp_path)
    push_to_hub(run, "org/pico", api=hub_api)
    options = dict(img_size=16, patch_size=4, in_chans=1)
    for source in ("hf-hub:org/pico", run):
        same = jumbokit.create_model("vit_pico_jumbo", pretrained=source, num_classes=10, **options)
        assert all(torch.equal(v, model.state_dict()[k]) for k, v in same.state_dict().items())
        assert same.pretrained_cfg == jumbokit.load(run).pretrained_cfg
    # another class count: every tensor but the new head, which starts afresh; the class names go with the old head
    fresh = jumbokit.create_model("vit_pico_jumbo", pretrained=run, num_classes=3, **options)
    assert fresh.head.out_features == 3 and fresh.pretrained_cfg["num_classes"] == 3
    assert "label_names" not in fresh.pretrained_cfg
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in fresh.state_dict().items() if not k.startswith("head."))
    with pytest.raises(ValueError, match="is not a saved 'vit_pico_cls'.*cls_token"):
        jumbokit.create_model("vit_pico_cls", pretrained=run, num_classes=10, **options)
