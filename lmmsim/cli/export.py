"""``lmmsim export vllm``: a run folder as ``vllm bench serve --save-result`` writes it
(:mod:`lmmsim.vllm_export`)."""

from __future__ import annotations

import json
from pathlib import Path

from lmmsim.errors import UserError


def _floats(text: str, flag: str) -> tuple[float, ...]:
    try:
        values = tuple(float(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise UserError(flag, f"expected comma-separated numbers, got {text!r}") from None
    if not values or any(not 0 <= v <= 100 for v in values):
        raise UserError(flag, f"expected percentiles between 0 and 100, got {text!r}")
    return values


def cmd_export_vllm(args) -> int:
    from lmmsim.outputs import atomic_path
    from lmmsim.vllm_export import export_vllm

    out = Path(args.output)
    if out.exists() and not args.force:
        raise UserError("-o", f"{out} exists; pass --force to overwrite it")
    metrics = tuple(m.strip() for m in args.percentile_metrics.split(",") if m.strip())
    result = export_vllm(Path(args.run_dir), metrics=metrics,
                         percentiles=_floats(args.metric_percentiles, "--metric-percentiles"),
                         detailed=args.save_detailed)
    with atomic_path(out) as tmp:
        Path(tmp).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 0
