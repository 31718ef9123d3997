"""A fit folder on disk: ``model.json`` plus forest arrays, written and read back without pickle.

Layout of ``model.json`` (format :data:`FORMAT`)::

    {"format", "gpu", "unit": "s", "profile": {path, meta}, "peaks": {class: [FLOP/s, B/s]},
     "selection": {...}, "skipped": {class: why},
     "classes": {class: entry}}

    entry = {"kind": roofline | poly | forest, "estimator": roofline | poly2 | poly3 | forest,
             "features": [...], "metrics": {...}, "feature_ranges": {feature: [min, max]},
             "params": ...,             # roofline parameters, polynomial arrays, or {"file": <npz>}
             "roofline": {...},         # the class's fitted roofline (non-roofline kinds); with
                                        # "num_sms" when its memory term is occupancy-scaled
             "derived_from": gpu,       # optional: roofline fitted on another GPU's data
             "domain": {...},           # where the rows lie (lmmsim.costmodel.domain); absent in old fits
             "per_op": {op: entry}}     # optional, elementwise: one model per canonical op

A forest's trees are ``<class>.forest.npz`` (``elementwise.<op>.forest.npz``
for a per-op forest), read without pickle (:func:`read_forest`, on first use). ``per_op`` is
optional both ways: a fit without it loads as one pooled model, and a reader
that ignores it still gets the pooled model. Loading needs numpy only
(:mod:`lmmsim.costmodel.npmodels`). :func:`merge_classes` adds classes fitted
later to a fit without touching the others (the FP8 / MoE ones, ``source_profile``
naming the profile each was fitted on).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import struct
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from lmmsim.catalog import GpuSpec, LinkSpec
from lmmsim.costmodel.domain import DomainCheck
from lmmsim.costmodel.estimators import EXTRAPOLATING, FOREST_PARAMS, SEED, estimator_inputs
from lmmsim.costmodel.features import CLASSES, WORK, class_peaks, matrix
from lmmsim.costmodel.npmodels import ForestModel, PolyModel, RooflineModel
from lmmsim.costmodel.selection import CV_FOLDS, HELDOUT_FRACTION, TIE_MARGIN_PCT

if TYPE_CHECKING:
    from lmmsim.costmodel.selection import ClassFit, Fit

FORMAT = "lmmsim-fit/1"


# ================================================================= save
def _kind(estimator_name: str) -> str:
    return "poly" if estimator_name.startswith("poly") else estimator_name


def _file_stem(op_class: str, op: str | None) -> str:
    """``<class>`` or ``<class>.<op>``; an op name unsafe in a file name is cleaned and
    tagged with a hash of the original (two odd names never share a file)."""
    if op is None:
        return op_class
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", op)
    if safe != op:
        safe += "-" + hashlib.sha1(op.encode()).hexdigest()[:8]
    return f"{op_class}.{safe}"


def _entry(folder: Path, op_class: str, cf: ClassFit, op: str | None = None) -> dict:
    """The model.json entry of one fitted model (writes its forest arrays next to it)."""
    kind = _kind(cf.estimator_name)
    entry = {"kind": kind, "estimator": cf.estimator_name, "features": list(estimator_inputs(
        cf.estimator_name, op_class)), "metrics": cf.metrics, "feature_ranges": cf.feature_ranges}
    if kind == "roofline":
        entry["params"] = cf.estimator.params()
    else:
        entry["roofline"] = cf.roofline.params()
        if kind == "poly":
            scale, poly, ridge = (cf.estimator.named_steps[s] for s in ("scale", "poly", "ridge"))
            entry["params"] = {"mean": scale.mean_.tolist(), "scale": scale.scale_.tolist(),
                               "powers": poly.powers_.tolist(), "coef": ridge.coef_.tolist(),
                               "intercept": float(ridge.intercept_), "alpha": float(ridge.alpha_)}
        else:
            name = f"{_file_stem(op_class, op)}.forest.npz"
            _save_forest(folder / name, cf.estimator)
            entry["params"] = {"file": name, **(CLASSES[op_class].forest_params or FOREST_PARAMS),
                               "random_state": SEED}
    if cf.domain is not None:
        entry["domain"] = cf.domain
    if cf.per_op:
        entry["per_op"] = {o: _entry(folder, op_class, sub, o) for o, sub in sorted(cf.per_op.items())}
    return entry


def save_fit(folder: Path, fit: Fit) -> Path:
    """Write ``folder/model.json`` (+ a ``.forest.npz`` per forest); returns model.json's path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    classes = {op_class: _entry(folder, op_class, cf) for op_class, cf in sorted(fit.classes.items())}
    doc = {"format": FORMAT, "gpu": fit.gpu, "unit": "s", "profile": fit.provenance, "peaks": fit.peaks,
           "selection": {"heldout_fraction": HELDOUT_FRACTION, "cv_folds": CV_FOLDS, "seed": SEED,
                         "tie_margin_pct": TIE_MARGIN_PCT, "prefer": list(EXTRAPOLATING)},
           "skipped": fit.skipped, "classes": classes}
    path = folder / "model.json"
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return path


def _save_forest(path: Path, forest) -> None:
    trees = [e.tree_ for e in forest.estimators_]
    np.savez_compressed(
        path,
        tree_offsets=np.cumsum([0] + [t.node_count for t in trees])[:-1].astype(np.int64),
        children_left=np.concatenate([t.children_left for t in trees]).astype(np.int32),
        children_right=np.concatenate([t.children_right for t in trees]).astype(np.int32),
        feature=np.concatenate([t.feature for t in trees]).astype(np.int32),
        threshold=np.concatenate([t.threshold for t in trees]),
        value=np.concatenate([t.value[:, 0, 0] for t in trees]),
    )


# ================================================================= load
@dataclass
class LoadedClass:
    """One class of a saved fit, ready to predict (numpy only).

    ``per_op`` (elementwise): a LoadedClass per canonical op that has its own
    model; this one is then the pooled model, for every other op.

    A forest's arrays are read from its ``.npz`` on the first use of :attr:`model`, not
    when the fit loads: a run calls a few of a fit's classes (a dense bf16 model none of
    the FP8 / MoE ones), and reading the arrays is most of a fit's loading time.
    """

    op_class: str
    kind: str  # roofline | poly | forest
    estimator_name: str
    features: tuple[str, ...]
    source: object  # the model (RooflineModel | PolyModel), or a forest's .npz path until read
    roofline: RooflineModel
    derived_from: str | None
    metrics: dict
    feature_ranges: dict
    per_op: dict[str, LoadedClass] = field(default_factory=dict)
    domain: dict | None = None  # None: a derived class, or a fit saved before domains
    _check: DomainCheck | None = field(default=None, repr=False, compare=False)  # domain_check()'s, made once

    @property
    def model(self):
        """The model (RooflineModel | PolyModel | ForestModel); a forest's arrays read now if not yet."""
        if isinstance(self.source, Path):
            self.source = read_forest(self.source)
        return self.source

    def domain_check(self) -> DomainCheck:
        """Where this model's data lie: the saved domain, else (older fits) the box of
        ``feature_ranges`` over its features; a derived class has no data here (nothing inside).
        Made on the first call and kept (a check never changes)."""
        if self._check is None:
            self._check = self._make_check()
        return self._check

    def _make_check(self) -> DomainCheck:
        if self.domain is not None:
            return DomainCheck(self.domain)
        if self.derived_from or not self.feature_ranges:
            return DomainCheck(None)
        names = self.features if self.kind != "roofline" else CLASSES[self.op_class].log_features
        return DomainCheck.from_ranges(self.feature_ranges, names)

    def roofline_outside(self) -> bool:
        """Whether a call outside the domain is answered by the fitted roofline rather
        than this model: always for a forest (flat outside the data); for any model of
        a class with a physical domain (attention: a polynomial bends outside)."""
        return self.kind == "forest" or (self.kind != "roofline" and CLASSES[self.op_class].domain is not None)

    def predict_s(self, feats: dict) -> np.ndarray:
        """Seconds for a feature dict from :func:`~lmmsim.costmodel.features.class_features`
        (vectorised; this model only, no per-op routing)."""
        return self.model.predict_s(matrix(feats, self.features))

    def predict_in_range_s(self, feats: dict) -> np.ndarray:
        """As :meth:`predict_s`, but a forest hands rows outside its fitted feature
        box to its fitted roofline (as :class:`~lmmsim.costmodel.fitted.FittedPredictor` does)."""
        pred = self.predict_s(feats)
        if self.roofline_outside():
            if self.kind == "forest" and CLASSES[self.op_class].domain is None:  # the forest's own box
                X = matrix(feats, self.features)
                lo = np.array([self.feature_ranges[nm][0] for nm in self.features]) - 1e-9
                hi = np.array([self.feature_ranges[nm][1] for nm in self.features]) + 1e-9
                out = ((X < lo) | (X > hi)).any(axis=1)
            else:
                out = ~self.domain_check().inside_frame(feats)
            if out.any():
                pred = np.where(out, self.roofline.predict_s(matrix(feats, CLASSES[self.op_class].work_features)), pred)
        return pred


def read_forest(path: Path) -> ForestModel:
    """The forest saved at ``path`` (:func:`_save_forest`'s arrays; no pickle).

    Each array is inflated in one piece and used in place (read-only), where ``np.load``
    inflates and copies it in 256 KB chunks: the same arrays, the zip's CRC checked alike."""
    arrays = {}
    for name, data in _zip_members(path):
        header = io.BytesIO(data)
        version = np.lib.format.read_magic(header)
        shape, fortran, dtype = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                 else np.lib.format.read_array_header_2_0)(header)
        if dtype.hasobject or fortran or len(shape) != 1:
            raise ValueError(f"{path}: {name} is not a flat array of numbers")
        arrays[name.removesuffix(".npy")] = np.frombuffer(data, dtype, shape[0], header.tell())
    return ForestModel(arrays)


def _zip_members(path: Path):
    """``(name, bytes)`` of each member of the zip at ``path``, each inflated by one
    ``zlib.decompress`` into a buffer of its final size and its CRC-32 checked once
    (``ZipFile.read`` inflates in chunks and updates the CRC per chunk: a fifth slower
    over a run's ~18 MB of forests). Stored and deflated members, as ``np.savez*`` writes."""
    blob = path.read_bytes()
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        infos = zf.infolist()
    for info in infos:
        at = info.header_offset
        if blob[at:at + 4] != b"PK\x03\x04":
            raise zipfile.BadZipFile(f"{path}: {info.filename}: bad local file header")
        name_len, extra_len = struct.unpack_from("<HH", blob, at + 26)  # the local header's own lengths
        start = at + 30 + name_len + extra_len
        raw = blob[start:start + info.compress_size]
        if info.compress_type == zipfile.ZIP_DEFLATED:
            data = zlib.decompress(raw, -zlib.MAX_WBITS, info.file_size)
        elif info.compress_type == zipfile.ZIP_STORED:
            data = raw
        else:
            raise zipfile.BadZipFile(f"{path}: {info.filename}: compression {info.compress_type} not supported")
        if len(data) != info.file_size or zlib.crc32(data) != info.CRC:
            raise zipfile.BadZipFile(f"{path}: bad CRC-32 for {info.filename}")
        yield info.filename, data


@dataclass
class LoadedFit:
    gpu: str
    provenance: dict
    classes: dict[str, LoadedClass]
    doc: dict


def _load_entry(folder: Path, op_class: str, entry: dict, peaks: tuple) -> LoadedClass:
    kind = entry["kind"]
    derived = entry.get("derived_from")
    if kind == "roofline":
        model = RooflineModel(entry["params"], *(peaks if derived else (None, None, None)))
        roof = model
    elif kind == "poly":
        model, roof = PolyModel(entry["params"]), RooflineModel(entry["roofline"])
    elif kind == "forest":
        model = folder / entry["params"]["file"]  # read on first use (LoadedClass.model)
        if not model.is_file():
            raise FileNotFoundError(f"{folder / 'model.json'}: {op_class}: no forest file {model.name}")
        roof = RooflineModel(entry["roofline"])
    else:
        raise ValueError(f"{folder / 'model.json'}: {op_class}: unknown kind {kind!r}")
    per_op = {op: _load_entry(folder, op_class, {"derived_from": derived, **sub}, peaks)
              for op, sub in entry.get("per_op", {}).items()}
    return LoadedClass(op_class, kind, entry.get("estimator", kind), tuple(entry.get("features", WORK)), model, roof,
                       derived, entry.get("metrics", {}), entry.get("feature_ranges", {}), per_op,
                       entry.get("domain") if not derived else None)


def load_fit(folder: Path, gpu: GpuSpec | None = None, interconnect: LinkSpec | None = None) -> LoadedFit:
    """Rebuild the predictors of ``folder/model.json`` (no scikit-learn needed).

    A class marked ``derived_from`` (roofline parameters fitted on another GPU)
    is evaluated with ``gpu``'s peaks (``interconnect``'s bandwidth for
    collectives) when given, else with the peaks stored with it.
    """
    folder = Path(folder)
    doc = json.loads((folder / "model.json").read_text())
    if doc.get("format") != FORMAT:
        raise ValueError(f"{folder / 'model.json'}: format {doc.get('format')!r}, expected {FORMAT!r}")
    classes = {}
    for op_class, entry in doc["classes"].items():
        if op_class not in CLASSES:
            raise ValueError(f"{folder / 'model.json'}: unknown class {op_class!r}")
        # (FLOP/s, B/s, SMs) a derived class is evaluated with
        peaks = (*class_peaks(op_class, gpu, interconnect), gpu.num_sms) if gpu is not None else (None, None, None)
        classes[op_class] = _load_entry(folder, op_class, entry, peaks)
    return LoadedFit(doc.get("gpu", ""), doc.get("profile", {}), classes, doc)


# =============================================================== derive
def _derived_entry(op_class: str, entry: dict, source_gpu: str, source_profile: dict | None) -> dict:
    params = entry["params"] if entry["kind"] == "roofline" else entry["roofline"]
    out = {"kind": "roofline", "estimator": "roofline", "features": list(CLASSES[op_class].work_features)
           if params.get("num_sms") else list(WORK), "derived_from": source_gpu,
           "params": params, "metrics": entry.get("metrics", {})}
    if source_profile is not None:
        out["source_profile"] = source_profile
    if entry.get("per_op"):
        out["per_op"] = {op: _derived_entry(op_class, sub, source_gpu, None) for op, sub in entry["per_op"].items()}
    return out


def derive_classes(source_folder: Path, target_folder: Path, classes, *, target_gpu: str) -> Path:
    """Copy the fitted rooflines of ``classes`` from one GPU's fit into another's
    ``model.json`` as ``derived_from`` classes (applied with the target's peaks).

    Used where the target GPU has no profile for a class (e.g. H100 attention
    derived from A100 data). Per-op elementwise models come along as per-op
    rooflines. A class the target already fitted from data is an error.
    """
    src = json.loads((Path(source_folder) / "model.json").read_text())
    target_path = Path(target_folder) / "model.json"
    if target_path.exists():
        doc = json.loads(target_path.read_text())
    else:
        doc = {"format": FORMAT, "gpu": target_gpu, "unit": "s", "profile": {}, "peaks": {}, "skipped": {},
               "classes": {}}
    for op_class in classes:
        entry = src["classes"].get(op_class)
        if entry is None:
            raise ValueError(f"{source_folder}: no fitted {op_class!r}")
        if op_class in doc["classes"] and not doc["classes"][op_class].get("derived_from"):
            raise ValueError(f"{target_path}: {op_class!r} is already fitted from data")
        doc["classes"][op_class] = _derived_entry(op_class, entry, src.get("gpu", str(source_folder)),
                                                  src.get("profile", {}))
    target_path.parent.mkdir(parents=True, exist_ok=True)
    target_path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return target_path


# ================================================================ merge
def merge_classes(source_folder: Path, target_folder: Path, classes) -> Path:
    """Add the fitted ``classes`` of one fit folder (with their forest arrays) to another fit
    of the same GPU, leaving every class already there as it was, byte for byte.

    Used to ship classes fitted later (the FP8 / MoE ones) into a released fit without
    refitting its others; each merged entry keeps the profile it was fitted on as
    ``source_profile``. A class the target already has, or the source lacks, is an error.
    """
    source_folder, target_folder = Path(source_folder), Path(target_folder)
    src = json.loads((source_folder / "model.json").read_text())
    target_path = target_folder / "model.json"
    doc = json.loads(target_path.read_text())
    if src.get("gpu") != doc.get("gpu"):
        raise ValueError(f"{source_folder} is a fit for {src.get('gpu')!r}, {target_folder} for {doc.get('gpu')!r}")
    for op_class in classes:
        entry = src["classes"].get(op_class)
        if entry is None:
            raise ValueError(f"{source_folder}: no fitted {op_class!r}")
        if op_class in doc["classes"]:
            raise ValueError(f"{target_path}: {op_class!r} is already there")
        for sub in (entry, *entry.get("per_op", {}).values()):
            name = sub.get("params", {}).get("file")
            if name:
                (target_folder / name).write_bytes((source_folder / name).read_bytes())
        doc["classes"][op_class] = {**entry, "source_profile": src.get("profile", {})}
        if op_class in src.get("peaks", {}):
            doc.setdefault("peaks", {})[op_class] = src["peaks"][op_class]
    target_path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return target_path
