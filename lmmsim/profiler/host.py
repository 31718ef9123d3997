"""Host (CPU) preprocessing of multimodal inputs, measured with the real libraries.

Before a GPU encoder sees an image, video or audio clip, a server decodes the
media and runs the model's Hugging Face processor on CPU (vLLM issue 31655:
Qwen2-VL-7B's HF processor takes 163.6 ms on average against 118.2 ms for the
encoder forward). ``lmmsim profile-host`` times those steps on this machine:

* ``image_decode.csv``: Pillow decode of JPEG and PNG images generated in the run
  (gradient + noise + shapes, so encoded sizes are realistic);
* ``image_processor.csv``: each catalog family's ``transformers`` image processor,
  built offline from the catalog's constants (slow classes; ``...Fast`` ones too
  when torchvision is importable);
* ``video_decode.csv``: PyAV decode of clips encoded in the run (H.264, else mpeg4);
* ``video_processor.csv``: the families' video paths (frames as the processor sees them);
* ``audio_features.csv``: WAV decode and ``WhisperFeatureExtractor`` log-mel features;
* ``tokenize.csv``, ``tokenize_variants.csv``: one prompt's ``encode`` with byte-level BPE vocabularies
  trained in the run (:mod:`~lmmsim.profiler.host_tokenize`);
* ``encoder_dispatch.csv``: the host side of one eager encoder layer, ATen ops and microseconds
  (:mod:`~lmmsim.profiler.host_dispatch`).

Every row is a median over repeats after a warm-up (p10/p90 beside it), on one
torch thread; the cases are timed round-robin so that load from elsewhere on the
machine spreads over many cases' single repeats (:mod:`~lmmsim.profiler.host_timing`),
in three blocks (tokenisation, encoder dispatch, media) so that short calls never
follow long ones. ``fit.json`` holds a least-squares line per operation (time
against pixels, frames x pixels, seconds or tokens) with its R^2; ``meta.json`` the
provenance.
"""

from __future__ import annotations

import io
import json
import os
import platform
import time
import wave
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from lmmsim.profiler.host_timing import TIME_COLUMNS, Case, measure_cases  # noqa: F401 -- TIME_COLUMNS re-exported

# what one name of ``--only`` measures: section -> the CSVs (operations) it writes
SECTIONS = {"image": ("image_decode", "image_processor"), "video": ("video_decode", "video_processor"),
            "audio": ("audio_features",), "tokenize": ("tokenize", "tokenize_variants"),
            "encoder_dispatch": ("encoder_dispatch",)}
# meta.json keys that describe one section's run
SECTION_META = {"image": ("fast_variants",), "video": ("video_codec",), "audio": ("audio_decode",),
                "tokenize": ("tokenize",), "encoder_dispatch": ("encoder_dispatch",)}
OUTPUT_FILES = tuple(f"{op}.csv" for ops in SECTIONS.values() for op in ops) + ("meta.json", "fit.json")
IMAGE_SIDES = (448, 768, 1024, 1344, 1792)
VIDEO_SHAPES = ((8, 384), (16, 384), (32, 384), (8, 448), (16, 448), (32, 448))
AUDIO_SECONDS = (5, 30, 60)
MAX_REPEATS, MIN_REPEATS = 31, 5  # rounds over all cases (full run)
# fit.json: per CSV, the columns a line is fitted within, and its x
FIT_SPECS = {
    "image_decode": (["format"], "pixels"),
    "image_processor": (["family", "processor_class", "variant"], "pixels"),
    "video_decode": (["codec", "width"], "frames"),
    "video_processor": (["family", "processor_class", "variant"], "total_pixels"),
    "audio_features": (["operation", "feature_size"], "seconds"),
    "tokenize": (["vocab_size"], "tokens"),
    "tokenize_variants": (["api", "bpe_cache", "vocab_size"], "tokens"),
}
_IMAGENET = {"image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}
_HALF = {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}


# ------------------------------------------------------------------ inputs
def synthetic_image(width: int, height: int, seed: int = 0) -> np.ndarray:
    """An RGB uint8 picture: smooth colour gradients, sensor-like noise and a few filled shapes."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack([255 * x / max(width - 1, 1), 255 * y / max(height - 1, 1),
                     127 + 100 * np.sin((x + y) / max(width, height) * 6.0)], axis=-1)
    img = Image.fromarray(np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    for _ in range(12):
        x0, y0 = int(rng.integers(0, width)), int(rng.integers(0, height))
        r = int(rng.integers(max(width // 20, 2), max(width // 5, 3)))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)([x0 - r, y0 - r, x0 + r, y0 + r], fill=colour)
    return np.asarray(img)


def encode_image(arr: np.ndarray, fmt: str) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buf.getvalue()


def decode_image(data: bytes):
    from PIL import Image

    img = Image.open(io.BytesIO(data))
    return img.convert("RGB")  # convert() forces the decode


def video_codec() -> str:
    import av

    return "h264" if "libx264" in av.codecs_available else "mpeg4"


def encode_video(frames: int, side: int, codec: str) -> bytes:
    """An mp4 of ``frames`` frames: the synthetic picture panning right, 30 fps, yuv420p."""
    import av

    buf = io.BytesIO()
    big = synthetic_image(side + 4 * frames, side, seed=1)
    with av.open(buf, mode="w", format="mp4") as container:
        stream = container.add_stream("libx264" if codec == "h264" else codec, rate=30)
        stream.width, stream.height, stream.pix_fmt = side, side, "yuv420p"
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(big[:, 4 * i:4 * i + side]), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buf.getvalue()


def decode_video(data: bytes) -> list[np.ndarray]:
    import av

    with av.open(io.BytesIO(data)) as container:
        return [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]


def synthetic_wav(seconds: float, rate: int = 16000) -> bytes:
    """16-bit mono WAV: a few sines plus noise."""
    rng = np.random.default_rng(2)
    t = np.arange(int(seconds * rate)) / rate
    sig = 0.3 * np.sin(2 * np.pi * 220 * t) + 0.2 * np.sin(2 * np.pi * 1330 * t) + 0.05 * rng.normal(size=t.size)
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(sig, -1, 1) * 32767).astype(np.int16).tobytes())
    return buf.getvalue()


def decode_wav(data: bytes) -> np.ndarray:
    with wave.open(io.BytesIO(data), "rb") as w:
        raw = w.readframes(w.getnframes())
    return np.frombuffer(raw, dtype=np.int16).astype(np.float32) / 32768.0


# ------------------------------------------------------------------ processors
def image_families() -> dict[str, tuple[str, dict]]:
    """Family -> (transformers class, constructor kwargs), the constants from profiles/models/*.yaml."""
    ov_pins = [[384 * i, 384 * j] for i in range(1, 7) for j in range(1, 7)]
    next_pins = [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]]
    qwen = {"merge_size": 2, "temporal_patch_size": 2}
    return {
        "qwen2_vl": ("Qwen2VLImageProcessor", {**qwen, "patch_size": 14, "min_pixels": 3136, "max_pixels": 12845056}),
        "qwen3_vl": ("Qwen2VLImageProcessor", {**qwen, "patch_size": 16, "min_pixels": 65536,
                                               "max_pixels": 16777216, **_HALF}),
        "llava_onevision": ("LlavaOnevisionImageProcessor", {"size": {"height": 384, "width": 384},
                                                             "image_grid_pinpoints": ov_pins, **_HALF}),
        "llava_next": ("LlavaNextImageProcessor", {"size": {"shortest_edge": 336},
                                                   "crop_size": {"height": 336, "width": 336},
                                                   "image_grid_pinpoints": next_pins}),
        "clip": ("CLIPImageProcessor", {"size": {"shortest_edge": 336}, "crop_size": {"height": 336, "width": 336}}),
        "siglip": ("SiglipImageProcessor", {"size": {"height": 384, "width": 384}, **_HALF}),
        "internvl": ("GotOcr2ImageProcessor", {"size": {"height": 448, "width": 448}, "crop_to_patches": True,
                                               "min_patches": 1, "max_patches": 12, **_IMAGENET}),
        "gemma3": ("Gemma3ImageProcessor", {"size": {"height": 896, "width": 896}, "do_pan_and_scan": False,
                                            **_HALF}),
    }


def video_families() -> dict[str, tuple[str, dict, str]]:
    """Family -> (class, kwargs, how frames are passed): the video path each family's server takes.
    Qwen2-VL's slow path is the image processor's deprecated ``videos=`` argument; its fast one is
    ``Qwen2VLVideoProcessor`` (:data:`FAST_NAMES`)."""
    images = image_families()
    qwen_video = {**images["qwen2_vl"][1], "min_pixels": 100352, "max_pixels": 602112}
    return {
        "qwen2_vl": ("Qwen2VLImageProcessor", qwen_video, "videos"),
        "internvl": ("GotOcr2ImageProcessor", {**images["internvl"][1], "crop_to_patches": False}, "frames_as_images"),
        "gemma3": (*images["gemma3"], "frames_as_images"),
    }


# the torchvision-backed class of a (section, family) when it is not the slow name + "Fast"
FAST_NAMES = {("video", "qwen2_vl"): "Qwen2VLVideoProcessor", ("video", "internvl"): "GotOcr2ImageProcessorFast",
              ("video", "gemma3"): "Gemma3ImageProcessorFast"}


def fast_available() -> tuple[bool, str]:
    try:
        import torchvision
    except ImportError:
        return False, ("fast (torchvision-backed) processors not measured: torchvision is not importable "
                       "(the local index's torchvision needs a newer torch than the installed one)")
    return True, "fast processors measured (torchvision " + torchvision.__version__ + ")"


def build_processors(families: dict, with_fast: bool, skipped: list[str],
                     section: str = "image") -> list[tuple[str, str, str, object, tuple]]:
    """(family, class name, variant, processor, extra) for every class that builds offline."""
    import transformers

    built = []
    for family, (cls_name, kwargs, *extra) in families.items():
        fast_name = FAST_NAMES.get((section, family), cls_name + "Fast")
        for variant, name in (("slow", cls_name), ("fast", fast_name)):
            if variant == "fast" and not with_fast:
                continue
            try:
                built.append((family, name, variant, getattr(transformers, name)(**kwargs), tuple(extra)))
            except Exception as exc:  # noqa: BLE001 -- a class missing or needing a backend: say so, measure the rest
                skipped.append(f"{family} {name}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
    return built


# ------------------------------------------------------------------ sections
def _image_cases(sides, processors) -> list[Case]:
    cases = []
    for side in sides:
        arr = synthetic_image(side, side)
        size = {"width": side, "height": side, "pixels": side * side}
        for fmt in ("JPEG", "PNG"):
            data = encode_image(arr, fmt)
            cases.append(Case("image_decode", {"format": fmt.lower(), **size, "encoded_bytes": len(data)},
                              lambda d=data: decode_image(d)))
        img = decode_image(encode_image(arr, "JPEG"))
        for family, name, variant, proc, _ in processors:
            cases.append(Case("image_processor", {"family": family, "processor_class": name, "variant": variant,
                                                  **size}, lambda p=proc, i=img: p(images=[i], return_tensors="pt")))
    return cases


def _video_cases(shapes, processors, codec: str) -> list[Case]:
    cases = []
    for frames, side in shapes:
        data = encode_video(frames, side, codec)
        decoded = decode_video(data)
        base = {"width": side, "height": side, "frames": len(decoded)}
        cases.append(Case("video_decode", {"codec": codec, **base, "pixels": side * side, "encoded_bytes": len(data)},
                          lambda d=data: decode_video(d)))
        for family, name, variant, proc, (mode,) in processors:
            if mode == "videos" and variant == "fast":  # a video processor takes only videos=
                fn = lambda p=proc, v=decoded: p(videos=[v], return_tensors="pt")
            elif mode == "videos":
                fn = lambda p=proc, v=decoded: p(images=None, videos=[v], return_tensors="pt")
            else:
                fn = lambda p=proc, v=decoded: p(images=v, return_tensors="pt")
            cases.append(Case("video_processor", {"family": family, "processor_class": name, "variant": variant,
                                                  "input": mode, **base, "total_pixels": side * side * len(decoded)},
                              fn))
    return cases


def _audio_cases(seconds) -> list[Case]:
    from transformers import WhisperFeatureExtractor

    cases = []
    extractors = {n: WhisperFeatureExtractor(feature_size=n, sampling_rate=16000, hop_length=160, chunk_length=30,
                                             n_fft=400) for n in (80, 128)}
    for s in seconds:
        data = synthetic_wav(s)
        cases.append(Case("audio_features", {"operation": "wav_decode", "feature_size": 0, "seconds": s,
                                             "samples": s * 16000}, lambda d=data: decode_wav(d)))
        audio = decode_wav(data)
        for n, fx in extractors.items():
            # no 30 s padding or truncation: time scales with the clip (a server chunks long audio itself)
            fn = lambda f=fx, a=audio: f(a, sampling_rate=16000, padding="longest", truncation=False,
                                         return_tensors="np")
            cases.append(Case("audio_features", {"operation": "whisper_features", "feature_size": n, "seconds": s,
                                                 "samples": audio.size}, fn))
    return cases


# ------------------------------------------------------------------ fit and meta
def fit_line(x: np.ndarray, y: np.ndarray) -> dict:
    """Least-squares ``y = intercept + slope * x`` with R^2 (1.0 when y has no spread)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size >= 2 and np.ptp(x) > 0:
        slope, intercept = np.polyfit(x, y, 1)
    else:
        slope, intercept = 0.0, float(np.mean(y))
    resid = y - (intercept + slope * x)
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum(resid ** 2)) / ss_tot if ss_tot > 0 else 1.0
    return {"intercept_ms": float(intercept), "slope_ms_per_unit": float(slope), "r2": r2, "n": int(x.size)}


def fit_tables(tables: dict) -> dict:
    import pandas as pd

    out = {}
    for op, (keys, xcol) in FIT_SPECS.items():
        df = pd.DataFrame(tables.get(op, []))
        fits = []
        if not df.empty:
            for group, part in df.groupby(keys, sort=True):
                group = group if isinstance(group, tuple) else (group,)
                fits.append({**{k: (v.item() if hasattr(v, "item") else v) for k, v in zip(keys, group)},
                             "x": xcol, **fit_line(part[xcol], part["time_ms"])})
        out[op] = {"model": f"time_ms = intercept_ms + slope_ms_per_unit * {xcol}", "fits": fits}
    return out


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for dist in ("Pillow", "av", "transformers", "tokenizers", "torch", "torchvision", "numpy"):
        try:
            found[dist] = version(dist)
        except PackageNotFoundError:
            found[dist] = None
    return found


def build_meta(*, quick: bool, max_minutes: float, command: str, sections: tuple[str, ...], codec: str | None,
               skipped: list[str], fast_note: str, elapsed_s: float, infos: dict) -> dict:
    """Provenance of one run; the keys that describe a section (:data:`SECTION_META`) only where it was
    measured, ``infos`` holding the tokenize and encoder_dispatch ones."""
    import torch

    meta = {"what": "host (CPU) preprocessing of multimodal inputs", "quick": quick, "max_minutes": max_minutes,
            "cpu_model": _cpu_model(), "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "platform": platform.platform(), "python": platform.python_version(), "versions": _versions(),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": command,
            "sections": list(sections), "video_codec": codec, "fast_variants": fast_note, "skipped": skipped,
            "elapsed_s": round(elapsed_s, 1), "audio_decode": "stdlib wave + numpy int16 -> float32", **infos,
            "timing": f"one warm-up call per case, then round-robin rounds (one call of every case each) until "
                      f"{MAX_REPEATS} rounds or --max-minutes is spent (at least {MIN_REPEATS}); median, p10, p90; "
                      "three blocks timed one after the other, each round-robin among its own cases: tokenize, "
                      "encoder_dispatch, then the media operations"}
    for section, keys in SECTION_META.items():
        if section not in sections:
            for key in keys:
                meta.pop(key, None)
    return meta


# ------------------------------------------------------------------ driver
def profile_host(out_dir: Path, *, quick: bool = False, max_minutes: float = 6.0, command: str = "",
                 sections: tuple[str, ...] | None = None) -> dict:
    """Measure ``sections`` (default: all of :data:`SECTIONS`), write their CSVs, ``fit.json`` and
    ``meta.json`` into ``out_dir``; return meta. (:mod:`~lmmsim.profiler.host_merge` folds a run of some
    sections into an earlier profile.)"""
    import pandas as pd
    import torch
    from transformers.utils import logging as hf_logging

    from lmmsim.profiler.host_tokenize import single_threaded

    sections = tuple(sections or SECTIONS)
    t0 = time.perf_counter()
    torch.set_num_threads(1)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # Qwen2VLImageProcessor(videos=) warns on every call
    try:
        with single_threaded():
            tables, codec, skipped, fast_note, infos = _measure_all(quick, max_minutes, sections)
    finally:
        hf_logging.set_verbosity(verbosity)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for op, rows in tables.items():
        pd.DataFrame(rows).to_csv(out_dir / f"{op}.csv", index=False, float_format="%.4f")
    measured = {op for section in sections for op in SECTIONS[section]}
    fits = {op: entry for op, entry in fit_tables(tables).items() if op in measured}
    (out_dir / "fit.json").write_text(json.dumps(fits, indent=1) + "\n")
    meta = build_meta(quick=quick, max_minutes=max_minutes, command=command, sections=sections, codec=codec,
                      skipped=skipped, fast_note=fast_note, elapsed_s=time.perf_counter() - t0, infos=infos)
    (out_dir / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def _measure_all(quick: bool, max_minutes: float, sections: tuple[str, ...]) -> tuple:
    """(tables, video codec, skipped notes, fast-variant note, tokenize/encoder_dispatch meta)."""
    from lmmsim.profiler import host_dispatch
    from lmmsim.profiler.host_tokenize import tokenize_cases

    sides = (64, 128) if quick else IMAGE_SIDES
    shapes = ((4, 64), (8, 64)) if quick else VIDEO_SHAPES
    seconds = (1, 2) if quick else AUDIO_SECONDS
    skipped: list[str] = []
    with_fast, fast_note = fast_available()
    media, codec, infos = [], None, {}
    if "image" in sections:
        media += _image_cases(sides, build_processors(image_families(), with_fast, skipped))
    if "video" in sections:
        codec = video_codec()
        media += _video_cases(shapes, build_processors(video_families(), with_fast, skipped, section="video"), codec)
    if "audio" in sections:
        media += _audio_cases(seconds)
    tok_cases, dispatch = [], []
    if "tokenize" in sections:
        tok_cases, infos["tokenize"] = tokenize_cases(quick)  # trains the vocabularies: before the clock starts
    if "encoder_dispatch" in sections:
        dispatch, infos["encoder_dispatch"] = host_dispatch.dispatch_cases(quick, skipped), host_dispatch.meta(quick)
    # Three blocks, each round-robin among its own cases: a 0.1 ms encode or a 100 us layer timed just
    # after a 100 ms image processor would find the CPU caches full of the processor's data and pay
    # for that, by its place in the order. The short blocks go first; the media block gets what is left.
    deadline, tables = time.perf_counter() + max_minutes * 60.0, {}
    for cases in (tok_cases, dispatch, media):
        if cases:
            tables.update(measure_cases(cases, max(deadline - time.perf_counter(), 0.0),
                                        max_repeats=2 if quick else MAX_REPEATS,
                                        min_repeats=1 if quick else MIN_REPEATS))
    if "encoder_dispatch" in tables:
        tables["encoder_dispatch"] = host_dispatch.per_layer(tables["encoder_dispatch"])
    return tables, codec, skipped, fast_note, infos
