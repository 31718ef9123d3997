#!/usr/bin/env bash
# Profile the seed papers' models on one lent GPU (H200 / H100), in under 8 minutes.
#
#   bash profiles/run_gpu.sh [HARDWARE_NAME]      # default h200; writes ${OUT:-profiles/ops}/HARDWARE_NAME/
#
# Installs nothing beyond `pip install -e .` (only when lmmsim is not importable
# from the checkout). The profiler plans its grids to finish within --max-minutes 7
# (see lmmsim/profiler/run.py); `timeout` is the hard backstop at 7 min 50 s.
# Exit status: 0 on success, non-zero when the run failed or measured nothing.
set -euo pipefail

HW="${1:-h200}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python}"
DEST="${OUT:-profiles/ops}/$HW"
MODELS="qwen2.5-vl-7b,qwen2.5-vl-72b,llava-onevision-qwen2-7b,internvl3.5-38b,llava-v1.6-34b,ultravox-v0.6-27b"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

if ! "$PY" -c "import lmmsim.profiler.run" >/dev/null 2>&1; then
    echo "run_gpu.sh: lmmsim not importable, running pip install -e ." >&2
    "$PY" -m pip install -e . >&2 || { echo "run_gpu.sh: pip install -e . failed" >&2; exit 3; }
fi
"$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" \
    || { echo "run_gpu.sh: torch sees no CUDA device" >&2; exit 4; }

mkdir -p "$DEST"
start=$(date +%s)
status=0
timeout --signal=TERM --kill-after=5 470 \
    "$PY" -m lmmsim.profiler.run --device cuda --hardware "$HW" --models "$MODELS" \
    --max-minutes 7 -o "$DEST" || status=$?
elapsed=$(( $(date +%s) - start ))
echo "run_gpu.sh: profiler exit status $status after ${elapsed} s"
[ "$status" -eq 0 ] || exit "$status"

"$PY" - "$DEST" "$elapsed" <<'EOF'
import json, sys
from pathlib import Path

dest, elapsed = Path(sys.argv[1]), sys.argv[2]
meta = json.loads((dest / "meta.json").read_text())
print(f"device {meta.get('device')} ({meta.get('sm_count')} SMs, CUDA {meta.get('cuda_version')}, "
      f"driver {meta.get('driver_version')}, torch {meta.get('torch_version')})")
print(f"elapsed: profiler {meta.get('elapsed_s')} s, script {elapsed} s; thinning {meta.get('thinning', {}).get('factor')}; "
      f"skipped {meta.get('skipped')}; dropped for time {meta.get('dropped_for_time')}")
rows = meta.get("rows", {})
for cls, n in sorted(rows.items()):
    print(f"  {cls:18s} {n:6d} rows")
for key in ("elementwise_impl", "sm_limit", "allreduce"):
    print(f"  {key}: {meta.get(key)}")
for line in meta.get("skipped_examples", [])[:5]:
    print(f"  skipped: {line}")
missing = [c for c in ("gemm", "attention_prefill", "attention_decode", "elementwise", "encoder_layer") if not rows.get(c)]
if missing:
    print(f"run_gpu.sh: no rows for {missing}", file=sys.stderr)
    sys.exit(1)
EOF
