#!/usr/bin/env bash
# Rebuild every shipped operator fit (profiles/ops/<gpu>/fit) from its public data, in one go.
#
#   bash profiles/make_fits.sh [GPU ...]     # default: all; e.g. `bash profiles/make_fits.sh h200 b200`
#   bash profiles/make_fits.sh --fp8-moe-only [GPU ...]   # only the FP8 / MoE classes (below)
#
# Data (never committed; imported into ${PROFILES_TMP:-/tmp/lmmsim-profiles}):
#   * NVIDIA aiconfigurator's measured vLLM 0.24.0 kernel tables (pip install 'lmmsim[calibrate]',
#     aiconfigurator-core 0.12.0, Apache-2.0; A100: its vLLM 0.14.0 tables);
#   * Vidur's public A100 / H100 profiles (vLLM 0.6-era sarathi kernels; MIT, commit 7d47513) in
#     ${VIDUR:-/work/shared/data/vidur-profiling}.
# H100 is fitted first: the other GPUs take elementwise / p2p (which aiconfigurator does not
# measure) from its fit as rooflines at their own peaks (`lmmsim fit --derive-from`).
# The FP8 / MoE classes (gemm_fp8, attention_decode_fp8, moe_experts, moe_alltoall; see
# lmmsim/profiler/aiconfigurator_moe.py) are fitted apart and merged into a GPU's fit
# (lmmsim.costmodel.fitstore.merge_classes), for the GPUs in FP8_MOE_GPUS only (wheel size);
# --fp8-moe-only replaces just them in the shipped fits, leaving every other class as it was.
# Rerun after a change to the fitter (lmmsim/costmodel/); each fit takes 1-3 minutes on 2 cores.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VIDUR="${VIDUR:-/work/shared/data/vidur-profiling}"
TMP="${PROFILES_TMP:-/tmp/lmmsim-profiles}"
H100_FIT=profiles/ops/h100-sxm-80gb/fit
ATTN=attention_prefill,attention_decode
DENSE="gemm,$ATTN,allreduce"
FP8_MOE=gemm_fp8,attention_decode_fp8,moe_experts,moe_alltoall
FP8_MOE_GPUS=" h200 h100-sxm-80gb b200 "
mkdir -p "$TMP"

fit_into() {  # fit_into PROFILE GPU [--derive-from FIT]: fit in $TMP, then replace profiles/ops/GPU/fit
    local profile="$1" gpu="$2"; shift 2
    lmmsim fit "$profile" --out "$TMP/fit-$gpu" --force "$@"
    rm -rf "profiles/ops/$gpu/fit"
    mkdir -p "profiles/ops/$gpu/fit"
    cp "$TMP/fit-$gpu"/* "profiles/ops/$gpu/fit/"  # not the .lmmsim-files.json manifest of the scratch folder
}

fit_h100() {  # aiconfigurator H100 gemm / attention / allreduce (vLLM 0.24.0) + Vidur H100 elementwise / p2p
    # Vidur's H100 GEMMs and NCCL all-reduces (vLLM 0.6-era, fp16) put single-request TTFT 19-32% above
    # aiconfigurator's kernel sum, and TP4 decode 41% above (bench/validate_costs.py); vLLM 0.24's bf16
    # GEMMs and custom all-reduce bring it to 6-12%. Vidur keeps the kernels aiconfigurator does not measure.
    lmmsim import-vidur "$VIDUR" -o "$TMP/vidur-h100" --gpu h100 --force
    lmmsim import-aiconfigurator --gpu h100-sxm-80gb --classes "gemm,$ATTN,allreduce" --base "$TMP/vidur-h100" \
        -o "$TMP/h100-sxm-80gb" --force
    fit_into "$TMP/h100-sxm-80gb" h100-sxm-80gb
}

fit_a100() {  # Vidur A100 (all classes, attention of Llama-2-70B TP2) + aiconfigurator A100 attention (vLLM 0.14.0)
    lmmsim import-vidur "$VIDUR" -o "$TMP/vidur-a100" --gpu a100 --force
    lmmsim import-aiconfigurator --gpu a100-sxm-80gb --classes "$ATTN" --base "$TMP/vidur-a100" --append \
        -o "$TMP/a100-sxm-80gb" --force
    fit_into "$TMP/a100-sxm-80gb" a100-sxm-80gb
}

fit_aic() {  # aiconfigurator gemm / attention / allreduce; elementwise and p2p derived from the H100 fit
    lmmsim import-aiconfigurator --gpu "$1" --classes "$DENSE" -o "$TMP/$1" --force
    fit_into "$TMP/$1" "$1" --derive-from "$H100_FIT"
}

fit_fp8_moe() {  # the FP8 / MoE classes alone, fitted and merged into profiles/ops/GPU/fit (others untouched)
    case "$FP8_MOE_GPUS" in *" $1 "*) ;; *) return 0 ;; esac
    lmmsim import-aiconfigurator --gpu "$1" --classes "$FP8_MOE" -o "$TMP/$1-fp8-moe" --force
    python - "$1" "$TMP/$1-fp8-moe" "$TMP/fit-$1-fp8-moe" "profiles/ops/$1/fit" "$FP8_MOE" <<'PY'
import json, shutil, sys
from pathlib import Path
from lmmsim.catalog import get_gpu
from lmmsim.costmodel.fitstore import merge_classes
from lmmsim.costmodel.fitting import fit_profile
gpu, profile, scratch, shipped, classes = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]), sys.argv[5].split(",")
shutil.rmtree(scratch, ignore_errors=True)
fitted = fit_profile(profile, get_gpu(gpu), out=scratch, classes=classes)["classes"]
doc = json.loads((shipped / "model.json").read_text())  # drop an earlier fit of these classes
for c in classes:
    old = doc["classes"].pop(c, None)
    if old and old.get("params", {}).get("file"):
        (shipped / old["params"]["file"]).unlink(missing_ok=True)
    doc.get("peaks", {}).pop(c, None)
(shipped / "model.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
merge_classes(scratch, shipped, list(fitted))
shutil.copyfile(scratch / "report.md", shipped / "report_fp8_moe.md")
for c, m in fitted.items():
    print(f"  {c:22s} {m['chosen']:8s} held-out MAPE {m['heldout_mape_pct']:5.1f}%  P95 {m['heldout_p95_pct']:5.1f}%")
PY
}

ONLY_FP8_MOE=0
if [ "${1:-}" = "--fp8-moe-only" ]; then ONLY_FP8_MOE=1; shift; fi
GPUS=("$@")
[ ${#GPUS[@]} -gt 0 ] || GPUS=(h100-sxm-80gb a100-sxm-80gb h200 b200 gb200 l40s rtx-pro-6000)
for gpu in "${GPUS[@]}"; do
    echo "== $gpu"
    if [ "$ONLY_FP8_MOE" = 1 ]; then fit_fp8_moe "$gpu"; continue; fi
    case "$gpu" in
        h100-sxm-80gb) fit_h100 ;;
        a100-sxm-80gb) fit_a100 ;;
        h200|b200|gb200|l40s|rtx-pro-6000) fit_aic "$gpu" ;;
        *) echo "make_fits.sh: unknown GPU '$gpu'; choose from h100-sxm-80gb, a100-sxm-80gb, h200, b200, gb200, l40s, rtx-pro-6000" >&2; exit 2 ;;
    esac
    fit_fp8_moe "$gpu"
done
