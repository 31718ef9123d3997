"""Token rules against counts worked out by hand from each family's processor."""

from __future__ import annotations

import math

import pytest
from pydantic import TypeAdapter, ValidationError

from lmmsim import tokenrules as tr
from lmmsim.workload.request import EncoderWork, MediaItem

IMAGE_RULES = [
    tr.QwenVlImageRule(),
    tr.LlavaOnevisionImageRule(),
    tr.LlavaNextImageRule(),
    tr.InternVlImageRule(),
    tr.Gemma3ImageRule(),
]
VIDEO_RULES = [tr.QwenVlVideoRule(), tr.LlavaOnevisionVideoRule(), tr.InternVlVideoRule(), tr.Gemma3VideoRule()]


# ================================================================== Qwen2/2.5-VL
class TestQwenImage:
    rule = tr.QwenVlImageRule()

    def test_rounds_to_multiples_of_28(self):
        # 1024/28 = 36.57 -> 37 -> 1036 px; 74x74 patches, 37x37 tokens.
        item = self.rule.item(1024, 1024)
        assert item == MediaItem("image", 1369, EncoderWork(1, 74 * 74), source=("image", 1024, 1024))

    def test_non_square(self):
        # 1280x720 -> 1288 x 728 (46 x 26 merged tokens) = 937,664 px, within limits.
        assert self.rule.resize(1280, 720) == (1288, 728)
        assert self.rule.item(1280, 720).num_llm_tokens == 46 * 26

    def test_max_pixels(self):
        # 10000x5000 rounds to 9996x5012 = 50.1 Mpx > 12,845,056, so it scales by
        # beta = sqrt(5e7 / 12845056) = 1.973: floor(10000/1.973/28) = 181,
        # floor(5000/1.973/28) = 90 -> 5068 x 2520 px.
        w, h = self.rule.resize(10000, 5000)
        assert (w, h) == (5068, 2520)
        assert w * h <= self.rule.max_pixels
        item = self.rule.item(10000, 5000)
        assert item.num_llm_tokens == 181 * 90
        assert item.encoder == EncoderWork(1, 362 * 180)

    def test_min_pixels(self):
        # 40x30 rounds to 28x28 = 784 < 3136, so it scales up by
        # beta = sqrt(3136/1200) = 1.617: ceil(40*1.617/28) = 3, ceil(30*1.617/28) = 2.
        assert self.rule.resize(40, 30) == (84, 56)
        assert self.rule.item(40, 30).num_llm_tokens == 6

    def test_extreme_aspect_ratio_rejected(self):
        with pytest.raises(ValueError, match="aspect ratio"):
            self.rule.item(30000, 100)

    def test_yaml_overrides(self):
        small = TypeAdapter(tr.ImageRule).validate_python({"kind": "qwen2_vl", "max_pixels": 1003520})
        # 1280 * 28 * 28: a 1024x1024 image now needs scaling down to 980x980.
        assert small.resize(1024, 1024) == (980, 980)
        assert small.item(1024, 1024).num_llm_tokens == 35 * 35
        with pytest.raises(ValidationError):
            tr.QwenVlImageRule(min_pixels=10, max_pixels=5)


class TestQwenVideo:
    rule = tr.QwenVlVideoRule()

    def test_per_frame_budget_and_groups(self):
        # 16 frames of 1280x720: per-frame budget min(602112, 90316800/16*2) = 602112.
        # 1288x728 is too big; beta = sqrt(921600/602112) = 1.237 -> 1008 x 560 px.
        assert self.rule.resize(16, 1280, 720) == (1008, 560)
        item = self.rule.item(16, 1280, 720)
        assert item.encoder == EncoderWork(8, 72 * 40)  # 8 temporal groups of (H/14)(W/14) patches
        assert item.num_llm_tokens == 8 * 36 * 20
        assert item.source == ("video", 16, 1280, 720)

    def test_odd_frames_round_up(self):
        assert self.rule.num_frames(15) == 16
        assert self.rule.num_frames(1) == 2
        padded = MediaItem("video", 5760, EncoderWork(8, 2880), source=("video", 15, 1280, 720))
        assert self.rule.item(15, 1280, 720) == padded

    def test_long_video_shrinks_frames(self):
        # 600 frames: budget max(min(602112, 90316800/600*2), 105369) = 301056 px per frame.
        w, h = self.rule.resize(600, 1280, 720)
        assert w * h <= 301056
        assert w % 28 == 0 and h % 28 == 0

    def test_tiny_frames_hit_min_pixels(self):
        w, h = self.rule.resize(4, 64, 64)
        assert w * h >= self.rule.min_pixels


# ================================================================ LLaVA-OneVision
class TestLlavaOnevision:
    rule = tr.LlavaOnevisionImageRule()

    def test_single_crop(self):
        # 384x384 -> 1x1 grid: base 729 + grid 27*27 + 27 newlines; 2 encoder units.
        item = self.rule.item(384, 384)
        assert item.num_llm_tokens == 729 + 729 + 27
        assert item.encoder == EncoderWork(2, 729)

    def test_3x3_grid(self):
        # 1024x1024 fits best on 1152x1152 (3x3): 81x81 features, ratio 1 -> no pooling.
        assert self.rule.grid(1024, 1024) == (3, 3)
        item = self.rule.item(1024, 1024)
        assert item.num_llm_tokens == 729 + 81 * 81 + 81
        assert item.encoder == EncoderWork(10, 729)

    def test_large_grid_is_pooled_to_about_nine_crops(self):
        # 2304x2304 -> 6x6 grid (37 encoder units); 162x162 features, ratio 2 -> 81x81.
        item = self.rule.item(2304, 2304)
        assert item.encoder == EncoderWork(37, 729)
        assert item.num_llm_tokens == 729 + 81 * 81 + 81

    def test_unpadding(self):
        # 1920x1080 -> 1152 (h) x 1920 (w) canvas: 5x3 grid, 81x135 features; the
        # image fills 135 x int(1080*135/1920)=75 rows, padding 3 each side -> 75x135;
        # ratio sqrt(10125/6561) = 1.242 -> 60 x 108.
        assert self.rule.grid(1920, 1080) == (5, 3)
        item = self.rule.item(1920, 1080)
        assert item.encoder.num_units == 16
        assert item.num_llm_tokens == 729 + 60 * 108 + 60

    def test_llm_tokens_bounded(self):
        for w, h in [(100, 5000), (5000, 100), (4000, 3000), (8000, 8000), (640, 480)]:
            assert self.rule.item(w, h).num_llm_tokens <= 729 + int(9 * 729 * 1.1**2) + 100

    def test_video(self):
        # 2x2 pooling of 27x27 -> 14x14 = 196 per frame, one newline per video.
        item = tr.LlavaOnevisionVideoRule().item(32, 1920, 1080)
        assert item.num_llm_tokens == 32 * 196 + 1
        assert item.encoder == EncoderWork(32, 729)


# ================================================================= LLaVA-NeXT
class TestLlavaNext:
    rule = tr.LlavaNextImageRule()

    def test_maximum(self):
        # 2x2 tiles + base: 576 + 48*48 + 48 newlines = 2928 (5 x 576 = 2880 + 48).
        item = self.rule.item(672, 672)
        assert item.num_llm_tokens == 2928
        assert item.encoder == EncoderWork(5, 577)

    def test_never_above_maximum(self):
        for w, h in [(1024, 1024), (4000, 3000), (300, 2000), (2000, 300), (336, 336), (1920, 1080)]:
            item = self.rule.item(w, h)
            assert item.num_llm_tokens <= 2928
            assert item.encoder.num_units <= 5

    def test_small_image_unpads(self):
        # 336x336 -> 336x672 canvas (2 tiles, least waste); the square image
        # covers 24 of the 48 feature columns: 576 + 24*24 + 24.
        item = self.rule.item(336, 336)
        assert item.num_llm_tokens == 576 + 576 + 24
        assert item.encoder == EncoderWork(3, 577)

    def test_pinpoints_must_be_multiples_of_crop(self):
        with pytest.raises(ValidationError):
            tr.LlavaNextImageRule(grid_pinpoints=((336, 500),))


# ==================================================================== InternVL
class TestInternVl:
    rule = tr.InternVlImageRule()

    def test_one_tile_no_thumbnail(self):
        item = self.rule.item(448, 448)
        assert item == MediaItem("image", 256, EncoderWork(1, 1025), source=("image", 448, 448))

    def test_square_tie_breaks_to_larger_grid(self):
        # 1024x1024 ties 1x1, 2x2, 3x3 on aspect ratio; 3x3 wins because the image
        # has more than half of 9 tiles' pixels (1048576 > 0.5*9*448^2); + thumbnail.
        assert self.rule.num_tiles(1024, 1024) == 10
        assert self.rule.item(1024, 1024).num_llm_tokens == 2560

    def test_wide_image(self):
        # 1920x1080 (1.78): 2x1 and 4x2 tie at 2.0, 4x2 wins -> 8 tiles + thumbnail.
        assert self.rule.num_tiles(1920, 1080) == 9
        # 4:3 matches 4x3 = 12 tiles exactly.
        assert self.rule.item(800, 600).num_llm_tokens == 13 * 256

    def test_tile_limit(self):
        for w, h in [(10000, 100), (100, 10000), (8000, 8000), (3000, 2000)]:
            assert self.rule.num_tiles(w, h) <= 13

    def test_video(self):
        item = tr.InternVlVideoRule().item(16, 1920, 1080)
        assert item.num_llm_tokens == 16 * 256
        assert item.encoder == EncoderWork(16, 1025)


# ====================================================================== Gemma-3
def test_gemma_always_256():
    rule = tr.Gemma3ImageRule()
    for w, h in [(1, 1), (896, 896), (4000, 300), (8000, 8000)]:
        item = rule.item(w, h)
        assert item.num_llm_tokens == 256
        assert item.encoder == EncoderWork(1, 4096)
    video = tr.Gemma3VideoRule().item(10, 640, 480)
    assert video.num_llm_tokens == 2560
    assert video.encoder == EncoderWork(10, 4096)


# ===================================================================== Whisper
class TestWhisper:
    rule = tr.WhisperAudioRule()

    def test_thirty_seconds(self):
        assert self.rule.item(30) == MediaItem("audio", 188, EncoderWork(1, 1500), source=("audio", 30.0))

    def test_short_clip_is_not_padded(self):
        item = self.rule.item(10)
        assert item.encoder == EncoderWork(1, 500)
        assert item.num_llm_tokens == math.ceil(500 / 8)

    def test_long_clip_uses_padded_windows(self):
        item = self.rule.item(45)  # 2250 frames -> 2 windows of 1500 (last padded)
        assert item.encoder == EncoderWork(2, 1500)
        assert item.num_llm_tokens == math.ceil(2250 / 8)

    def test_float_seconds(self):
        assert self.rule.num_frames(0.1) == 5
        assert self.rule.num_frames(0.001) == 1
        assert self.rule.item(2.5).num_llm_tokens == math.ceil(125 / 8)

    def test_constants_are_fields(self):
        rule = TypeAdapter(tr.AudioRule).validate_python({"kind": "whisper", "stack_factor": 4})
        assert rule.item(30).num_llm_tokens == 375


# ================================================================== validation
@pytest.mark.parametrize("rule", IMAGE_RULES, ids=lambda r: type(r).__name__)
@pytest.mark.parametrize("width,height", [(0, 100), (100, -1), (10.5, 100), (100, True), ("100", 100)])
def test_image_rejects_bad_sizes(rule, width, height):
    with pytest.raises(ValueError):
        rule.item(width, height)


@pytest.mark.parametrize("rule", VIDEO_RULES, ids=lambda r: type(r).__name__)
@pytest.mark.parametrize("frames,width,height", [(0, 640, 480), (-3, 640, 480), (8, 0, 480), (2.5, 640, 480)])
def test_video_rejects_bad_sizes(rule, frames, width, height):
    with pytest.raises(ValueError):
        rule.item(frames, width, height)


@pytest.mark.parametrize("seconds", [0, -1.0, float("nan"), float("inf"), None])
def test_audio_rejects_bad_seconds(seconds):
    with pytest.raises(ValueError):
        tr.WhisperAudioRule().item(seconds)


def test_integral_floats_are_accepted():
    assert tr.Gemma3ImageRule().item(640.0, 480.0).source == ("image", 640, 480)


# =================================================================== the unions
def test_unions_discriminate_on_kind():
    image = TypeAdapter(tr.ImageRule)
    assert isinstance(image.validate_python({"kind": "internvl"}), tr.InternVlImageRule)
    assert isinstance(image.validate_python({"kind": "llava_next"}), tr.LlavaNextImageRule)
    video = TypeAdapter(tr.VideoRule)
    assert isinstance(video.validate_python({"kind": "llava_onevision"}), tr.LlavaOnevisionVideoRule)
    with pytest.raises(ValidationError):
        image.validate_python({"kind": "whisper"})
    with pytest.raises(ValidationError):
        image.validate_python({"kind": "gemma3", "tokens_per_frame": 5})  # extra field
    with pytest.raises(ValidationError):
        TypeAdapter(tr.AudioRule).validate_python({"kind": "qwen2_vl"})


def test_rules_are_frozen():
    rule = tr.Gemma3ImageRule()
    with pytest.raises(ValidationError):
        rule.tokens_per_image = 1
