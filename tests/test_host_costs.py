"""Host preprocessing priced from the measured profile (lmmsim.costmodel.host_costs) and the
host costs of an encoder call (lmmsim.costmodel.encoder_call)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from lmmsim import catalog
from lmmsim.costmodel.encoder_call import EncoderCallCosts, dispatch_row, encoder_call_costs, processed_bytes
from lmmsim.costmodel.engine_overheads import EngineCostsConfig
from lmmsim.costmodel.host_costs import Curve, HostCosts, load_profile, processor_family
from lmmsim.errors import UserError
from lmmsim.workload.request import EncoderWork

PROFILE = catalog.profiles_dir() / "host" / "cpu"


def _csv(name: str) -> pd.DataFrame:
    return pd.read_csv(PROFILE / f"{name}.csv")


def test_curve_interpolates_between_points_and_extends_with_the_fit_slope():
    c = Curve([1, 3, 2], [10, 30, 14], slope=5)
    assert c.ms(2) == 14 and c.ms(2.5) == 22  # sorted, then piecewise linear
    assert c.ms(5) == 30 + 5 * 2  # beyond the last point: the least-squares slope
    assert c.ms(0) == 5 and c.ms(-10) == 0  # below the first: the same slope, never negative
    assert Curve([1, 2], [1, 2], slope=-3).slope == 0  # a falling fit never makes time shrink with size


def test_measured_points_come_back_exactly():
    """At a profiled size an item costs the CSV medians: decode + the family's processor."""
    model = catalog.get_model("qwen2.5-vl-7b")
    costs = HostCosts(load_profile(str(PROFILE)), model)
    dec, proc = _csv("image_decode"), _csv("image_processor")
    side = 1024
    expect = (dec[(dec["format"] == "jpeg") & (dec["width"] == side)]["time_ms"].item()
              + proc[(proc["family"] == "qwen2_vl") & (proc["width"] == side)]["time_ms"].item())
    item = model.image_item(side, side)
    assert costs.item_s(item) == pytest.approx(expect * 1e-3, rel=1e-12)
    faster = HostCosts(load_profile(str(PROFILE)), model, cpu_speed=2.0)
    assert faster.item_s(item) == pytest.approx(expect * 1e-3 / 2, rel=1e-12)


def test_every_catalog_media_model_is_priced():
    profile = load_profile(str(PROFILE))
    shapes = {"image": (1024, 768), "video": (16, 448, 448), "audio": (30.0,)}
    for name, model in catalog.models().items():
        costs = HostCosts(profile, model)
        for modality in model.modalities[1:]:
            t = costs.item_s(getattr(model, f"{modality}_item")(*shapes[modality]))
            assert 1e-4 < t < 5.0, (name, modality, t)


def test_qwen3_vl_is_told_apart_and_video_without_rows_goes_frame_by_frame():
    assert processor_family(catalog.get_model("qwen3-vl-8b"), "image") == "qwen3_vl"
    assert processor_family(catalog.get_model("qwen2.5-vl-7b"), "image") == "qwen2_vl"
    model = catalog.get_model("llava-onevision-qwen2-7b")  # no llava_onevision video rows: SigLIP per frame
    costs = HostCosts(load_profile(str(PROFILE)), model)
    proc = _csv("image_processor")
    siglip_448 = proc[(proc["family"] == "siglip") & (proc["width"] == 448)]["time_ms"].item()
    assert costs._video_processor_ms(8, 448 * 448) == pytest.approx(8 * siglip_448, rel=1e-12)


def test_png_costs_more_than_jpeg_and_unknown_choices_are_user_errors(tmp_path):
    model = catalog.get_model("llava-v1.6-34b")
    profile = load_profile(str(PROFILE))
    item = model.image_item(1344, 1344)
    assert HostCosts(profile, model, image_format="png").item_s(item) > HostCosts(profile, model).item_s(item)
    with pytest.raises(UserError, match="host.image_format"):
        HostCosts(profile, model, image_format="webp")
    with pytest.raises(UserError, match="host.profile.*llava_next"):
        HostCosts(profile, model, variant="fast")  # only slow processors are in the shipped profile
    with pytest.raises(UserError, match="host.profile"):
        load_profile(str(tmp_path))


# ---------------------------------------------------------------- encoder calls
def test_h2d_copies_float32_patches_over_pcie():
    model = catalog.get_model("llava-v1.6-34b")
    gpu = catalog.get_gpu("rtx-6000-ada")
    cfg = EngineCostsConfig(encoder_launch_us=0)
    call = encoder_call_costs(model, gpu, 1, cfg, None, 1.0)
    work = model.image_item(1024, 1024).encoder  # 5 crops of 577 positions
    nbytes = work.num_tokens * 3 * 14 * 14 * 4
    assert processed_bytes("clip", 14, work) == nbytes
    pcie = gpu.links["pcie"]
    assert call.h2d_s(work) == pytest.approx(pcie.latency_us * 1e-6 + nbytes / (pcie.bandwidth_gbs * 1e9))
    assert call.issue_s == 0
    # Qwen's temporal patch doubles the pixels per token; Whisper sends patch_size (2) mel frames of 128 bins
    assert processed_bytes("qwen_vit", 14, EncoderWork(1, 10)) == 10 * 3 * 2 * 196 * 4
    assert processed_bytes("whisper", 2, EncoderWork(1, 1500)) == 1500 * 2 * 128 * 4
    off = encoder_call_costs(model, gpu, 1, EngineCostsConfig(encoder_launch_us=0, encoder_h2d=False), None, 1.0)
    assert off.host_s([work], 0.0) == 0.0


def _dispatch_csv(folder, family="clip", time_us=100.0, kernel_ops=20):
    pd.DataFrame([{"family": family, "dtype": "bfloat16", "grad_mode": "inference_mode", "time_us": time_us,
                   "ops_per_layer": kernel_ops + 10, "kernel_ops_per_layer": kernel_ops}]).to_csv(
        folder / "encoder_dispatch.csv", index=False)


def _dispatch_row_of_the_frame(folder, family, variant=None):
    """dispatch_row as it was, by boolean indexing of the frame (the reference)."""
    df = pd.read_csv(folder / "encoder_dispatch.csv")
    rows = df[df["family"] == family]
    if variant is not None and "encoder" in rows and (rows["encoder"] == variant).any():
        rows = rows[rows["encoder"] == variant]
    for col, want in (("dtype", "bfloat16"), ("grad_mode", "inference_mode")):
        if col in rows and (rows[col] == want).any():
            rows = rows[rows[col] == want]
    return None if rows.empty else rows.iloc[0].to_dict()


def test_the_dispatch_row_is_the_frames_row_value_for_value_and_type_for_type(tmp_path):
    shipped = Path(__file__).resolve().parent.parent / "lmmsim" / "profiles" / "host" / "cpu"
    _dispatch_csv(tmp_path)  # no encoder column
    bare = tmp_path / "bare"
    bare.mkdir()
    pd.DataFrame([{"family": "clip", "time_us": 5.5, "kernel_ops_per_layer": 3},  # neither dtype nor grad mode
                  {"family": "clip", "time_us": 7.25, "kernel_ops_per_layer": 4}]).to_csv(
        bare / "encoder_dispatch.csv", index=False)
    seen = 0
    for folder in (shipped, tmp_path, bare):
        for family in ("clip", "siglip", "qwen_vit", "intern_vit", "whisper", "none"):
            for variant in (None, "qwen2_5_vl", "qwen3_vl", "other"):
                want, got = _dispatch_row_of_the_frame(folder, family, variant), dispatch_row(folder, family, variant)
                assert got == want and (want is None or [type(v) for v in got.values()] == [
                    type(v) for v in want.values()]), (folder, family, variant)
                seen += want is not None
    assert seen > 20
    assert dispatch_row(shipped, "qwen_vit", "qwen3_vl") != dispatch_row(shipped, "qwen_vit", "qwen2_5_vl")


def test_eager_issue_is_per_layer_dispatch_plus_launches_and_hides_behind_the_gpu(tmp_path):
    _dispatch_csv(tmp_path)
    model = catalog.get_model("llava-v1.6-34b")  # 23 CLIP layers
    gpu = catalog.get_gpu("rtx-6000-ada")
    cfg = EngineCostsConfig(encoder_h2d=False)
    call = encoder_call_costs(model, gpu, 1, cfg, tmp_path, cpu_speed=2.0)
    per_layer = 100e-6 / 2 + 20 * cfg.encoder_launch_us * 1e-6
    assert call.issue_s == pytest.approx(23 * per_layer)
    work = EncoderWork(1, 577)
    assert call.host_s([work], gpu_s=0.0) == pytest.approx(call.issue_s)
    assert call.host_s([work], gpu_s=call.issue_s / 3) == pytest.approx(call.issue_s * 2 / 3)
    assert call.host_s([work], gpu_s=1.0) == 0.0  # issuing runs ahead of a long GPU pass
    tp2 = encoder_call_costs(model, gpu, 2, cfg, tmp_path, cpu_speed=2.0)
    assert tp2.issue_s == pytest.approx(23 * (per_layer + 2 * cfg.collective_launch_us * 1e-6))
    graphs = encoder_call_costs(model, gpu, 1, EngineCostsConfig(encoder_h2d=False, encoder_cudagraphs=True),
                                tmp_path, 1.0)
    assert graphs.issue_s == pytest.approx(cfg.encoder_launch_us * 1e-6)  # one graph launch


def test_a_profile_without_the_family_is_a_user_error(tmp_path):
    _dispatch_csv(tmp_path, family="siglip")
    model = catalog.get_model("llava-v1.6-34b")
    with pytest.raises(UserError, match="engine.encoder_launch_us.*'clip'"):
        encoder_call_costs(model, catalog.get_gpu("h100-sxm-80gb"), 1, EngineCostsConfig(), tmp_path, 1.0)


def test_encoder_call_host_time_is_part_of_an_in_engine_encode():
    model = catalog.get_model("llava-v1.6-34b")
    call = EncoderCallCosts("clip", 14, 23, 4e-6, 64e9, issue_s=0.5)
    from lmmsim.costmodel.composed import ComposedStepCostModel
    from lmmsim.costmodel.roofline import RooflinePredictor

    gpu = catalog.get_gpu("h100-sxm-80gb")
    cost = ComposedStepCostModel(model, gpu, 1, RooflinePredictor(gpu, gpu.links["nvlink"]))
    works = [model.image_item(1024, 1024).encoder]
    gpu_s = cost.encode_s(works)
    assert cost.encode_host_s(works) == 0 and cost.encode_call_s(works) == gpu_s  # none attached
    cost.encoder_call = call
    assert gpu_s < 0.5
    assert cost.encode_call_s(works) == pytest.approx(0.5 + call.h2d_s(works[0]))
    assert math.isclose(cost.encode_s(works), gpu_s)  # the GPU time itself is unchanged


def test_a_one_item_encoder_batch_has_the_key_time_and_host_time_of_the_grouped_path():
    from lmmsim.costmodel.composed import ComposedStepCostModel
    from lmmsim.costmodel.roofline import RooflinePredictor

    model, gpu = catalog.get_model("qwen2.5-vl-72b"), catalog.get_gpu("h100-sxm-80gb")
    one, grouped = (ComposedStepCostModel(model, gpu, 1, RooflinePredictor(gpu, gpu.links["nvlink"]))
                    for _ in range(2))
    call = EncoderCallCosts("qwen_vit", 14, 32, 4e-6, 64e9, issue_s=0.004)
    works = [EncoderWork(units, length) for units in (0, 1, 3) for length in (0, 64, 1369, 4096)]
    for w in works:  # a second item without units takes the grouping path to the same key
        assert one.encode_s([w]) == grouped.encode_s([w, EncoderWork(0, 9)])
        for gpu_s in (0.0, 0.001, 0.01):
            assert call.host_s([w], gpu_s) == sum(call.h2d_s(x) for x in [w]) + max(0.0, call.issue_s - gpu_s)
    assert list(one._encode_memo.items()) == list(grouped._encode_memo.items())
    assert len(one._encode_memo) == 6 and one.encode_s([EncoderWork(0, 64)]) == 0.0


def test_a_text_request_pays_tokenisation_only():
    """api_server placement: tokenisation at the measured vocabulary nearest the model's, no media."""
    from types import SimpleNamespace

    from lmmsim.assembly.host_stage import HostStage

    from conftest import text_request

    model = catalog.get_model("qwen2.5-vl-7b")  # vocabulary 152,064: the 151,646 rows
    costs = HostCosts(load_profile(str(PROFILE)), model)
    tok = _csv("tokenize")
    at_2048 = tok[(tok["vocab_size"] == 151646) & (tok["tokens"] == 2048)]["time_ms"].item()
    assert costs.tokenize_s(2048) == pytest.approx(at_2048 * 1e-3, rel=1e-12)
    stage = HostStage("api_server", costs, 1, 1)
    pool = stage.make_front(None, None)
    seq = SimpleNamespace(request=text_request(0, 0.0, 2048, 1))
    assert pool.cost_s(seq) == pytest.approx(at_2048 * 1e-3, rel=1e-12)
    image = model.image_item(448, 448)
    assert costs.item_s(image) > 0 and costs.item_s(image, processed=True) < costs.item_s(image)


def test_a_profile_groups_its_rows_as_pandas_groupby_does():
    from lmmsim.costmodel.host_costs import _groups

    df = pd.DataFrame({"family": ["b", "a", "b", None, "a", "c", "a"],
                       "width": [448, 384, 448, 448, float("nan"), 1024, 384],
                       "time_ms": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]})
    for columns in (["family"], ["family", "width"], ["width"]):
        expected = {(k if isinstance(k, tuple) else (k,)): list(g.index) for k, g in df.groupby(columns)}
        mine = _groups(df, columns)
        assert list(mine) == list(expected) and mine == expected, columns
