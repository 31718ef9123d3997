"""`lmmsim profile-host --quick`: host preprocessing profile (Pillow, PyAV, transformers processors)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch", reason="profile-host needs torch (pip install 'lmmsim[profile]')")
pytest.importorskip("transformers", reason="profile-host needs transformers (pip install 'lmmsim[profile]')")
pytest.importorskip("av", reason="profile-host needs PyAV (pip install 'lmmsim[profile]')")

from lmmsim.cli import main
from lmmsim.profiler.host import FIT_SPECS, OUTPUT_FILES, TIME_COLUMNS, fit_line
from lmmsim.profiler.host_dispatch import ENCODERS, launches_kernel
from lmmsim.profiler.host_tokenize import (
    PRIMARY,
    QUICK_TOKEN_COUNTS,
    QUICK_VOCABS,
    VARIANTS,
    single_threaded,
)

COLUMNS = {
    "image_decode": ["format", "width", "height", "pixels", "encoded_bytes"],
    "image_processor": ["family", "processor_class", "variant", "width", "height", "pixels"],
    "video_decode": ["codec", "width", "height", "frames", "pixels", "encoded_bytes"],
    "video_processor": ["family", "processor_class", "variant", "input", "width", "height", "frames",
                        "total_pixels"],
    "audio_features": ["operation", "feature_size", "seconds", "samples"],
    "tokenize": ["api", "bpe_cache", "vocab_target", "vocab_size", "tokens", "chars"],
    "tokenize_variants": ["api", "bpe_cache", "vocab_target", "vocab_size", "tokens", "chars"],
}
DISPATCH_COLUMNS = ["encoder", "family", "layer_class", "models", "dtype", "grad_mode", "hidden_size", "tokens",
                    "ops_per_layer", "kernel_ops_per_layer", "op_counts", "layers_per_call",
                    "time_us", "time_us_p10", "time_us_p90", "repeats"]


@pytest.fixture(scope="module")
def quick_profile(tmp_path_factory):
    out = tmp_path_factory.mktemp("host") / "cpu"
    assert main(["profile-host", "-o", str(out), "--quick"]) == 0
    return out


def test_quick_writes_every_file(quick_profile):
    for name in OUTPUT_FILES:
        assert (quick_profile / name).is_file(), name


@pytest.mark.parametrize("op", sorted(COLUMNS))
def test_csv_columns_and_positive_times(quick_profile, op):
    df = pd.read_csv(quick_profile / f"{op}.csv")
    assert not df.empty
    assert set(COLUMNS[op] + TIME_COLUMNS) <= set(df.columns)
    assert (df["time_ms"] > 0).all()
    assert (df["time_ms_p10"] <= df["time_ms_p90"]).all()
    assert (df["repeats"] >= 1).all()


def test_processor_families_present(quick_profile):
    df = pd.read_csv(quick_profile / "image_processor.csv")
    assert {"qwen2_vl", "llava_onevision", "llava_next", "clip", "siglip", "gemma3"} <= set(df["family"])
    assert set(df["variant"]) <= {"slow", "fast"}


def test_meta_provenance(quick_profile):
    meta = json.loads((quick_profile / "meta.json").read_text())
    assert meta["quick"] is True
    assert meta["cpu_model"] and meta["cpu_count"] >= 1 and meta["torch_threads"] == 1
    for lib in ("Pillow", "av", "transformers", "tokenizers", "torch", "numpy"):
        assert meta["versions"][lib], lib
    assert meta["date"] and meta["command"].startswith("lmmsim profile-host")
    assert meta["video_codec"] in ("h264", "mpeg4")
    tok = meta["tokenize"]
    assert tok["corpus"]["bytes"] > 0 and len(tok["corpus"]["sha256"]) == 64
    assert [v["vocab_target"] for v in tok["vocabularies"]] == list(QUICK_VOCABS)
    assert 0 < tok["cpu_s_per_wall_s"] < 1.5  # one thread (2 would mean the encode fanned out)
    assert meta["encoder_dispatch"]["layer_size"]["hidden_size"] > 0


def test_fit_json_sane(quick_profile):
    fit = json.loads((quick_profile / "fit.json").read_text())
    assert set(fit) == set(FIT_SPECS)
    for op, entry in fit.items():
        assert entry["fits"], op
        for f in entry["fits"]:
            assert np.isfinite([f["intercept_ms"], f["slope_ms_per_unit"], f["r2"]]).all()
            assert f["r2"] <= 1.0 + 1e-9 and f["n"] >= 1


def test_fit_line_exact():
    f = fit_line(np.array([1.0, 2.0, 3.0]), np.array([3.0, 5.0, 7.0]))
    assert f["slope_ms_per_unit"] == pytest.approx(2.0) and f["intercept_ms"] == pytest.approx(1.0)
    assert f["r2"] == pytest.approx(1.0)


def test_bad_max_minutes_is_one_line_exit_2(tmp_path, capsys):
    assert main(["profile-host", "-o", str(tmp_path / "x"), "--quick", "--max-minutes", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--max-minutes" in err
    assert not (tmp_path / "x").exists()


def test_existing_folder_needs_force(quick_profile, capsys):
    assert main(["profile-host", "-o", str(quick_profile), "--quick"]) == 2
    assert "--force" in capsys.readouterr().err


def test_tokenize_vocabularies_and_token_counts(quick_profile):
    df = pd.read_csv(quick_profile / "tokenize.csv")
    variants = pd.read_csv(quick_profile / "tokenize_variants.csv")
    assert set(df["vocab_target"]) == set(QUICK_VOCABS)
    assert (df["vocab_size"] == df["vocab_target"]).all()  # the quick corpus is big enough for them
    # tokenize.csv: one row per vocabulary and length (what a consumer groups by), the server's call
    assert not df.duplicated(["vocab_size", "tokens"]).any() and set(zip(df["api"], df["bpe_cache"])) == {PRIMARY}
    assert set(zip(variants["api"], variants["bpe_cache"])) == set(VARIANTS) - {PRIMARY}
    assert set(df["tokens"]) == set(variants["tokens"]) == set(QUICK_TOKEN_COUNTS)  # cut to exact token counts
    assert (df["chars"] >= df["tokens"]).all()
    fit = json.loads((quick_profile / "fit.json").read_text())["tokenize"]
    assert {f["vocab_size"] for f in fit["fits"]} == set(QUICK_VOCABS) and fit["fits"][0]["x"] == "tokens"


def test_encoder_dispatch_counts_and_times(quick_profile):
    df = pd.read_csv(quick_profile / "encoder_dispatch.csv")
    assert set(DISPATCH_COLUMNS) <= set(df.columns)
    assert set(df["encoder"]) == set(ENCODERS)  # every family's real layer class builds
    assert {"clip", "siglip", "qwen_vit", "intern_vit", "whisper"} <= set(df["family"])
    assert (df["kernel_ops_per_layer"] > 0).all() and (df["kernel_ops_per_layer"] <= df["ops_per_layer"]).all()
    assert (df["time_us"] > 0).all() and (df["time_us_p10"] <= df["time_us_p90"]).all()
    assert df["models"].str.contains("gemma-3-27b").any()  # gemma3's encoder is SigLIP's
    # op_counts is the same count, op by op
    totals = df["op_counts"].map(lambda s: sum(int(item.rsplit(":", 1)[1]) for item in s.split()))
    assert (totals == df["ops_per_layer"]).all()


def test_views_launch_no_kernel():
    import torch

    aten = torch.ops.aten
    for op in (aten.view.default, aten.transpose.int, aten.permute.default, aten.expand.default, aten.t.default,
               aten._unsafe_view.default, aten.split.Tensor, aten.slice.Tensor, aten.select.int, aten.detach.default,
               aten.alias.default):
        assert not launches_kernel(op), op
    for op in (aten.addmm.default, aten.add.Tensor, aten.add_.Tensor, aten._to_copy.default, aten.cat.default):
        assert launches_kernel(op), op


def test_single_threaded_restores_the_environment(monkeypatch):
    import os

    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    with single_threaded():
        assert os.environ["TOKENIZERS_PARALLELISM"] == "false"
    assert os.environ["TOKENIZERS_PARALLELISM"] == "true"


@pytest.fixture(scope="module")
def only_rerun(quick_profile, tmp_path_factory):
    """A copy of the quick profile (manifest included) with its tokenize section measured again."""
    out = tmp_path_factory.mktemp("host_only") / "cpu"
    shutil.copytree(quick_profile, out)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert main(["profile-host", "-o", str(out), "--quick", "--only", "tokenize", "--force"]) == 0
    return out, before


def test_only_keeps_the_other_sections_and_merges(only_rerun):
    out, before = only_rerun
    for name in before:
        if name.endswith(".csv") and not name.startswith("tokenize"):
            assert (out / name).read_bytes() == before[name], name
    assert (out / "tokenize.csv").is_file() and (out / "tokenize_variants.csv").is_file()
    fit, old_fit = json.loads((out / "fit.json").read_text()), json.loads(before["fit.json"])
    assert set(fit) == set(FIT_SPECS) and fit["image_decode"] == old_fit["image_decode"]
    meta, old_meta = json.loads((out / "meta.json").read_text()), json.loads(before["meta.json"])
    assert meta["date"] == old_meta["date"] and meta["command"] == old_meta["command"]
    assert meta["encoder_dispatch"] == old_meta["encoder_dispatch"]
    rerun = meta["reruns"][-1]
    assert rerun["sections"] == ["tokenize"] and rerun["command"].endswith("--only tokenize --force")
    assert rerun["versions"]["tokenizers"] and meta["tokenize"]["vocabularies"]


def test_only_bad_section_is_one_line_exit_2(tmp_path, capsys):
    assert main(["profile-host", "-o", str(tmp_path / "x"), "--quick", "--only", "tokenize,bogus"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--only" in err and "'bogus'" in err and "'encoder_dispatch'" in err


def test_only_needs_a_profile_to_merge_into(tmp_path, capsys):
    assert main(["profile-host", "-o", str(tmp_path / "x"), "--quick", "--only", "tokenize"]) == 2
    err = capsys.readouterr().err.strip()
    assert "meta.json" in err and "without --only" in err
    assert not (tmp_path / "x").exists()
