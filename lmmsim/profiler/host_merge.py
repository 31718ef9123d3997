"""``lmmsim profile-host --only``: measure some sections again and fold them into the profile already there.

Re-measuring one section should not replace the others' numbers with ones taken at another time (on
a shared VM, with other load). So a run of some sections (:data:`~lmmsim.profiler.host.SECTIONS`)
leaves the other sections' CSVs as they were: they are copied into the staged output unchanged (the
staging publishes every file it holds and drops lmmsim's earlier files it does not, so they must be
there); ``fit.json`` keeps their entries; ``meta.json`` keeps the earlier run's provenance at the top
and gains one ``reruns`` entry with this run's (its command, date, versions, sections), with the
keys that describe a re-measured section (:data:`~lmmsim.profiler.host.SECTION_META`) replaced.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from lmmsim.errors import UserError, choices
from lmmsim.profiler.host import SECTION_META, SECTIONS

# the keys of one run's meta.json that a reruns entry records
RUN_KEYS = ("command", "date", "quick", "max_minutes", "elapsed_s", "cpu_model", "cpu_count", "torch_threads",
            "platform", "python", "versions", "skipped", "timing")


def parse_only(text: str) -> tuple[str, ...]:
    """``"tokenize,encoder_dispatch"`` -> the sections in :data:`SECTIONS` order."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in SECTIONS]
    if unknown or not names:
        what = f"unknown section {unknown[0]!r}" if unknown else "names no section"
        raise UserError("--only", f"{what}; valid: {choices(SECTIONS)} (comma-separated)")
    return tuple(s for s in SECTIONS if s in names)


def check_previous(folder: Path, sections: tuple[str, ...]) -> None:
    """Raise unless ``folder`` holds a profile whose other sections can be carried over."""
    keep = [f"{op}.csv" for s, ops in SECTIONS.items() if s not in sections for op in ops]
    missing = [name for name in ("meta.json", "fit.json", *keep) if not (Path(folder) / name).is_file()]
    if missing:
        raise UserError("--only", f"{folder} holds no complete profile to merge into ({', '.join(missing)} "
                                  "missing): run without --only, or name those sections too")


def merge_previous(previous: Path, stage: Path, sections: tuple[str, ...]) -> dict:
    """Turn the partial run in ``stage`` into a whole profile: carry the other sections over from
    ``previous``, merge ``fit.json`` and ``meta.json``; return the merged meta."""
    previous, stage = Path(previous), Path(stage)
    old_meta, old_fit = (json.loads((previous / n).read_text()) for n in ("meta.json", "fit.json"))
    new_meta, new_fit = (json.loads((stage / n).read_text()) for n in ("meta.json", "fit.json"))
    for section, ops in SECTIONS.items():
        if section not in sections:
            for op in ops:
                shutil.copy2(previous / f"{op}.csv", stage / f"{op}.csv")
    fit = {**old_fit, **new_fit}  # the partial run's fit.json holds only the sections it measured
    meta = dict(old_meta)
    for section in sections:
        for key in SECTION_META[section]:
            meta[key] = new_meta.get(key)
    # libraries the earlier run did not list (tokenizers, for a profile older than tokenize.csv)
    meta["versions"] = {**new_meta.get("versions", {}), **old_meta.get("versions", {})}
    rerun = {"sections": list(sections), **{k: new_meta[k] for k in RUN_KEYS if k in new_meta}}
    meta["reruns"] = [*old_meta.get("reruns", []), rerun]
    (stage / "fit.json").write_text(json.dumps(fit, indent=1) + "\n")
    (stage / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return meta
