"""Host (CPU) preprocessing costs of a request, read from a measured profile.

``lmmsim profile-host`` times media decoding and each model family's Hugging
Face processor on a CPU (``profiles/host/<name>/``, one CSV of medians per
operation). :class:`HostProfile` turns each operation group into a curve over
its size (pixels, frames, total pixels, seconds, tokens): piecewise linear
between the measured points, and beyond them extended with the slope of the
group's least-squares line (``fit.json``), so a curve is continuous and never
negative. :class:`HostCosts` prices one request for one model:

* every media item: decode (JPEG or PNG image; H.264 video, scaled from the
  measured frame size by pixels; WAV audio) then the model's processor
  (image: its family's class over pixels; video: the family's video path over
  frames x pixels; audio: Whisper log-mel features over seconds);
* the prompt's text: tokenisation over text tokens, where the profile holds it
  (``tokenize.csv``), at the measured vocabulary nearest the model's.

All times are divided by ``cpu_speed``, the serving CPU's speed relative to the
profiled one (1: the profiled CPU itself). Media download and base64 decoding
are not modelled (they depend on the client's network, not the server).
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import numpy as np

from lmmsim.catalog import WHISPER_MEL_BINS
from lmmsim.costmodel.small_csv import read_columns
from lmmsim.errors import UserError, choices

#: Families whose frames a server processes as images with another family's class:
#: LLaVA-OneVision's video processor resizes each frame to 384 x 384 and normalises it,
#: the work SigLIP's image processor does (the profile has no LLaVA-OneVision video rows).
VIDEO_AS_IMAGES = {"llava_onevision": "siglip"}
#: Image families priced with another family's measured processor while a profile has no rows
#: of their own: Llama 4's processor (resize into a canvas of up to 16 tiles of 336 px, pad,
#: normalise, split, plus a 336-px global tile) does the per-pixel work of InternVL's
#: (``GotOcr2ImageProcessor``: resize into up to 12 tiles of 448 px + a thumbnail). A proxy, not
#: a measurement: Llama 4 ships only a torch ("fast") processor, the shipped profile times slow ones.
IMAGE_AS = {"llama4": "internvl"}


class Curve:
    """Milliseconds at a size: piecewise linear through the medians, linear beyond them."""

    def __init__(self, xs, ys, slope: float):
        order = np.argsort(xs)
        self.xs = np.asarray(xs, dtype=float)[order]
        self.ys = np.asarray(ys, dtype=float)[order]
        self.slope = max(float(slope), 0.0)

    def ms(self, x: float) -> float:
        xs, ys = self.xs, self.ys
        if x > xs[-1]:
            return float(ys[-1] + self.slope * (x - xs[-1]))
        if x < xs[0]:
            return float(max(ys[0] - self.slope * (xs[0] - x), 0.0))
        return float(np.interp(x, xs, ys))


class HostProfile:
    """The curves of one profile folder, keyed by operation and group."""

    FILES = {  # operation -> (group columns, size column)
        "image_decode": (["format"], "pixels"),
        "image_processor": (["family", "variant"], "pixels"),
        "video_decode": (["codec", "width"], "frames"),
        "video_processor": (["family", "variant"], "total_pixels"),
        "audio_features": (["operation", "feature_size"], "seconds"),
        "tokenize": (["vocab_size"], "tokens"),
    }

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        if not (self.folder / "image_decode.csv").is_file():
            raise UserError("host.profile", f"{self.folder} holds no host profile (image_decode.csv); "
                                            f"run `lmmsim profile-host -o {self.folder}`")
        slopes = self._slopes()
        self.curves: dict[str, dict[tuple, Curve]] = {}
        self.video_pixels: dict[int, int] = {}  # measured decode width -> frame pixels
        for op, (groups, x) in self.FILES.items():
            path = self.folder / f"{op}.csv"
            if not path.is_file():
                continue
            df = read_columns(path, {*groups, x, "time_ms", *(("width", "pixels") if op == "video_decode" else ())},
                              "host.profile")
            xs, ys = np.asarray(df[x]), np.asarray(df["time_ms"])
            self.curves[op] = {key: Curve(xs[rows], ys[rows], slopes.get((op, _norm(key)), 0.0))
                               for key, rows in _groups(df, groups).items()}
            if op == "video_decode":
                self.video_pixels = {int(w): int(p) for w, p in zip(df["width"], df["pixels"])}
        meta = self.folder / "meta.json"
        self.meta = json.loads(meta.read_text()) if meta.is_file() else {}

    def _slopes(self) -> dict:
        path = self.folder / "fit.json"
        fits = json.loads(path.read_text()) if path.is_file() else {}
        out = {}
        for op, block in fits.items():
            groups = self.FILES.get(op, ([], ""))[0]
            for f in block.get("fits", []):
                if all(g in f for g in groups):
                    out[(op, tuple(str(f[g]) for g in groups))] = f["slope_ms_per_unit"]
        return out

    def curve(self, op: str, key: tuple) -> Curve | None:
        return self.curves.get(op, {}).get(key)

    def groups(self, op: str) -> list[tuple]:
        return sorted(self.curves.get(op, {}))


def _groups(df: dict[str, list], columns: list[str]) -> dict[tuple, list[int]]:
    """The row positions of each distinct value of ``columns``, keys sorted, rows in file order,
    rows with a missing value left out: ``groupby(columns)``'s groups, without pandas."""
    rows: dict[tuple, list[int]] = {}
    for i, key in enumerate(zip(*(df[c] for c in columns))):
        if not any(k is None or k != k for k in key):  # None or NaN: missing
            rows.setdefault(key, []).append(i)
    return {key: rows[key] for key in sorted(rows)}


def _norm(key) -> tuple:
    return tuple(str(k) for k in (key if isinstance(key, tuple) else (key,)))


@functools.lru_cache(maxsize=8)
def load_profile(folder: str) -> HostProfile:
    return HostProfile(Path(folder))


def processor_family(model, modality: str) -> str:
    """The profile family of a model's processor for a modality: the rule's ``kind``, with
    Qwen3-VL (the Qwen2-VL processor with 16-px patches) told apart."""
    rule = getattr(model.media, modality)
    kind = rule.kind
    if kind == "qwen2_vl" and getattr(rule, "patch_size", 14) == 16:
        return "qwen3_vl"
    return kind


class HostCosts:
    """Seconds of one CPU worker per request (tokenisation + every media item's decode and
    processor), for one model on a profile, at ``cpu_speed`` times the profiled CPU."""

    def __init__(self, profile: HostProfile, model, *, cpu_speed: float = 1.0, image_format: str = "jpeg",
                 variant: str = "slow"):
        self.profile = profile
        self.model = model
        self.scale = 1e-3 / cpu_speed  # ms on the profiled CPU -> s on this one
        self.image_format = image_format
        self.variant = variant
        self._families = {m: processor_family(model, m) for m in ("image", "video") if getattr(model.media, m)}
        self._check()
        self._tokenize = self._tokenize_curve()
        self._item_memo: dict = {}
        self._tokenize_memo: dict[int, float] = {}

    def _check(self) -> None:
        p = self.profile
        if p.curve("image_decode", (self.image_format,)) is None:
            raise UserError("host.image_format", f"{self.image_format!r} not in {p.folder}; valid: "
                                                 f"{choices(k[0] for k in p.groups('image_decode'))}")
        for modality in self._families:
            op, family = self._processor(modality)
            if p.curve(op, (family, self.variant)) is None:
                have = sorted(f"{k[0]} ({k[1]})" for k in p.groups(op))
                raise UserError("host.profile", f"{p.folder} has no {op} rows for {self.model.name}'s family "
                                                f"{family!r} ({self.variant}); it has: {', '.join(have)}")
        if "video" in self._families and not p.video_pixels:
            raise UserError("host.profile", f"{p.folder} has no video_decode rows for {self.model.name}'s video")

    def _processor(self, modality: str) -> tuple[str, str]:
        """(profile operation, family) that prices the modality's processor: a video family
        without video rows is priced frame by frame as images (:data:`VIDEO_AS_IMAGES`)."""
        family = self._families[modality]
        if modality == "video" and self.profile.curve("video_processor", (family, self.variant)) is None:
            return "image_processor", VIDEO_AS_IMAGES.get(family, family)
        if modality == "image" and self.profile.curve("image_processor", (family, self.variant)) is None:
            return "image_processor", IMAGE_AS.get(family, family)
        return f"{modality}_processor", family

    def _image_processor_key(self) -> tuple[str, tuple[str, str]]:
        op, family = self._processor("image")
        return op, (family, self.variant)

    def _tokenize_curve(self) -> Curve | None:
        groups = self.profile.groups("tokenize")
        if not groups:
            return None
        vocab = self.model.llm.vocab_size
        nearest = min(groups, key=lambda k: (abs(math.log(float(k[0]) / vocab)), k))
        return self.profile.curve("tokenize", nearest)

    @property
    def measures_tokenisation(self) -> bool:
        return self._tokenize is not None

    def tokenize_s(self, tokens: int) -> float:
        if self._tokenize is None or tokens <= 0:
            return 0.0
        t = self._tokenize_memo.get(tokens)
        if t is None:
            t = self._tokenize_memo[tokens] = self._tokenize.ms(tokens) * self.scale
        return t

    def item_s(self, item, processed: bool = False) -> float:
        """One worker's seconds for a media item: decode + processor; ``processed``: a processor-cache
        hit, which still decodes the media (vLLM hashes the decoded item) but skips the processor."""
        key = (item.modality, item.source)
        parts = self._item_memo.get(key)
        if parts is None:
            parts = self._item_memo[key] = tuple(ms * self.scale for ms in self._item_ms(item))
        return parts[0] if processed else parts[0] + parts[1]

    def _item_ms(self, item) -> tuple[float, float]:
        """(decode, processor) milliseconds on the profiled CPU."""
        # ``source``: the shape (MediaFactory's form), or the token rule's own with the kind first
        shape = item.source[1:] if item.source and isinstance(item.source[0], str) else item.source
        try:
            if item.modality == "image":
                w, h = shape
                return self._image_ms(w * h)
            if item.modality == "video":
                frames, w, h = shape
                return self._video_ms(frames, w, h)
            if item.modality == "audio":
                (seconds,) = shape
                return self._audio_ms(seconds)
        except ValueError:
            pass
        raise UserError("host", f"cannot price host preprocessing of a {item.modality} item with source "
                                f"{item.source!r} (no size recorded)")

    def _image_ms(self, pixels: float) -> tuple[float, float]:
        p = self.profile
        return (p.curve("image_decode", (self.image_format,)).ms(pixels),
                p.curve(*self._image_processor_key()).ms(pixels))

    def _video_ms(self, frames: int, w: int, h: int) -> tuple[float, float]:
        return self._video_decode_ms(frames, w * h), self._video_processor_ms(frames, w * h)

    def _video_decode_ms(self, frames: int, pixels: int) -> float:
        """Decode scales with frames (the measured curve) and, per frame, with pixels relative to
        the nearest measured frame size."""
        p = self.profile
        widths = p.video_pixels
        width = min(widths, key=lambda w: (abs(widths[w] - pixels), w))
        codec = next(k[0] for k in p.groups("video_decode") if int(k[1]) == width)
        return p.curve("video_decode", (codec, width)).ms(frames) * pixels / widths[width]

    def _video_processor_ms(self, frames: int, pixels: int) -> float:
        op, family = self._processor("video")
        curve = self.profile.curve(op, (family, self.variant))
        return curve.ms(frames * pixels) if op == "video_processor" else frames * curve.ms(pixels)

    def _audio_ms(self, seconds: float) -> tuple[float, float]:
        p = self.profile
        groups = [k for k in p.groups("audio_features") if k[0] == "whisper_features"]
        mel = min(groups, key=lambda k: abs(int(k[1]) - WHISPER_MEL_BINS))
        decode = next(k for k in p.groups("audio_features") if k[0] == "wav_decode")
        return p.curve("audio_features", decode).ms(seconds), p.curve("audio_features", mel).ms(seconds)

    def describe(self) -> dict:
        meta = self.profile.meta
        return {"profile": str(self.profile.folder.name), "cpu_model": meta.get("cpu_model"),
                "profiled_on": meta.get("date"), "cpu_speed": round(1e-3 / self.scale, 6),
                "image_format": self.image_format, "variant": self.variant,
                "tokenisation": "measured" if self.measures_tokenisation else "not in the profile (0)"}
