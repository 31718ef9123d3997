"""Llama 4 image token rule: best-fit tile canvas, a global tile, pixel-shuffled tiles.

Re-exported by :mod:`lmmsim.tokenrules`, whose ``ImageRule`` union picks it with
``kind: llama4``.
"""

from __future__ import annotations

import functools
from typing import Literal

import numpy as np
from pydantic import PositiveFloat, PositiveInt

from lmmsim.tokenrules_common import _image_args, _Rule
from lmmsim.workload.request import EncoderWork, MediaItem


@functools.lru_cache(maxsize=8)
def _canvases(max_tiles: int) -> tuple[tuple[int, int], ...]:
    """Candidate (rows, columns) tile grids in the processor's order.

    As ``find_supported_resolutions`` builds them: for each tile count from ``max_tiles``
    down to 1, every factorisation (rows ascending), grouped by aspect ratio in the order a
    ratio first appears. The order decides ties between canvases of equal scale and area.
    """
    by_ratio: dict[float, list[tuple[int, int]]] = {}
    for count in range(max_tiles, 0, -1):
        for rows in range(1, count + 1):
            if count % rows == 0:
                by_ratio.setdefault(rows / (count // rows), []).append((rows, count // rows))
    return tuple(grid for group in by_ratio.values() for grid in group)


def _best_grid(width: int, height: int, tile: int, max_tiles: int) -> tuple[int, int]:
    """``get_best_fit``: the (rows, columns) canvas that fits the image without distortion
    with the least upscaling (the smallest scale >= 1), else the least downscaling; among
    canvases of that scale, the smallest (the first such in :func:`_canvases`' order).

    Scales are float32 quotients, as the processor divides int64 tensors by the image's
    size in torch's default dtype; two canvases can then tie where float64 would not.
    """
    grids = _canvases(max_tiles)
    f32 = np.float32
    scales = [min(f32(r * tile) / f32(height), f32(c * tile) / f32(width)) for r, c in grids]
    up = [s for s in scales if s >= 1]
    chosen = min(up) if up else max(scales)
    best = None
    for (r, c), s in zip(grids, scales):
        if s == chosen and (best is None or r * c < best[0] * best[1]):
            best = (r, c)
    return best


class Llama4ImageRule(_Rule):
    """Llama 4 images (``Llama4ImageProcessorFast`` + ``Llama4Processor``).

    The image is fitted, without distortion, into the best canvas of ``rows x cols``
    tiles of ``tile_size`` = 336 px with ``rows*cols <= max_tiles`` = 16 (``max_patches``;
    :func:`_best_grid`), padded and cut into those tiles; when there is more than one
    tile, the whole image resized to one 336 x 336 tile is added (the global tile). Each
    tile is one vision-encoder unit of ``(336/14)^2 = 576`` patches + a CLS token = 577;
    pixel shuffle (ratio 0.5) folds 2 x 2 patches into one token, ``576 // 4 = 144`` per
    tile (the processor's ``num_patches_per_chunk``).

    LLM tokens, counted as ``_prompt_split_image`` writes the image: 144 ``<|patch|>``
    per tile and per global tile, a ``<|tile_x_separator|>`` after every tile of a row but
    its last and a ``<|tile_y_separator|>`` after every row (``rows*cols`` separators in
    all), and one ``<|image|>`` before the global tile's patches:
    ``(rows*cols + 1)*144 + rows*cols + 1`` with several tiles, ``144 + 1`` with one. The
    separators are counted (they grow with the grid, up to 17 tokens) although they are
    ordinary special tokens; ``<|image_start|>`` and ``<|image_end|>`` are not, like every
    family's wrapper tokens here, so the prompt has 2 more tokens than ``num_llm_tokens``.
    A 1024 x 768 image: a 3 x 4 canvas, 12 tiles + global = 13 units, 13*144 + 13 = 1885.
    """

    kind: Literal["llama4"] = "llama4"
    tile_size: PositiveInt = 336
    max_tiles: PositiveInt = 16
    patch_size: PositiveInt = 14
    pixel_shuffle_ratio: PositiveFloat = 0.5
    class_token: bool = True

    @property
    def tokens_per_tile(self) -> int:
        side = self.tile_size // self.patch_size
        return side * side // int(round(1.0 / self.pixel_shuffle_ratio**2))

    @property
    def encoder_seq_len(self) -> int:
        return (self.tile_size // self.patch_size) ** 2 + int(self.class_token)

    def grid(self, width: int, height: int) -> tuple[int, int]:
        """(columns, rows) of tiles the image is cut into (the global tile not included)."""
        width, height = _image_args(width, height)
        rows, cols = _best_grid(width, height, self.tile_size, self.max_tiles)
        return cols, rows

    def item(self, width: int, height: int) -> MediaItem:
        cols, rows = self.grid(width, height)
        tiles = cols * rows
        if tiles > 1:
            units = tiles + 1  # + the global tile
            tokens = units * self.tokens_per_tile + tiles + 1  # separators + <|image|>
        else:
            units, tokens = 1, self.tokens_per_tile + 1
        work = EncoderWork(units, self.encoder_seq_len)
        return MediaItem("image", tokens, work, source=("image", int(width), int(height)))
