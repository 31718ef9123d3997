"""The 2025-26 model families: Qwen3-VL (dense and MoE), Llama 4 Scout, GLM-4.5V, Qwen3-Omni.

Each token rule is checked twice: against the processor's arithmetic written out here by hand
(resized size, grid, token count for a given W x H, frames or seconds), and, where the
``transformers`` class or function runs offline, against it on a few sizes (skipped cleanly
when it is missing). Each new model loads and its parameter counts match the published sizes.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import math
import re
from collections import defaultdict

import pytest

from lmmsim import catalog
from lmmsim.tokenrules import Llama4ImageRule, Qwen3OmniAudioRule, Qwen3VlVideoRule, QwenVlImageRule

NEW_MODELS = [
    "qwen3-vl-32b", "qwen3-vl-30b-a3b", "qwen3-vl-235b-a22b", "llama-4-scout-17b-16e", "glm-4.5v",
    "qwen3-omni-30b-a3b",
]
SIZES = [(1024, 768), (768, 1024), (640, 480), (1920, 1080), (4000, 3000), (300, 500), (100, 100), (3000, 200)]


# --------------------------------------------------------------------- loading and sizes
@pytest.mark.parametrize("name", NEW_MODELS + ["qwen3-vl-8b"])
def test_model_loads_with_its_media(name):
    model = catalog.get_model(name)
    assert model.name == name and model.encoder is not None
    expected = {"llama-4-scout-17b-16e": ("text", "image"), "glm-4.5v": ("text", "image"),
                "qwen3-omni-30b-a3b": ("text", "audio")}.get(name, ("text", "image", "video"))
    assert model.modalities == expected


def test_qwen3_vl_8b_states_deepstack_and_positions():
    enc = catalog.get_model("qwen3-vl-8b").encoder
    assert enc.deepstack_mergers == 3 and enc.position_embedding == "learned_and_rotary_2d"
    assert catalog.get_model("qwen3-vl-8b").llm.qk_norm


def _moe_counts(llm) -> tuple[float, float]:
    """(total, active) LLM parameters from the spec fields, written out independently of
    catalog.py: attention + per-layer MLP (dense, or router + experts + shared expert) +
    embedding and LM head. Norm weights are left out (under 0.01%)."""
    h, hd, moe = llm.hidden_size, llm.dim_head, llm.moe
    attn = h * hd * (2 * llm.num_heads + 2 * llm.num_kv_heads)
    dense = 3 * h * llm.intermediate_size
    moe_layers = (llm.num_layers - moe.first_dense_layers) // moe.layer_step
    dense_layers = llm.num_layers - moe_layers
    expert = 3 * h * moe.expert_intermediate_size
    shared = 3 * h * moe.shared_expert_intermediate_size
    router = h * moe.num_experts
    embed = llm.vocab_size * h * (1 if llm.tie_word_embeddings else 2)
    base = llm.num_layers * attn + dense_layers * dense + moe_layers * (router + shared) + embed
    return base + moe_layers * moe.num_experts * expert, base + moe_layers * moe.experts_per_token * expert


# Published (total, active) LLM parameters in billions, and whether the active figure counts
# the embedding and LM head. Qwen (Qwen3-235B-A22B, Qwen3-30B-A3B model cards) and Meta
# (Llama 4 Scout: 17B active, 109B total, vision included in the total) count them; Zhipu's
# GLM-4.5-Air / GLM-4.5V "106B total, 12B active" does not (GLM-4.5's 32B active only adds up
# without them).
PUBLISHED_MOE = {
    "qwen3-vl-235b-a22b": (235.0, 22.0, True),
    "qwen3-vl-30b-a3b": (30.5, 3.3, True),
    "qwen3-omni-30b-a3b": (30.5, 3.3, True),
    "llama-4-scout-17b-16e": (109.0, 17.0, True),
    "glm-4.5v": (106.0, 12.0, False),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_MOE))
def test_moe_parameter_counts_match_published(name):
    total_b, active_b, with_embed = PUBLISHED_MOE[name]
    model = catalog.get_model(name)
    llm = model.llm
    total, active = _moe_counts(llm)
    if name == "llama-4-scout-17b-16e":  # Meta's 109B is the whole checkpoint
        total += model.encoder.num_params
    if not with_embed:
        active -= llm.vocab_size * llm.hidden_size * 2
    assert total / 1e9 == pytest.approx(total_b, rel=0.025)
    assert active / 1e9 == pytest.approx(active_b, rel=0.04)
    if hasattr(llm, "active_params"):  # catalog.py's own count agrees with the one here
        assert llm.num_params == pytest.approx(_moe_counts(llm)[0], rel=1e-3)
        assert llm.active_params == pytest.approx(_moe_counts(llm)[1], rel=1e-3)


def test_dense_qwen3_vl_sizes():
    # Qwen3-32B: 32.8B (model card); Qwen3-VL-8B's LLM: Qwen3-8B-shaped, 8.2B with its untied head.
    assert catalog.get_model("qwen3-vl-32b").llm.num_params / 1e9 == pytest.approx(32.8, rel=0.02)
    assert catalog.get_model("qwen3-vl-8b").llm.num_params / 1e9 == pytest.approx(8.19, rel=0.02)


# --------------------------------------------------------------------- Qwen3-VL
def test_qwen3_vl_image_by_hand():
    rule = catalog.get_model("qwen3-vl-235b-a22b").media.image
    # 1024x768, factor 16*2 = 32: 768/32 = 24 and 1024/32 = 32 rows/columns of merged tokens,
    # 786432 px inside [65536, 16777216]: no rescale.
    item = rule.item(1024, 768)
    assert rule.resize(1024, 768) == (1024, 768)
    assert (item.num_llm_tokens, item.encoder.num_units, item.encoder.seq_len) == (24 * 32, 1, 48 * 64)
    # 100x100: round to 96x96 = 9216 px < 65536: beta = sqrt(65536/10000) = 2.56,
    # ceil(256/32)*32 = 256 per side -> 8x8 tokens.
    assert rule.resize(100, 100) == (256, 256) and rule.item(100, 100).num_llm_tokens == 64


def test_qwen3_vl_image_matches_transformers():
    transformers = pytest.importorskip("transformers")
    proc = transformers.Qwen2VLImageProcessor(patch_size=16, merge_size=2, temporal_patch_size=2,
                                              min_pixels=65536, max_pixels=16777216)
    rule = catalog.get_model("qwen3-vl-30b-a3b").media.image
    for w, h in SIZES:
        assert rule.item(w, h).encoder.seq_len == proc.get_number_of_image_patches(h, w, {}), (w, h)


def test_qwen3_vl_video_by_hand():
    rule = catalog.get_model("qwen3-vl-8b").media.video
    # 16 frames of 1280x720: round(720/32) = round(22.5) = 22 (halves to even) -> 704, 1280;
    # 16*704*1280 = 14.4M <= 25165824: kept. 8 temporal groups of 44x80 patches, 22x40 tokens.
    item = rule.item(16, 1280, 720)
    assert (item.encoder.num_units, item.encoder.seq_len, item.num_llm_tokens) == (8, 44 * 80, 8 * 22 * 40)
    # 64 frames: 64*704*1280 > 25165824, beta = sqrt(64*720*1280/25165824) = 1.5309;
    # floor(720/1.5309/32) = 14 -> 448, floor(1280/1.5309/32) = 26 -> 832.
    assert rule.resize(64, 1280, 720) == (832, 448)
    assert rule.item(64, 1280, 720).num_llm_tokens == 32 * 14 * 26
    # an odd count pads to whole temporal groups: 5 frames -> 3 groups
    assert rule.item(5, 640, 480).encoder.num_units == 3
    with pytest.raises(ValueError, match="at least 2 frames"):
        rule.item(1, 640, 480)
    # the budget covers the whole clip: twice the frames, fewer tokens per frame
    assert rule.item(128, 1280, 720).num_llm_tokens / 128 < rule.item(64, 1280, 720).num_llm_tokens / 64


def test_qwen3_vl_video_matches_transformers_smart_resize():
    try:
        from transformers.models.qwen3_vl.video_processing_qwen3_vl import smart_resize
    except ImportError:
        pytest.skip("transformers has no Qwen3-VL video processor")
    rule = Qwen3VlVideoRule(min_pixels=4096, max_pixels=25165824)
    for frames in (2, 3, 5, 16, 64, 300):
        for w, h in [(1280, 720), (640, 480), (1920, 1080), (320, 240)]:
            expect = smart_resize(frames, h, w, temporal_factor=2, factor=32, min_pixels=4096, max_pixels=25165824)
            assert rule.resize(frames, w, h) == (expect[1], expect[0]), (frames, w, h)


def test_qwen2_vl_video_rule_differs_for_qwen3():
    """Why Qwen3-VL has its own video kind: qwen_vl_utils' per-frame budget (Qwen2.5-VL) and
    Qwen3VLVideoProcessor's whole-clip bound size the same clip differently."""
    q25 = catalog.get_model("qwen2.5-vl-7b").media.video
    q3 = catalog.get_model("qwen3-vl-8b").media.video
    assert q25.kind == "qwen2_vl" and q3.kind == "qwen3_vl"
    assert q25.resize(16, 1280, 720) != q3.resize(16, 1280, 720)


# --------------------------------------------------------------------- Llama 4
@pytest.mark.parametrize("w,h,grid,units,tokens", [
    # 1024x768: scales min(r*336/768, c*336/1024); the least upscale >= 1 is 1.3125, reached by
    # 3x4 (area 12) and 4x4 (16): 3 rows x 4 columns. 12 tiles + global = 13 units;
    # 13*144 patches + 12 separators + <|image|> = 1885.
    (1024, 768, (4, 3), 13, 13 * 144 + 12 + 1),
    # 500x300: 1 row (336/300 = 1.12) by >= 2 columns (2*336/500 = 1.344): least upscale 1.12,
    # smallest such canvas 1x2. 3 units; 3*144 + 2 + 1.
    (500, 300, (2, 1), 3, 3 * 144 + 2 + 1),
    (300, 500, (1, 2), 3, 3 * 144 + 2 + 1),
    # 2000x2000: no canvas upscales; the least downscale is 4x4 (1344/2000): 16 tiles + global.
    (2000, 2000, (4, 4), 17, 17 * 144 + 16 + 1),
    # 100x100: every canvas upscales; the least is one tile, no global tile: 144 + <|image|>.
    (100, 100, (1, 1), 1, 145),
])
def test_llama4_tiles_by_hand(w, h, grid, units, tokens):
    rule = catalog.get_model("llama-4-scout-17b-16e").media.image
    item = rule.item(w, h)
    assert rule.grid(w, h) == grid
    assert (item.encoder.num_units, item.encoder.seq_len, item.num_llm_tokens) == (units, 24 * 24 + 1, tokens)


def _llama4_processor_functions():
    """``find_supported_resolutions`` and ``get_best_fit`` from transformers' Llama 4 image
    processor. Its module imports torchvision; without it, the two functions (pure torch) are
    compiled from the module's own source."""
    torch = pytest.importorskip("torch")
    name = "transformers.models.llama4.image_processing_llama4_fast"
    try:
        module = importlib.import_module(name)
        return module.find_supported_resolutions, module.get_best_fit
    except ImportError:
        pass
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        pytest.skip("transformers has no Llama 4 image processor")
    tree = ast.parse(open(spec.origin).read())
    wanted = {"get_factors", "find_supported_resolutions", "get_best_fit"}
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    if {f.name for f in funcs} != wanted:
        pytest.skip("the Llama 4 image processor's helpers moved")
    from transformers.image_utils import SizeDict
    namespace = {"torch": torch, "defaultdict": defaultdict, "SizeDict": SizeDict, "lru_cache": functools.lru_cache}
    exec(compile(ast.Module(body=funcs, type_ignores=[]), spec.origin, "exec"), namespace)
    return namespace["find_supported_resolutions"], namespace["get_best_fit"]


def test_llama4_matches_transformers():
    find_supported_resolutions, get_best_fit = _llama4_processor_functions()
    import torch
    from transformers.models.llama4.processing_llama4 import Llama4Processor

    rule = Llama4ImageRule()
    from transformers.image_utils import SizeDict

    canvases = torch.tensor(find_supported_resolutions(16, SizeDict(height=336, width=336)))
    sizes = SIZES + [(1337, 1000), (336, 336), (337, 336), (672, 335), (5000, 400), (90, 1500), (1344, 1344)]
    for w, h in sizes:
        canvas_h, canvas_w = (int(x) for x in get_best_fit((h, w), canvases))
        rows, cols = canvas_h // 336, canvas_w // 336
        assert rule.grid(w, h) == (cols, rows), (w, h)
        prompt = Llama4Processor._prompt_split_image(None, (rows, cols), 144)
        special = re.findall(r"<\|[a-z_]+\|>", prompt)
        assert "".join(special) == prompt  # the image string is special tokens only
        assert rule.item(w, h).num_llm_tokens == len(special) - 2, (w, h)  # less <|image_start|>, <|image_end|>
        assert rule.item(w, h).encoder.num_units == prompt.count("<|patch|>") // 144, (w, h)


def test_llama4_tile_count_matches_the_image_processor():
    pytest.importorskip("torchvision")
    import numpy as np
    from transformers import Llama4ImageProcessorFast

    proc = Llama4ImageProcessorFast(max_patches=16, size={"height": 336, "width": 336})
    rule = Llama4ImageRule()
    for w, h in [(1024, 768), (500, 300), (100, 100), (2000, 1000)]:
        out = proc(images=[np.zeros((h, w, 3), dtype=np.uint8)], return_tensors="pt")
        rows, cols = (int(x) for x in out["aspect_ratios"][0])
        assert rule.grid(w, h) == (cols, rows)
        assert out["pixel_values"].shape[0] == rule.item(w, h).encoder.num_units


# --------------------------------------------------------------------- GLM-4.5V
def test_glm45v_image_by_hand():
    rule = catalog.get_model("glm-4.5v").media.image
    assert isinstance(rule, QwenVlImageRule) and rule.factor == 28
    # 1024x768: round(768/28) = 27 -> 756, round(1024/28) = 37 -> 1036; 2*756*1036 = 1.57M
    # inside [12544, 9633792] (the processor's bounds, over 2 frames): 27*37 tokens.
    item = rule.item(1024, 768)
    assert (item.num_llm_tokens, item.encoder.seq_len) == (27 * 37, 54 * 74)
    # 4000x3000: 2*4004*3000 > 9633792: beta = sqrt(2*12e6/9633792) = 1.5784;
    # floor(3000/1.5784/28) = 67 -> 1876, floor(4000/1.5784/28) = 90 -> 2520.
    assert rule.resize(4000, 3000) == (2520, 1876) and rule.item(4000, 3000).num_llm_tokens == 67 * 90


def test_glm45v_image_matches_transformers():
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "Glm4vImageProcessor"):
        pytest.skip("transformers has no GLM-4V image processor")
    proc = transformers.Glm4vImageProcessor(patch_size=14, merge_size=2, temporal_patch_size=2)
    size = {"shortest_edge": 12544, "longest_edge": 9633792}
    rule = catalog.get_model("glm-4.5v").media.image
    for w, h in SIZES + [(28, 28), (29, 1000), (5000, 5000)]:
        expect = proc.get_number_of_image_patches(h, w, {"size": size})
        assert rule.item(w, h).encoder.seq_len == expect, (w, h)


# --------------------------------------------------------------------- Qwen3-Omni
def _omni_tokens_by_hand(seconds: float) -> int:
    frames = math.ceil(round(seconds * 16000) / 160)  # 100 mel frames per second
    whole, rest = divmod(frames, 100)

    def conv3(x):  # three convolutions, kernel 3, stride 2, padding 1
        for _ in range(3):
            x = (x - 1) // 2 + 1
        return x
    return whole * 13 + conv3(rest)


@pytest.mark.parametrize("seconds,tokens,units,seq_len", [
    (30.0, 390, 4, 98),  # 3000 frames = 30 chunks of 13; windows of 8*13 = 104: ceil(390/104) = 4
    (1.0, 13, 1, 13),  # 100 -> 50 -> 25 -> 13
    (2.5, 2 * 13 + 7, 1, 33),  # 50 frames left: 25 -> 13 -> 7
    (0.5, 7, 1, 7),
    (8.0, 104, 1, 104),  # exactly one window
    (8.01, 105, 2, 53),  # 801 frames: 104 + conv(1) = 1
])
def test_qwen3_omni_audio_by_hand(seconds, tokens, units, seq_len):
    item = catalog.get_model("qwen3-omni-30b-a3b").audio_item(seconds)
    assert _omni_tokens_by_hand(seconds) == tokens
    assert (item.num_llm_tokens, item.encoder.num_units, item.encoder.seq_len) == (tokens, units, seq_len)


def test_qwen3_omni_audio_matches_transformers():
    np = pytest.importorskip("numpy")
    try:
        from transformers import WhisperFeatureExtractor
        from transformers.models.qwen3_omni_moe.processing_qwen3_omni_moe import _get_feat_extract_output_lengths
    except ImportError:
        pytest.skip("transformers has no Qwen3-Omni processor")
    fe = WhisperFeatureExtractor(feature_size=128, sampling_rate=16000, hop_length=160)
    rule, truncating = Qwen3OmniAudioRule(), Qwen3OmniAudioRule(max_frames=3000)
    for seconds in (0.3, 1.0, 2.5, 7.99, 30.0, 61.7):
        audio = np.zeros(round(seconds * 16000), dtype=np.float32)
        for kwargs, r in (({}, truncating), ({"truncation": False}, rule)):
            # the processor's call (padding=True; transformers 4.57.1 leaves truncation on:
            # 30 s at most), and the same without truncation
            feats = fe(audio, sampling_rate=16000, padding=True, return_attention_mask=True, return_tensors="np",
                       **kwargs)
            frames = int(feats["attention_mask"].sum())
            assert r.mel_frames(seconds) == frames, (seconds, kwargs)
            assert r.num_tokens(seconds) == int(_get_feat_extract_output_lengths(np.array(frames))), seconds
    assert rule.num_tokens(61.7) == 61 * 13 + 9 > truncating.num_tokens(61.7) == 390  # 70 left: 35, 18, 9


# --------------------------------------------------------------------- host preprocessing
def test_new_families_are_priced_on_the_shipped_host_profile():
    from lmmsim.costmodel.host_costs import HostCosts, load_profile

    profile = load_profile(str(catalog.profiles_dir() / "host" / "cpu"))
    llama = HostCosts(profile, catalog.get_model("llama-4-scout-17b-16e"))
    assert llama._processor("image") == ("image_processor", "internvl")  # no llama4 rows: the proxy
    internvl = HostCosts(profile, catalog.get_model("internvl3.5-38b"))
    item = catalog.get_model("llama-4-scout-17b-16e").image_item(1024, 768)
    assert llama.item_s(item) == pytest.approx(internvl.item_s(internvl.model.image_item(1024, 768)), rel=1e-12)
    qwen3 = HostCosts(profile, catalog.get_model("qwen3-vl-30b-a3b"))
    assert qwen3._processor("video") == ("image_processor", "qwen3_vl")  # frame by frame
    assert HostCosts(profile, catalog.get_model("glm-4.5v"))._processor("image") == ("image_processor", "qwen2_vl")
