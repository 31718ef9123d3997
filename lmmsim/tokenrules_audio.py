"""Audio token rules: how a clip of ``s`` seconds becomes audio-encoder work and LLM tokens.

Two families: Whisper encoders with frame stacking (Ultravox) and Qwen3-Omni's audio encoder
(three stride-2 convolutions per 1-s chunk, attention in 8-s windows). Re-exported by
:mod:`lmmsim.tokenrules`, whose ``AudioRule`` union discriminates them on ``kind``.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import PositiveFloat, PositiveInt

from lmmsim.tokenrules_common import _positive_seconds, _Rule
from lmmsim.workload.request import EncoderWork, MediaItem


class WhisperAudioRule(_Rule):
    """Audio through a Whisper encoder with frame stacking (Ultravox, ``UltravoxProcessor``).

    16 kHz audio gives 100 log-mel frames per second (hop 160); Whisper's
    stride-2 convolution halves that to 50 encoder frames per second, so a clip
    of ``s`` seconds has ``frames = round(50*s)`` (at least 1). The encoder
    takes at most 30 s (1500 frames) at a time: longer clips are split into
    ``ceil(frames/1500)`` windows and the last one is zero-padded to a full
    window, so ``seq_len`` is 1500 then; a single short clip is not padded
    (Ultravox's encoder accepts shorter inputs) and ``seq_len = frames``.
    The projector stacks ``stack_factor`` = 8 consecutive frames per LLM token:
    ``ceil(frames/8)`` tokens (30 s -> 1500 frames -> 188 tokens).
    """

    kind: Literal["whisper"] = "whisper"
    frames_per_second: PositiveFloat = 50.0
    window_frames: PositiveInt = 1500
    stack_factor: PositiveInt = 8

    def num_frames(self, seconds: float) -> int:
        seconds = _positive_seconds(seconds)
        # The small offset keeps e.g. 0.1 s * 50 = 5.000000000000001 at 5.
        return max(1, int(round(seconds * self.frames_per_second + 1e-4)))

    def item(self, seconds: float) -> MediaItem:
        frames = self.num_frames(seconds)
        windows = math.ceil(frames / self.window_frames)
        seq_len = self.window_frames if windows > 1 else frames
        tokens = math.ceil(frames / self.stack_factor)
        return MediaItem("audio", tokens, EncoderWork(windows, seq_len), source=("audio", float(seconds)))


class Qwen3OmniAudioRule(_Rule):
    """Qwen3-Omni audio (``Qwen3OmniMoeProcessor``: Whisper log-mel features, then the audio
    encoder's convolutional downsampling).

    Mel frames: 16 kHz audio, hop 160, so ``F = ceil(samples / 160)`` frames for
    ``samples = round(16000 * s)`` (the count the feature extractor's attention mask gives,
    which is what the processor sizes the prompt by). The encoder cuts the frames into
    chunks of ``chunk_frames`` = 100 (1 s; ``n_window`` 50 x 2) and runs three convolutions
    of stride 2 on each, so a chunk of ``r`` frames yields ``c(r)`` with
    ``c(r) = ((((r - 1)//2 + 1) - 1)//2 + 1 - 1)//2 + 1``: 13 per full second (about
    12.5 tokens/s), and ``c(F mod 100)`` for the last, partial chunk. Those are the LLM
    tokens (the processor's ``_get_feat_extract_output_lengths``; one placeholder per
    encoder output, no further merging).

    Encoder units: the transformer layers attend within windows of
    ``window_chunks`` chunks' outputs (``n_window_infer`` 800 / 100 = 8 chunks = 104
    tokens, 8 s; the encoder's ``cu_seqlens``), the last window holding the remainder.
    A uniform :class:`EncoderWork` cannot say "k windows of 104 and one shorter one", so
    the tokens are spread evenly over ``ceil(T/104)`` units (``seq_len = ceil(T/units)``):
    the linear layers see the true token count (to within ``units - 1``) and attention is
    slightly under-costed for a long clip with a short tail. A clip under 1 s is one unit.

    Long clips: ``max_frames`` None (the default) keeps every frame, as Qwen3-Omni is meant to
    take long audio and as the processor intends (it sets ``padding=True`` "to avoid default
    truncation"). In transformers 4.57.1 that does not work: ``WhisperFeatureExtractor``
    still truncates to its ``n_samples`` (30 s = 3000 frames) because ``truncation`` is left at
    True, so a clip through that processor gets at most 390 tokens; ``max_frames: 3000``
    reproduces it.
    """

    kind: Literal["qwen3_omni"] = "qwen3_omni"
    sampling_rate: PositiveInt = 16000
    hop_length: PositiveInt = 160
    chunk_frames: PositiveInt = 100
    conv_layers: PositiveInt = 3  # each: kernel 3, stride 2, padding 1
    window_chunks: PositiveInt = 8
    max_frames: PositiveInt | None = None

    def mel_frames(self, seconds: float) -> int:
        samples = max(1, round(_positive_seconds(seconds) * self.sampling_rate))
        frames = math.ceil(samples / self.hop_length)
        return frames if self.max_frames is None else min(frames, self.max_frames)

    def _conv(self, frames: int) -> int:
        for _ in range(self.conv_layers):
            frames = (frames - 1) // 2 + 1
        return frames

    def num_tokens(self, seconds: float) -> int:
        whole, rest = divmod(self.mel_frames(seconds), self.chunk_frames)
        return whole * self._conv(self.chunk_frames) + self._conv(rest)

    def item(self, seconds: float) -> MediaItem:
        tokens = self.num_tokens(seconds)
        window = self._conv(self.chunk_frames) * self.window_chunks
        units = max(1, math.ceil(tokens / window))
        work = EncoderWork(units, math.ceil(tokens / units))
        return MediaItem("audio", tokens, work, source=("audio", float(seconds)))
