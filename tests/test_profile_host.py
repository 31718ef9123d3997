"""`lmmsim profile-host --quick`: host preprocessing profile (Pillow, PyAV, transformers processors)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch", reason="profile-host needs torch (pip install 'lmmsim[profile]')")
pytest.importorskip("transformers", reason="profile-host needs transformers (pip install 'lmmsim[profile]')")
pytest.importorskip("av", reason="profile-host needs PyAV (pip install 'lmmsim[profile]')")

from lmmsim.cli import main
from lmmsim.profiler.host import FIT_SPECS, OUTPUT_FILES, TIME_COLUMNS, fit_line

COLUMNS = {
    "image_decode": ["format", "width", "height", "pixels", "encoded_bytes"],
    "image_processor": ["family", "processor_class", "variant", "width", "height", "pixels"],
    "video_decode": ["codec", "width", "height", "frames", "pixels", "encoded_bytes"],
    "video_processor": ["family", "processor_class", "variant", "input", "width", "height", "frames",
                        "total_pixels"],
    "audio_features": ["operation", "feature_size", "seconds", "samples"],
}


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
    for lib in ("Pillow", "av", "transformers", "torch", "numpy"):
        assert meta["versions"][lib], lib
    assert meta["date"] and meta["command"].startswith("lmmsim profile-host")
    assert meta["video_codec"] in ("h264", "mpeg4")


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
