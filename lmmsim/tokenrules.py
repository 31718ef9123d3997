"""Token rules: how one image, video or audio clip becomes encoder work and LLM tokens.

Every model family preprocesses media its own way before the encoder sees it
(resizing, tiling, cropping, framing audio) and compresses the encoder output
before the LLM sees it (patch merging, pooling, frame stacking). A rule
reproduces that arithmetic from the family's Hugging Face processor without
touching any pixels, and returns a :class:`~lmmsim.workload.request.MediaItem`:

* ``num_llm_tokens`` -- placeholder positions the item occupies in the LLM
  prompt (the embeddings that replace the ``<image>``/``<video>``/``<audio>``
  placeholder). Wrapper tokens that are ordinary text (``<img>``,
  ``<|vision_start|>``, ``<start_of_image>`` ...) are *not* counted: they are
  a handful per item and belong to the text part of the prompt. (Llama 4's
  tile separators are counted: they grow with the tile grid.)
* ``encoder`` -- :class:`~lmmsim.workload.request.EncoderWork`:
  ``num_units`` independent attention units (crops, tiles, frame groups, 30-s
  audio windows) of ``seq_len`` encoder tokens each (patches, CLS included
  where the encoder has one, or audio frames).

Rules are pydantic models (``extra="forbid"``, frozen) so a model's YAML file
can pick a family with ``kind:`` and override any constant. Each constant's
default is the value in the family's released processor configuration. The
three unions :data:`ImageRule`, :data:`VideoRule` and :data:`AudioRule`
discriminate on ``kind``. Audio rules live in :mod:`lmmsim.tokenrules_audio` and
Llama 4's tiling in :mod:`lmmsim.tokenrules_llama4` (this module would pass 600
lines otherwise); they are re-exported here.

Arguments are validated: widths, heights and frame counts must be positive
integers, seconds a positive finite number; anything else raises
:class:`ValueError`.
"""

from __future__ import annotations

import functools
import math
from typing import Annotated, Literal, Union

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from lmmsim.tokenrules_audio import Qwen3OmniAudioRule, WhisperAudioRule
from lmmsim.tokenrules_common import _image_args, _positive_int, _Rule, _video_args
from lmmsim.tokenrules_llama4 import Llama4ImageRule
from lmmsim.workload.request import EncoderWork, MediaItem

__all__ = [
    "ImageRule",
    "VideoRule",
    "AudioRule",
    "QwenVlImageRule",
    "QwenVlVideoRule",
    "Qwen3VlVideoRule",
    "Llama4ImageRule",
    "LlavaOnevisionImageRule",
    "LlavaOnevisionVideoRule",
    "LlavaNextImageRule",
    "InternVlImageRule",
    "InternVlVideoRule",
    "Gemma3ImageRule",
    "Gemma3VideoRule",
    "WhisperAudioRule",
    "Qwen3OmniAudioRule",
]


# =============================================================== Qwen2/2.5-VL
def _smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: float, max_ratio: float):
    """Qwen's ``smart_resize``: the (height, width) the processor resizes to.

    Both sides become multiples of ``factor`` (patch x merge = 28), as close to
    the original as possible, and the area is scaled into
    ``[min_pixels, max_pixels]`` keeping the aspect ratio. Follows
    ``qwen_vl_utils.vision_process.smart_resize`` (which clamps each side to at
    least ``factor``; ``transformers``' copy is identical otherwise).
    """
    if max(height, width) / min(height, width) > max_ratio:
        raise ValueError(
            f"aspect ratio {max(height, width) / min(height, width):.1f} exceeds the "
            f"processor's limit of {max_ratio:g} ({width}x{height})"
        )
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


class _QwenVlGeometry(_Rule):
    patch_size: PositiveInt = 14
    merge_size: PositiveInt = 2  # 2x2 patches merged into one LLM token
    max_aspect_ratio: PositiveFloat = 200.0

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size


class QwenVlImageRule(_QwenVlGeometry):
    """Qwen2-VL / Qwen2.5-VL images (``Qwen2VLImageProcessor``).

    The image is resized with ``smart_resize`` to H x W, multiples of 28, with
    ``min_pixels <= H*W <= max_pixels`` (3136 and 12845056 in the released
    ``preprocessor_config.json``). The ViT sees ``(H/14)*(W/14)`` patches as one
    unit (Qwen2.5-VL's window attention over 8x8-patch windows happens inside
    that unit; its full-attention layers span the whole image); the merger
    folds 2x2 patches into one LLM token, so the LLM gets ``(H/28)*(W/28)``.

    Simplification: an image has temporal extent 1 in Qwen's 3-D patching
    (the processor duplicates it to fill the temporal patch of 2); the patch
    count is the same, so it is ignored here.
    """

    kind: Literal["qwen2_vl"] = "qwen2_vl"
    min_pixels: PositiveInt = 3136
    max_pixels: PositiveInt = 12845056

    @model_validator(mode="after")
    def _check(self):
        if self.min_pixels > self.max_pixels:
            raise ValueError(f"min_pixels ({self.min_pixels}) must not exceed max_pixels ({self.max_pixels})")
        return self

    def resize(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) after the processor's resize."""
        width, height = _image_args(width, height)
        h, w = _smart_resize(height, width, self.factor, self.min_pixels, self.max_pixels, self.max_aspect_ratio)
        return w, h

    def item(self, width: int, height: int) -> MediaItem:
        w, h = self.resize(width, height)
        patches = (h // self.patch_size) * (w // self.patch_size)
        tokens = (h // self.factor) * (w // self.factor)
        return MediaItem("image", tokens, EncoderWork(1, patches), source=("image", int(width), int(height)))


class QwenVlVideoRule(_QwenVlGeometry):
    """Qwen2-VL / Qwen2.5-VL videos (``qwen_vl_utils.fetch_video`` + ``Qwen2VLVideoProcessor``).

    ``frames`` is the number of frames already sampled from the clip (the
    fps-based sampling, 2 fps by default, is the workload's business). Frames
    are grouped in temporal patches of 2; an odd count is rounded up, as the
    processor pads by repeating the last frame.

    Each frame is resized with ``smart_resize`` under a per-frame budget, as
    ``qwen_vl_utils`` does::

        max_frame_pixels = max(min(max_pixels, total_pixels / frames * 2), 1.05 * min_pixels)

    with ``min_pixels`` = 128*28*28, ``max_pixels`` = 768*28*28 and
    ``total_pixels`` = 128000*28*28*0.9 (``VIDEO_MIN_PIXELS``,
    ``VIDEO_MAX_PIXELS``, ``VIDEO_TOTAL_PIXELS``). So videos are much smaller
    per frame than images, and long videos shrink further.

    Encoder units: one per temporal group, ``frames/2`` units of
    ``(H/14)*(W/14)`` patches. This follows the vision tower itself: its
    ``cu_seqlens`` (``repeat_interleave(h*w, t)``) restricts even the
    full-attention layers to one temporal group, and windows never cross
    groups, so attention cost is linear in the number of groups.
    LLM tokens: ``(frames/2)*(H/28)*(W/28)``.
    """

    kind: Literal["qwen2_vl"] = "qwen2_vl"
    temporal_patch_size: PositiveInt = 2
    min_pixels: PositiveInt = 100352
    max_pixels: PositiveInt = 602112
    total_pixels: PositiveFloat = 90316800.0

    @model_validator(mode="after")
    def _check(self):
        if self.min_pixels > self.max_pixels:
            raise ValueError(f"min_pixels ({self.min_pixels}) must not exceed max_pixels ({self.max_pixels})")
        return self

    def num_frames(self, frames: int) -> int:
        """Frames after padding to a whole number of temporal patches."""
        frames = _positive_int("frames", frames)
        return math.ceil(frames / self.temporal_patch_size) * self.temporal_patch_size

    def resize(self, frames: int, width: int, height: int) -> tuple[int, int]:
        """Per-frame (width, height) after the processor's resize."""
        n = self.num_frames(frames)
        width, height = _image_args(width, height)
        per_frame = self.total_pixels / n * self.temporal_patch_size
        budget = max(min(self.max_pixels, per_frame), int(self.min_pixels * 1.05))
        h, w = _smart_resize(height, width, self.factor, self.min_pixels, budget, self.max_aspect_ratio)
        return w, h

    def item(self, frames: int, width: int, height: int) -> MediaItem:
        w, h = self.resize(frames, width, height)
        groups = self.num_frames(frames) // self.temporal_patch_size
        patches = (h // self.patch_size) * (w // self.patch_size)
        tokens = groups * (h // self.factor) * (w // self.factor)
        return MediaItem(
            "video", tokens, EncoderWork(groups, patches), source=("video", int(frames), int(width), int(height))
        )


def _smart_resize_volume(frames: int, height: int, width: int, temporal: int, factor: int,
                        min_volume: int, max_volume: int, max_ratio: float) -> tuple[int, int]:
    """The ``smart_resize`` of Qwen3-VL's (and GLM-4.1V's) video processor: as
    :func:`_smart_resize`, but the bounds hold for frames x H x W, the whole clip.

    The bound is checked on ``t_bar * H * W`` with ``t_bar`` the frame count rounded to a
    multiple of ``temporal`` (Python's ``round``, halves to even), while the scale uses the
    true count. Frames below ``temporal`` or a side below ``factor`` are refused, as the
    processor refuses them.
    """
    if frames < temporal:
        raise ValueError(f"a video needs at least {temporal} frames for this processor, got {frames}")
    if height < factor or width < factor:
        raise ValueError(f"video frames must be at least {factor} px on each side, got {width}x{height}")
    if max(height, width) / min(height, width) > max_ratio:
        raise ValueError(
            f"aspect ratio {max(height, width) / min(height, width):.1f} exceeds the "
            f"processor's limit of {max_ratio:g} ({width}x{height})"
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    t_bar = round(frames / temporal) * temporal
    if t_bar * h_bar * w_bar > max_volume:
        beta = math.sqrt(frames * height * width / max_volume)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_volume:
        beta = math.sqrt(min_volume / (frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


class Qwen3VlVideoRule(_QwenVlGeometry):
    """Qwen3-VL videos (``Qwen3VLVideoProcessor``).

    Differs from :class:`QwenVlVideoRule` (``qwen_vl_utils`` for Qwen2/2.5-VL) in how
    frames are sized: one ``smart_resize`` for the whole clip with the pixel bounds on
    frames x H x W (``size.shortest_edge`` / ``size.longest_edge`` of
    ``video_preprocessor_config.json``; :func:`_smart_resize_volume`), so a clip twice as
    long gets frames about 1/sqrt(2) smaller per side, with no per-frame floor. Patches
    are 16 px, merged 2 x 2 (factor 32); temporal patches of 2 frames, an odd count padded
    by repeating the last frame. ``frames`` is the number already sampled (the
    processor's own sampling, 2 fps clamped to 4..768 frames, is the workload's business).

    Encoder units: one per temporal group of ``(H/16)*(W/16)`` patches (the vision
    tower's ``cu_seqlens`` limit attention to a group). LLM tokens:
    ``groups*(H/32)*(W/32)``. Not counted (text, like every wrapper here): the
    processor writes each group as ``<t seconds><|vision_start|>...<|vision_end|>``, a
    timestamp and two special tokens per group.
    """

    kind: Literal["qwen3_vl"] = "qwen3_vl"
    patch_size: PositiveInt = 16
    temporal_patch_size: PositiveInt = 2
    min_pixels: PositiveInt = 4096
    max_pixels: PositiveInt = 25165824

    @model_validator(mode="after")
    def _check(self):
        if self.min_pixels > self.max_pixels:
            raise ValueError(f"min_pixels ({self.min_pixels}) must not exceed max_pixels ({self.max_pixels})")
        return self

    def resize(self, frames: int, width: int, height: int) -> tuple[int, int]:
        """Per-frame (width, height) after the processor's resize."""
        frames, width, height = _video_args(frames, width, height)
        h, w = _smart_resize_volume(frames, height, width, self.temporal_patch_size, self.factor,
                                    self.min_pixels, self.max_pixels, self.max_aspect_ratio)
        return w, h

    def item(self, frames: int, width: int, height: int) -> MediaItem:
        w, h = self.resize(frames, width, height)
        groups = math.ceil(int(frames) / self.temporal_patch_size)
        patches = (h // self.patch_size) * (w // self.patch_size)
        tokens = groups * (h // self.factor) * (w // self.factor)
        return MediaItem(
            "video", tokens, EncoderWork(groups, patches), source=("video", int(frames), int(width), int(height))
        )


# ================================================================ LLaVA anyres
def _select_best_resolution(height: int, width: int, candidates) -> tuple[int, int]:
    """LLaVA-NeXT's ``select_best_resolution``: the (height, width) canvas that
    keeps the most of the image's resolution, ties broken by the least padding."""
    best, best_effective, best_waste = None, -1, math.inf
    for cand_h, cand_w in candidates:
        scale = min(cand_w / width, cand_h / height)
        effective = min(int(width * scale) * int(height * scale), width * height)
        waste = cand_h * cand_w - effective
        if effective > best_effective or (effective == best_effective and waste < best_waste):
            best, best_effective, best_waste = (cand_h, cand_w), effective, waste
    return best


class _AnyresImageRule(_Rule):
    """Shared LLaVA "anyres" arithmetic (LLaVA-NeXT and LLaVA-OneVision).

    The image is fitted into the best grid canvas (``_select_best_resolution``),
    padded and cut into ``crop_size`` crops; a downscaled copy of the whole
    image (the base) is added. The encoder runs once per crop plus once for the
    base. The LLM gets the base's ``side^2`` features, plus the grid's features
    with the padding rows/columns removed ("unpad") and one newline token per
    feature row (HF ``_get_number_of_features`` / ``_get_unpadded_features``).
    With ``max_llm_crops`` set (OneVision's ``anyres_max_9``), grid features
    larger than about that many crops are bilinearly downsampled.
    """

    crop_size: PositiveInt
    patches_per_side: PositiveInt  # feature map side per crop (crop_size // patch)
    encoder_seq_len: PositiveInt  # encoder tokens per crop (CLS included if any)
    max_llm_crops: PositiveInt | None = None

    def _pinpoints(self) -> list[tuple[int, int]]:
        raise NotImplementedError

    def grid(self, width: int, height: int) -> tuple[int, int]:
        """(columns, rows) of crops the image is cut into."""
        width, height = _image_args(width, height)
        best_h, best_w = _select_best_resolution(height, width, self._pinpoints())
        return best_w // self.crop_size, best_h // self.crop_size

    def _grid_features(self, width: int, height: int, cols: int, rows: int) -> tuple[int, int]:
        """(unpadded features, newline tokens) of the crop grid."""
        side = self.patches_per_side
        cur_h, cur_w = side * rows, side * cols
        if width / height > cur_w / cur_h:
            new_h = int(round(height * (cur_w / width), 7))
            cur_h -= 2 * ((cur_h - new_h) // 2)
        else:
            new_w = int(round(width * (cur_h / height), 7))
            cur_w -= 2 * ((cur_w - new_w) // 2)
        features, newlines = cur_h * cur_w, cur_h
        if self.max_llm_crops is not None:
            ratio = math.sqrt(cur_h * cur_w / (self.max_llm_crops * side**2))
            if ratio > 1.1:
                features = int(cur_h // ratio) * int(cur_w // ratio)
                newlines = int(cur_h // ratio)
        return features, newlines

    def item(self, width: int, height: int) -> MediaItem:
        cols, rows = self.grid(width, height)
        features, newlines = self._grid_features(int(width), int(height), cols, rows)
        tokens = self.patches_per_side**2 + features + newlines
        work = EncoderWork(cols * rows + 1, self.encoder_seq_len)
        return MediaItem("image", tokens, work, source=("image", int(width), int(height)))


class LlavaOnevisionImageRule(_AnyresImageRule):
    """LLaVA-OneVision images (``LlavaOnevisionProcessor``, ``anyres_max_9``).

    SigLIP-so400m/14 at 384 px: 27x27 = 729 patches per crop, no CLS token.
    The grid canvases are every (i*384, j*384) with 1 <= i, j <= ``max_grid``
    (6, the released ``image_grid_pinpoints``), so the encoder may see up to
    36 crops + the base. The LLM then gets 729 (base) + the unpadded grid
    features, bilinearly downsampled to about 9 crops' worth (at most ~7290
    in total) when the grid is larger + one newline per feature row. A
    1024x1024 image: 3x3 grid, 10 encoder units, 729 + 6561 + 81 = 7371 tokens.

    Note: the brief "at most 9 crops" applies to the LLM side only. The
    encoder work counts every crop of the chosen grid, as HF and vLLM run the
    vision tower on all of them before pooling.
    """

    kind: Literal["llava_onevision"] = "llava_onevision"
    crop_size: PositiveInt = 384
    patches_per_side: PositiveInt = 27
    encoder_seq_len: PositiveInt = 729
    max_grid: PositiveInt = 6
    max_llm_crops: PositiveInt | None = 9

    def _pinpoints(self) -> list[tuple[int, int]]:
        c = self.crop_size
        return [(i * c, j * c) for i in range(1, self.max_grid + 1) for j in range(1, self.max_grid + 1)]


class LlavaNextImageRule(_AnyresImageRule):
    """LLaVA-NeXT / LLaVA-v1.6 images (``LlavaNextProcessor``).

    CLIP ViT-L/14 at 336 px: 24x24 = 576 features per crop; the encoder
    sequence is 577 (CLS included, dropped by the "default" feature select).
    The grid canvases are the released ``image_grid_pinpoints`` (height, width):
    336x672, 672x336, 672x672, 1008x336, 336x1008, so at most 4 crops + base =
    5 encoder units. LLM tokens: 576 (base) + unpadded grid features + one
    newline per feature row, no pooling. The maximum, for an image whose aspect
    ratio matches 2x2, is 576 + 48*48 + 48 = 2928 -- the often-quoted
    "5 x 576 = 2880" leaves out the 48 newline tokens; off-ratio images lose
    padding rows and get fewer.
    """

    kind: Literal["llava_next"] = "llava_next"
    crop_size: PositiveInt = 336
    patches_per_side: PositiveInt = 24
    encoder_seq_len: PositiveInt = 577
    grid_pinpoints: tuple[tuple[PositiveInt, PositiveInt], ...] = (
        (336, 672),
        (672, 336),
        (672, 672),
        (1008, 336),
        (336, 1008),
    )
    max_llm_crops: PositiveInt | None = None

    @model_validator(mode="after")
    def _check(self):
        bad = [p for p in self.grid_pinpoints if p[0] % self.crop_size or p[1] % self.crop_size]
        if not self.grid_pinpoints or bad:
            raise ValueError(f"grid_pinpoints must be non-empty multiples of crop_size {self.crop_size}: {bad}")
        return self

    def _pinpoints(self) -> list[tuple[int, int]]:
        return list(self.grid_pinpoints)


class LlavaOnevisionVideoRule(_Rule):
    """LLaVA-OneVision videos (``LlavaOnevisionProcessor``, video branch).

    Each sampled frame is resized to one 384x384 crop (729 SigLIP patches, one
    encoder unit per frame); the 27x27 feature map is 2x2-pooled to
    ceil(27/2)^2 = 196 tokens, and one newline token closes the video:
    ``frames*196 + 1`` LLM tokens.
    """

    kind: Literal["llava_onevision"] = "llava_onevision"
    encoder_seq_len: PositiveInt = 729
    patches_per_side: PositiveInt = 27
    pool_stride: PositiveInt = 2
    newline_tokens: int = Field(default=1, ge=0)

    def item(self, frames: int, width: int, height: int) -> MediaItem:
        frames, width, height = _video_args(frames, width, height)
        pooled = math.ceil(self.patches_per_side / self.pool_stride)
        tokens = frames * pooled * pooled + self.newline_tokens
        work = EncoderWork(frames, self.encoder_seq_len)
        return MediaItem("video", tokens, work, source=("video", frames, width, height))


# ====================================================================== InternVL
@functools.lru_cache(maxsize=16)
def _tile_grids(min_tiles: int, max_tiles: int) -> tuple[tuple[int, int], ...]:
    """Candidate (columns, rows) grids in InternVL's order.

    Built exactly as ``dynamic_preprocess`` does (a set, then a stable sort by
    tile count): grids of equal count, e.g. 1x2 and 2x1, can tie on aspect
    ratio (at 1.25) and then their order decides. CPython's iteration order
    for a set of small-int tuples is deterministic, so this matches.
    """
    grids = {
        (i, j)
        for n in range(min_tiles, max_tiles + 1)
        for i in range(1, n + 1)
        for j in range(1, n + 1)
        if min_tiles <= i * j <= max_tiles
    }
    return tuple(sorted(grids, key=lambda r: r[0] * r[1]))


def _closest_tile_grid(width: int, height: int, tile_size: int, min_tiles: int, max_tiles: int) -> tuple[int, int]:
    """InternVL's ``find_closest_aspect_ratio``: the (columns, rows) grid whose
    aspect ratio is nearest the image's; on a tie the larger grid wins only if
    the image has more than half its pixels."""
    aspect = width / height
    best, best_diff = (1, 1), math.inf
    for cols, rows in _tile_grids(min_tiles, max_tiles):
        diff = abs(aspect - cols / rows)
        if diff < best_diff:
            best, best_diff = (cols, rows), diff
        elif diff == best_diff and width * height > 0.5 * tile_size * tile_size * cols * rows:
            best = (cols, rows)
    return best


class InternVlImageRule(_Rule):
    """InternVL 2.5 / 3 / 3.5 images (``dynamic_preprocess`` in the model repos).

    The image is resized to the tile grid (columns x rows of 448 px tiles,
    ``min_tiles <= columns*rows <= max_tiles`` = 1..12) whose aspect ratio is
    closest to the image's, and cut into those tiles; when there is more than
    one tile a 448x448 thumbnail of the whole image is added. Each tile is
    one InternViT unit of 32x32 = 1024 patches + CLS = 1025 tokens; pixel
    shuffle (downsample 0.5) turns it into 256 LLM tokens. A 448x448 image:
    1 tile, no thumbnail, 256 tokens; 1024x1024: 3x3 + thumbnail, 2560.
    """

    kind: Literal["internvl"] = "internvl"
    tile_size: PositiveInt = 448
    min_tiles: PositiveInt = 1
    max_tiles: PositiveInt = 12
    use_thumbnail: bool = True
    encoder_seq_len: PositiveInt = 1025
    tokens_per_tile: PositiveInt = 256

    @model_validator(mode="after")
    def _check(self):
        if self.min_tiles > self.max_tiles:
            raise ValueError(f"min_tiles ({self.min_tiles}) must not exceed max_tiles ({self.max_tiles})")
        return self

    def num_tiles(self, width: int, height: int) -> int:
        """Tiles the encoder runs on, thumbnail included."""
        width, height = _image_args(width, height)
        cols, rows = _closest_tile_grid(width, height, self.tile_size, self.min_tiles, self.max_tiles)
        tiles = cols * rows
        return tiles + 1 if self.use_thumbnail and tiles > 1 else tiles

    def item(self, width: int, height: int) -> MediaItem:
        tiles = self.num_tiles(width, height)
        work = EncoderWork(tiles, self.encoder_seq_len)
        return MediaItem("image", tiles * self.tokens_per_tile, work, source=("image", int(width), int(height)))


class InternVlVideoRule(_Rule):
    """InternVL videos (``load_video`` in the model repos): every sampled frame
    becomes a single 448x448 tile (``max_num=1``, no thumbnail), so one encoder
    unit of 1025 tokens and 256 LLM tokens per frame."""

    kind: Literal["internvl"] = "internvl"
    encoder_seq_len: PositiveInt = 1025
    tokens_per_frame: PositiveInt = 256

    def item(self, frames: int, width: int, height: int) -> MediaItem:
        frames, width, height = _video_args(frames, width, height)
        work = EncoderWork(frames, self.encoder_seq_len)
        return MediaItem("video", frames * self.tokens_per_frame, work, source=("video", frames, width, height))


# ======================================================================= Gemma-3
class Gemma3ImageRule(_Rule):
    """Gemma-3 images (``Gemma3Processor`` with pan & scan off, the default).

    Every image is resized to 896x896 regardless of its size: SigLIP sees
    64x64 = 4096 patches as one unit, and the projector's 4x4 average pooling
    leaves a fixed 256 LLM tokens (``mm_tokens_per_image``). With pan & scan
    on, extra 896 crops would each add one unit and 256 tokens; not modelled.
    """

    kind: Literal["gemma3"] = "gemma3"
    encoder_seq_len: PositiveInt = 4096
    tokens_per_image: PositiveInt = 256

    def item(self, width: int, height: int) -> MediaItem:
        width, height = _image_args(width, height)
        work = EncoderWork(1, self.encoder_seq_len)
        return MediaItem("image", self.tokens_per_image, work, source=("image", width, height))


class Gemma3VideoRule(_Rule):
    """Gemma-3 has no native video input; serving stacks pass a video as its
    sampled frames, each an image (``Gemma3ImageRule``): one 4096-patch unit
    and 256 LLM tokens per frame."""

    kind: Literal["gemma3"] = "gemma3"
    encoder_seq_len: PositiveInt = 4096
    tokens_per_frame: PositiveInt = 256

    def item(self, frames: int, width: int, height: int) -> MediaItem:
        frames, width, height = _video_args(frames, width, height)
        work = EncoderWork(frames, self.encoder_seq_len)
        return MediaItem("video", frames * self.tokens_per_frame, work, source=("video", frames, width, height))


# ========================================================================= unions
ImageRule = Annotated[
    Union[
        QwenVlImageRule, LlavaOnevisionImageRule, LlavaNextImageRule, InternVlImageRule, Gemma3ImageRule,
        Llama4ImageRule,
    ],
    Field(discriminator="kind"),
]
VideoRule = Annotated[
    Union[QwenVlVideoRule, Qwen3VlVideoRule, LlavaOnevisionVideoRule, InternVlVideoRule, Gemma3VideoRule],
    Field(discriminator="kind"),
]
AudioRule = Annotated[Union[WhisperAudioRule, Qwen3OmniAudioRule], Field(discriminator="kind")]
