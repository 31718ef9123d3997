"""aiconfigurator table import: mapping checked by hand on a tiny fake parquet tree, plus the real
H100 tables when the package is installed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

from lmmsim.cli import main
from lmmsim.costmodel import opdata
from lmmsim.errors import UserError
from lmmsim.profiler import aiconfigurator_import as aic
from lmmsim.profiler.aiconfigurator_import import import_aiconfigurator

GPU = "h100_sxm"
V = "0.24.0"


def _write(root: Path, rel: str, rows: list[dict], runtime: dict | None = None) -> None:
    path = root / GPU / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path)
    if runtime:
        (path.parent / "collection_meta.yaml").write_text(
            f"schema_version: 1\nruntime:\n  framework: {runtime['framework']}\n  version: {runtime['version']}\n")


def _attn(kernel="vllm_flash_attn_fa3", kv="bfloat16", window=0, **shape) -> dict:
    return {"device": "NVIDIA H100 80GB HBM3", "kernel_source": kernel, "attn_dtype": "bfloat16",
            "kv_cache_dtype": kv, "window_size": window, "beam_width": 1, **shape}


@pytest.fixture
def fake_root(tmp_path) -> Path:
    root = tmp_path / "data"
    vllm = {"framework": "vllm", "version": V}
    _write(root, f"gemm/vllm/{V}/gemm_perf.parquet", [
        {"device": "NVIDIA H100 80GB HBM3", "kernel_source": "torch.nn.functional.linear", "gemm_dtype": "bfloat16",
         "m": 16, "n": 4096, "k": 4096, "latency": 0.02},
        {"device": "NVIDIA H100 80GB HBM3", "kernel_source": "CutlassFP8ScaledMMLinearKernel", "gemm_dtype": "fp8",
         "m": 16, "n": 4096, "k": 4096, "latency": 0.01},
    ], vllm)
    _write(root, f"attention/vllm/{V}/context_attention_perf.parquet", [
        _attn(batch_size=4, isl=512, num_heads=32, num_key_value_heads=8, head_dim=128, step=0, latency=0.3),
        _attn(kv="fp8", batch_size=4, isl=512, num_heads=32, num_key_value_heads=8, head_dim=128, step=0, latency=0.2),
        _attn(window=128, batch_size=1, isl=512, num_heads=32, num_key_value_heads=8, head_dim=128, step=0, latency=0.1),
        _attn(kernel="vllm_flash_attn_fa4", batch_size=1, isl=256, num_heads=32, num_key_value_heads=8, head_dim=128,
              step=0, latency=0.05),
    ], vllm)
    _write(root, f"attention/vllm/{V}/generation_attention_perf.parquet", [
        _attn(batch_size=8, isl=1, num_heads=32, num_key_value_heads=8, head_dim=128, step=1023, latency=0.04),
    ], vllm)
    _write(root, f"encoder_attention/vllm/{V}/encoder_attention_perf.parquet", [
        {"device": "NVIDIA H100 80GB HBM3", "kernel_source": "vllm_vit_flash_attn_fa3", "attn_dtype": "bfloat16",
         "batch_size": 16, "isl": 1024, "num_heads": 16, "head_dim": 80, "latency": 0.5},
    ], vllm)
    small, large = 1024, 8 * 1024 * 1024  # elements: 2 KiB and 16 MiB of bf16
    custom = [{"device": "x", "kernel_source": ks, "allreduce_dtype": "bfloat16", "num_gpus": w, "message_size": s,
               "latency": lat, "backend": "b"}
              for w in (2, 8) for s, lat in ((small, 0.004), (large, 0.2))
              for ks, lat in (("vLLM_custom_graph", lat), ("vLLM_custom_eager", lat * 3))]
    _write(root, f"comm/vllm/{V}/custom_allreduce_perf.parquet", custom, vllm)
    nccl = [{"device": "x", "op_name": op, "kernel_source": "NCCL", "nccl_dtype": "half", "num_gpus": w,
             "message_size": s, "latency": lat}
            for op in ("all_reduce", "all_gather") for w in (2, 8) for s, lat in ((small, 0.015), (large, 0.19))]
    _write(root, "comm/nccl/2.29.2/nccl_perf.parquet", nccl, {"framework": "nccl", "version": "2.29.2"})
    return root


def test_mapping_folds_batch_into_heads(fake_root, tmp_path):
    out = tmp_path / "p"
    rows = import_aiconfigurator(out, gpu="h100-sxm-80gb", root=fake_root)
    assert rows == {"gemm": 1, "attention_prefill": 2, "attention_decode": 1, "allreduce": 4}

    gemm = opdata.read_class(out, "gemm")
    assert gemm[["m", "n", "k"]].values.tolist() == [[16, 4096, 4096]] and gemm["time_ms"][0] == 0.02

    pre = opdata.read_class(out, "attention_prefill")
    causal = pre[pre["causal"] == 1].iloc[0]  # 4 x 512 tokens, 32 / 8 heads -> one sequence, 128 / 32 heads
    assert (causal.new_tokens, causal.context, causal.num_heads, causal.num_kv_heads, causal.head_dim) == \
        (512, 512, 128, 32, 128)
    assert causal.batch_size == 4 and causal.time_ms == 0.3  # bf16 KV, no window, FA3 only
    enc = pre[pre["causal"] == 0].iloc[0]  # ViT: no GQA, 16 x 16 heads
    assert (enc.new_tokens, enc.context, enc.num_heads, enc.num_kv_heads, enc.head_dim) == (1024, 1024, 256, 256, 80)

    dec = opdata.read_class(out, "attention_decode").iloc[0]  # 8 sequences with 1023 cached + the new token
    assert (dec.batch, dec.context_sum, dec.num_heads, dec.num_kv_heads, dec.head_dim) == (8, 8 * 1024, 32, 8, 128)

    ar = opdata.read_class(out, "allreduce").set_index(["world", "num_bytes"])
    assert ar.loc[(2, 2048), "kernel"] == "vLLM_custom_graph" and ar.loc[(2, 2048), "time_ms"] == 0.004
    assert ar.loc[(8, 16 * 2**20), "kernel"] == "nccl" and ar.loc[(8, 16 * 2**20), "time_ms"] == 0.19
    assert len(ar) == 4  # eager rows, all_gather and the losing variant left out


def test_meta_records_provenance(fake_root, tmp_path):
    out = tmp_path / "p"
    import_aiconfigurator(out, gpu=GPU, root=fake_root, command="lmmsim import-aiconfigurator --gpu h100_sxm")
    meta = opdata.read_meta(out)
    assert meta["package"]["name"] == "aiconfigurator-core" and meta["package"]["licence"] == "Apache-2.0"
    assert meta["backend"] == "vllm" and meta["backend_version"] == V
    assert "vllm 0.24.0" in meta["runtime_versions"] and "nccl 2.29.2" in meta["runtime_versions"]
    assert meta["device"] == "NVIDIA H100 80GB HBM3, x" and meta["hardware"] == "h100-sxm-80gb"
    assert f"{GPU}/gemm/vllm/{V}/gemm_perf.parquet" in meta["source_files"]
    assert all(not Path(p).is_absolute() for p in meta["source_files"])
    assert meta["kernels"]["context"] == "vllm_flash_attn_fa3" and meta["command"].startswith("lmmsim ")
    assert meta["date"] and meta["data_root"] == str(fake_root)
    assert meta["dropped_rows"][f"{GPU}/gemm/vllm/{V}/gemm_perf.parquet"] == {"not bfloat16": 1}


def test_kernel_classes_and_base(fake_root, tmp_path):
    out = tmp_path / "fa4"
    rows = import_aiconfigurator(out, gpu=GPU, root=fake_root, kernel="vllm_flash_attn_fa4",
                                 classes=["attention_prefill"])
    assert rows == {"attention_prefill": 2}  # the FA4 context row + the encoder row
    assert not opdata.csv_path(out, "gemm").exists()
    with pytest.raises(UserError, match="choose from 'vllm_flash_attn_fa3', 'vllm_flash_attn_fa4'"):
        import_aiconfigurator(tmp_path / "x", gpu=GPU, root=fake_root, kernel="nope", classes=["attention_prefill"])
    combined = tmp_path / "combined"
    import_aiconfigurator(combined, gpu=GPU, root=fake_root, classes=["attention_decode"], base=out)
    assert opdata.read_class(combined, "attention_prefill") is not None  # copied from the base
    assert opdata.read_meta(combined)["base"]["classes"] == ["attention_prefill"]


def test_bad_arguments(fake_root, tmp_path):
    with pytest.raises(UserError, match=r"--gpu: unknown GPU 'b200'; choose from 'h100-sxm-80gb', 'h100_sxm'"):
        import_aiconfigurator(tmp_path / "x", gpu="b200", root=fake_root)
    with pytest.raises(UserError, match=r"--backend: unknown backend 'tgi'; choose from 'sglang', 'trtllm', 'vllm'"):
        import_aiconfigurator(tmp_path / "x", gpu=GPU, backend="tgi", root=fake_root)
    with pytest.raises(UserError, match=r"--backend: h100_sxm has no 'sglang' tables; choose from 'vllm'"):
        import_aiconfigurator(tmp_path / "x", gpu=GPU, backend="sglang", root=fake_root)
    with pytest.raises(UserError, match=r"--version: .* no tables for version '0.1'; choose from '0.24.0'"):
        import_aiconfigurator(tmp_path / "x", gpu=GPU, version="0.1", root=fake_root)
    with pytest.raises(UserError, match="--classes: unknown class"):
        import_aiconfigurator(tmp_path / "x", gpu=GPU, classes=["p2p"], root=fake_root)


def test_missing_package_is_one_line(monkeypatch):
    monkeypatch.delenv(aic.DATA_ENV, raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match="aiconfigurator-core package is not installed"):
        aic.data_root()


def test_cli_errors_and_force(fake_root, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(aic.DATA_ENV, str(fake_root))
    out = tmp_path / "p"
    assert main(["import-aiconfigurator", "--gpu", "h100-sxm-80gb", "-o", str(out)]) == 0
    assert "gemm 1" in capsys.readouterr().out
    assert "--gpu h100-sxm-80gb" in opdata.read_meta(out)["command"]
    assert main(["import-aiconfigurator", "--gpu", "h100-sxm-80gb", "-o", str(out)]) == 2  # no --force
    err = capsys.readouterr().err
    assert "--force" in err and len(err.strip().splitlines()) == 1
    assert main(["import-aiconfigurator", "--gpu", "h100-sxm-80gb", "-o", str(out), "--force"]) == 0
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "gemm.csv").write_text("a user's file\n")
    assert main(["import-aiconfigurator", "--gpu", "h100_sxm", "-o", str(tmp_path / "mine"), "--force"]) == 2
    assert "gemm.csv" in capsys.readouterr().err
    assert (tmp_path / "mine" / "gemm.csv").read_text() == "a user's file\n"  # never replaced
    for argv in (["--gpu", "nope"], ["--gpu", "h100_sxm", "--backend", "tgi"]):
        assert main(["import-aiconfigurator", *argv, "-o", str(tmp_path / "y")]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "choose from" in err and "Traceback" not in err


@pytest.mark.skipif(importlib.util.find_spec("aiconfigurator_core") is None, reason="aiconfigurator-core not installed")
def test_real_h100_tables(tmp_path, monkeypatch):
    monkeypatch.delenv(aic.DATA_ENV, raising=False)
    out = tmp_path / "h100"
    rows = import_aiconfigurator(out, gpu="h100-sxm-80gb", classes=["attention_decode", "allreduce"])
    assert rows["attention_decode"] > 1000 and rows["allreduce"] > 30
    meta = json.loads((out / "meta.json").read_text())
    assert meta["package"]["version"] and meta["kernels"]["generation"] == "vllm_flash_attn_fa3"
    assert "H100" in meta["device"]
    ar = opdata.read_class(out, "allreduce")
    big = ar[(ar["world"] == 8)].sort_values("num_bytes").iloc[-1]
    busbw = 2 * 7 / 8 * big.num_bytes / (big.time_ms / 1e3) / 1e9  # GB/s: message_size read as elements
    assert 300 < busbw < 600


def test_pcie_gpus_use_nccl_beyond_two(fake_root, tmp_path):
    (fake_root / GPU).rename(fake_root / "l40s")  # same tables, a PCIe-only GPU's folder
    out = tmp_path / "p"
    import_aiconfigurator(out, gpu="l40s", root=fake_root, classes=["allreduce"])
    ar = opdata.read_class(out, "allreduce").set_index(["world", "num_bytes"])
    assert ar.loc[(2, 2048), "kernel"] == "vLLM_custom_graph"  # faster, and vLLM enables it for 2 PCIe GPUs
    assert ar.loc[(8, 2048), "kernel"] == "nccl" and ar.loc[(8, 2048), "time_ms"] == 0.015
    assert opdata.read_meta(out)["hardware"] == "l40s"


def test_append_keeps_the_base_rows(fake_root, tmp_path):
    base = tmp_path / "base"
    import_aiconfigurator(base, gpu=GPU, root=fake_root, classes=["attention_decode"])
    out = tmp_path / "both"
    rows = import_aiconfigurator(out, gpu=GPU, root=fake_root, classes=["attention_decode"], base=base, append=True)
    assert rows == {"attention_decode": 2}
    assert opdata.read_meta(out)["base"]["appended_rows"] == {"attention_decode": 1}
    with pytest.raises(UserError, match="--append: needs --base"):
        import_aiconfigurator(tmp_path / "x", gpu=GPU, root=fake_root, append=True)
