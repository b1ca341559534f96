"""timm backbones (`timm:<name>`): pooling shapes, weights from files and from the Hugging Face
cache (never downloaded), refusals, and the GPU path run on the CPU.

timm's test-size models keep these fast: `test_vit` (class token, 64-d), `test_vit3` (an
attention-pool head, as SigLIP's), and the small real `convnext_atto`.
"""

from __future__ import annotations

import dataclasses
import os
import pickle

import h5py
import numpy as np
import pytest
import timm
import torch
from safetensors.torch import save_file

import vprom.features.extract as extract_module
import vprom.features.pipeline as pipeline
from tests.features.conftest import CROP_ROWS
from tests.features.test_checkpoints import Evil
from tests.features.test_extract import config, datasets
from tests.features.test_pipeline import FakeCuda
from tests.generation.test_full_disk import tiny_disk
from vprom.data import VPROM
from vprom.errors import VpromError
from vprom.features.backbones import get_backbone
from vprom.features.crops import decode_crops
from vprom.features.extract import extract
from vprom.feature_files import load_features, open_maps
from vprom.tables import read_crop_table

VIT, POOLED_VIT, CONVNEXT = "timm:test_vit", "timm:test_vit3", "timm:convnext_atto"
SIZE = 32  # test_vit's 16-px patches: a 2x2 grid


def timm_config(dataset, vg_dir, out, backbone=VIT, **overrides):
    options = dict(backbone=backbone, input_size=SIZE)
    options.update(overrides)
    return config(dataset, vg_dir, out, **options)


def stored(path):
    with h5py.File(path, "r") as h5:
        name = "maps" if "maps" in h5 else "features"
        return h5[name][()], dict(h5.attrs)


def vectors(net: torch.nn.Module, vg_dir, name: str, pool: str, size: int = SIZE):
    """A direct timm forward on the crops of CROP_ROWS, prepared as the model's data config
    says (bicubic, crop_pct, mean, std), L2-normalised, by crop id: what the file holds."""
    data = timm.data.resolve_model_data_config(net)
    rows = []
    for _, image_id, *box in sorted(CROP_ROWS):  # the file's rows: by crop id
        folder = "VG_100K" if image_id % 2 else "VG_100K_2"
        pixels, _ = decode_crops(vg_dir / folder / f"{image_id}.jpg", np.array([box]), size,
                                 data["interpolation"], data["crop_pct"])
        x = torch.from_numpy(pixels).permute(0, 3, 1, 2).float() / 255
        x = (x - torch.tensor(data["mean"]).view(1, 3, 1, 1)) / torch.tensor(
            data["std"]).view(1, 3, 1, 1)
        with torch.no_grad():
            tokens = net.forward_features(x)
            out = (net.forward_head(tokens, pre_logits=True) if pool == "cls"
                   else tokens[:, net.num_prefix_tokens:].mean(1))
        rows.append(torch.nn.functional.normalize(out, dim=1)[0].numpy())
    return np.stack(rows)


# ------------------------------------------------------------------------ shapes
@pytest.mark.parametrize("backbone, pool, shape", [
    (VIT, "auto", (64,)), (VIT, "cls", (64,)), (VIT, "mean", (64,)), (VIT, "none", (64, 2, 2)),
    (POOLED_VIT, "cls", (96,)), (CONVNEXT, "auto", (320,)), (CONVNEXT, "none", (320, 2, 2))])
def test_random_timm_models_extract_with_their_shapes(dataset, vg_dir, tmp_path, backbone, pool,
                                                      shape):
    out = tmp_path / "feats.h5"
    size = 64 if backbone == CONVNEXT else SIZE  # convnext: stride 32
    extract(timm_config(dataset, vg_dir, out, backbone=backbone, pool=pool, input_size=size))
    values, attrs = stored(out)
    assert values.shape == (len(CROP_ROWS), *shape)
    default = "cls" if backbone != CONVNEXT else "avg"
    assert attrs["pool"] == (default if pool == "auto" else pool)
    assert attrs["weights"] == "none" and attrs["random_weights"]
    assert attrs["timm_version"] == timm.__version__
    data_config = timm.data.resolve_model_data_config(
        timm.create_model(backbone.removeprefix("timm:"), num_classes=0))
    assert f'"interpolation": "{data_config["interpolation"]}"' in attrs["data_config"]
    assert f"S/{data_config['crop_pct']:g}" in attrs["resize"]
    if pool != "none":
        assert np.allclose(np.linalg.norm(values, axis=1), 1, atol=1e-5)


def test_mean_is_the_pooled_patch_map_and_cls_is_another_vector(dataset, vg_dir, tmp_path):
    files = {pool: tmp_path / f"{pool}.h5" for pool in ("cls", "mean", "none")}
    for pool, out in files.items():
        extract(timm_config(dataset, vg_dir, out, pool=pool))
    with open_maps(files["none"]) as maps:
        grid = torch.from_numpy(maps.gather(load_features(files["mean"]).crop_id))
    pooled = torch.nn.functional.normalize(grid.mean(dim=(2, 3)), dim=1).numpy()
    assert np.allclose(pooled, stored(files["mean"])[0], atol=1e-5)
    assert not np.allclose(stored(files["cls"])[0], stored(files["mean"])[0], atol=1e-2)


def test_cls_is_the_models_own_pooled_output_even_without_a_class_token_head(dataset, vg_dir,
                                                                             tmp_path):
    """test_vit3 pools with an attention head (global_pool 'map', as SigLIP): `cls` is that
    head's output, not the first token."""
    out = tmp_path / "feats.h5"
    extract(timm_config(dataset, vg_dir, out, backbone=POOLED_VIT, pool="cls"))
    loaded = get_backbone(POOLED_VIT).load("none", "cls", SIZE).module.model
    assert loaded.global_pool == "map"
    assert np.allclose(stored(out)[0], vectors(loaded, vg_dir, "test_vit3", "cls"), atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("backbone, size, dim", [(VIT, SIZE, 64), (CONVNEXT, 64, 320)])
def test_small_timm_models_extract_the_synthetic_build_for_vprom_data(synthetic_build, tmp_path,
                                                                      backbone, size, dim):
    """A small ViT and a small ConvNeXt, random weights, over every crop of a generated data
    set; the file feeds `vprom.data.VPROM` as any FEATS.h5 does."""
    dataset, vg = synthetic_build
    out = tmp_path / "feats.h5"
    extract(timm_config(dataset, vg, out, backbone=backbone, input_size=size, batch_size=32,
                        chunk_batches=8))
    feats = load_features(out)
    assert np.array_equal(feats.crop_id, np.sort(read_crop_table(dataset).crop_id))
    assert feats.features.shape[1] == dim and len(feats.missing_crop_id) == 0
    assert np.allclose(np.linalg.norm(feats.features, axis=1), 1, atol=1e-3)
    item = VPROM(dataset, split="neutral", part="train", source=out)[0]
    assert tuple(item["panels"].shape) == (16, dim) and 0 <= int(item["answer"]) < 8


@pytest.mark.parametrize("backbone, pool", [(VIT, "cls"), (CONVNEXT, "none")])
def test_a_disk_too_small_for_the_file_is_refused_before_any_chunk(dataset, vg_dir, tmp_path,
                                                                   monkeypatch, backbone, pool):
    """A timm vector's size, and any map's shape, are known once the model has run on a
    probe: the free-space check runs then, before any chunk is written."""
    tiny_disk(monkeypatch, free=1000)
    out = tmp_path / "x.h5"
    size = 64 if backbone == CONVNEXT else SIZE
    with pytest.raises(VpromError, match=rf"{out.name}: needs about .* for the chunks and the "
                                         r"features file but .* has 1,000 bytes free"):
        extract(timm_config(dataset, vg_dir, out, backbone=backbone, pool=pool,
                            input_size=size))
    assert not out.exists() and not list(tmp_path.glob("x.h5.partial/chunk-*"))


def test_a_pooling_the_model_does_not_offer_is_refused(dataset, vg_dir, tmp_path):
    with pytest.raises(VpromError, match=r"--pool cls: timm:convnext_atto offers avg, none"):
        extract(timm_config(dataset, vg_dir, tmp_path / "x.h5", backbone=CONVNEXT, pool="cls"))
    with pytest.raises(VpromError, match=r"--pool avg: timm:test_vit offers cls, mean, none"):
        extract(timm_config(dataset, vg_dir, tmp_path / "x.h5", pool="avg"))


def test_extract_list_shows_both_kinds_and_how_to_name_a_timm_model(capsys):
    from vprom.app import cli

    cli.main(["extract", "--list"])
    printed = capsys.readouterr().out
    assert "resnet101 " in printed and "bottomup-r101 " in printed
    assert "timm:<name>  any timm model, e.g. timm:vit_base_patch16_224.dino" in printed


def test_unknown_timm_names_are_named(dataset, vg_dir, tmp_path):
    with pytest.raises(VpromError, match=r"timm:no_such_net: timm .* has no such model"):
        get_backbone("timm:no_such_net")
    with pytest.raises(VpromError, match=r"timm:test_vit.bogus: Invalid pretrained tag"):
        get_backbone("timm:test_vit.bogus")


# ----------------------------------------------------------------------- weights
@pytest.fixture
def trained(tmp_path):
    """A test_vit with weights of its own (seed 1, not the random-init seed), saved to disk."""
    torch.manual_seed(1)
    net = timm.create_model("test_vit", num_classes=0, img_size=SIZE).eval()
    path = tmp_path / "model.safetensors"
    save_file(net.state_dict(), path)
    return net, path


def test_a_safetensors_file_is_loaded_and_really_used(dataset, vg_dir, tmp_path, trained):
    net, path = trained
    random, loaded = tmp_path / "random.h5", tmp_path / "loaded.h5"
    extract(timm_config(dataset, vg_dir, random))
    extract(timm_config(dataset, vg_dir, loaded, weights=str(path)))
    values, attrs = stored(loaded)
    assert attrs["weights"] == str(path) and not attrs["random_weights"]
    assert np.allclose(values, vectors(net, vg_dir, "test_vit", "cls"), atol=1e-5)
    assert not np.allclose(values, stored(random)[0], atol=1e-2)


def test_a_pth_state_dict_gives_the_same_features(dataset, vg_dir, tmp_path, trained):
    net, path = trained
    pth = tmp_path / "model.pth"
    torch.save({"state_dict": net.state_dict()}, pth)
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    extract(timm_config(dataset, vg_dir, a, weights=str(path), pool="mean"))
    extract(timm_config(dataset, vg_dir, b, weights=str(pth), pool="mean"))
    assert datasets(a) == datasets(b)
    assert np.allclose(stored(a)[0], vectors(net, vg_dir, "test_vit", "mean"), atol=1e-5)


def test_weights_saved_at_another_size_get_their_position_embeddings_resampled(
        dataset, vg_dir, tmp_path):
    """A file saved at test_vit's own size (160 px: a 10x10 grid) used at --input-size 32 (2x2):
    timm resamples the position embeddings, and the features are those of timm's own
    model built so."""
    torch.manual_seed(1)
    path = tmp_path / "w.safetensors"
    save_file(timm.create_model("test_vit", num_classes=0).state_dict(), path)
    out = tmp_path / "x.h5"
    extract(timm_config(dataset, vg_dir, out, weights=str(path)))
    net = timm.create_model("test_vit", pretrained=True, num_classes=0, img_size=SIZE,
                            pretrained_cfg_overlay={"file": str(path)}).eval()
    assert net.pos_embed.shape[1] == 1 + (SIZE // 16) ** 2
    assert np.allclose(stored(out)[0], vectors(net, vg_dir, "test_vit", "cls"), atol=1e-5)


def test_a_checkpoint_that_would_run_code_is_refused(dataset, vg_dir, tmp_path):
    for path, save in ((tmp_path / "evil.pth", lambda p: torch.save({"x": Evil()}, p)),
                       (tmp_path / "evil.bin", lambda p: p.write_bytes(pickle.dumps(
                           {"x": Evil()}, protocol=2)))):
        save(path)
        with pytest.raises(VpromError, match=f"{path.name}: cannot read the weights file .*"
                                             "system"):
            extract(timm_config(dataset, vg_dir, tmp_path / "x.h5", weights=str(path)))
    assert not (tmp_path / "x.h5").exists()


def test_weights_of_another_model_are_refused(dataset, vg_dir, tmp_path):
    other = tmp_path / "other.safetensors"
    save_file(timm.create_model("test_vit3", num_classes=0).state_dict(), other)
    with pytest.raises(VpromError, match=r"other.safetensors: timm cannot load it into "
                                         r"test_vit .*; pass that model's weights file"):
        extract(timm_config(dataset, vg_dir, tmp_path / "x.h5", weights=str(other)))


def _hf_cache(root, repo: str, filename: str, data: dict) -> None:
    """Hugging Face's cache layout, as huggingface_hub writes it: refs/main names the
    snapshot folder that holds the file."""
    folder = root / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text("0" * 40)
    (folder / "snapshots" / ("0" * 40)).mkdir(parents=True)
    save_file(data, folder / "snapshots" / ("0" * 40) / filename)


def test_pretrained_weights_come_from_the_cache_and_are_never_downloaded(
        dataset, vg_dir, tmp_path, trained, monkeypatch):
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "torch-hub"))
    out = tmp_path / "feats.h5"
    with pytest.raises(VpromError, match=r"timm:test_vit: its pretrained weights are not in the "
                                         r"Hugging Face cache .* vprom never downloads; .*"
                                         r"huggingface.co/timm/test_vit.r160_in1k .*"
                                         r"then pass --weights FILE"):
        extract(timm_config(dataset, vg_dir, out, weights="pretrained"))
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    net, _ = trained
    _hf_cache(cache, "timm/test_vit.r160_in1k", "model.safetensors", net.state_dict())
    extract(timm_config(dataset, vg_dir, out, weights="pretrained"))
    values, attrs = stored(out)
    assert attrs["weights"].startswith("pretrained:") and str(cache) in attrs["weights"]
    assert np.allclose(values, vectors(net, vg_dir, "test_vit", "cls"), atol=1e-5)


# ----------------------------------------------------------------- GPU path, on CPU
def test_the_gpu_path_runs_timm_models_in_bf16_through_the_overlapped_loop(
        dataset, vg_dir, tmp_path, monkeypatch):
    """The CUDA streams (compute stream, pinned copies, events) through the CPU stand-in,
    and bf16 autocast as on a GPU: the same crops, vectors close to the float32 ones."""
    plain = tmp_path / "plain.h5"
    extract(timm_config(dataset, vg_dir, plain, in_flight=0))
    fake = FakeCuda()
    monkeypatch.setattr(pipeline, "streams_for",
                        lambda device, api=None: pipeline.CudaStreams(device, fake))
    prepare = extract_module._prepare
    monkeypatch.setattr(extract_module, "_prepare", lambda config, world: dataclasses.replace(
        prepare(config, world), autocast=torch.bfloat16))
    build, built = pipeline.build_model, []
    monkeypatch.setattr(pipeline, "build_model",
                        lambda plan: built.append(build(plan)) or built[-1])
    out = tmp_path / "gpu.h5"
    extract(timm_config(dataset, vg_dir, out, in_flight=2))
    patch_embed = built[0].model.patch_embed.proj  # the ViT's one convolution
    assert patch_embed.weight.is_contiguous(memory_format=torch.channels_last)
    values, attrs = stored(out)
    assert attrs["autocast"] == "torch.bfloat16" and fake.count("pinned") == 3
    assert np.allclose(np.linalg.norm(values, axis=1), 1, atol=1e-5)
    assert np.allclose(values, stored(plain)[0], atol=0.05)
    assert not np.array_equal(values, stored(plain)[0])  # bf16 really ran


def test_a_corrupt_safetensors_file_is_named(dataset, vg_dir, tmp_path):
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(VpromError, match=r"broken.safetensors: timm cannot load it into "
                                         r"test_vit \(.*\); pass that model's weights file"):
        extract(timm_config(dataset, vg_dir, tmp_path / "x.h5", weights=str(broken)))
