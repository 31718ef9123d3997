"""Vidur profile import: shapes and bytes by hand on a tiny fake tree, plus the real data when present."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from lmmsim.costmodel import opdata
from lmmsim.errors import UserError
from lmmsim.profiler.vidur_import import import_vidur

REAL = Path("/work/shared/data/vidur-profiling")
STATS = ("min", "max", "mean", "median", "std")
MLP_OPS = ("emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
           "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")


def _stats(metric: str, median: float) -> dict:
    vals = {"min": 0.9 * median, "max": 1.1 * median, "mean": median, "median": median, "std": 0.01}
    return {f"time_stats.{metric}.{s}": vals[s] for s in STATS}


def _mlp_row(ops, *, n_head, n_kv_head, n_embd, n_expanded_embd, vocab_size, gated, tokens, tp, median=0.05):
    row = {}
    for op in ops:
        row.update(_stats(op, median))
    row.update(n_head=n_head, n_kv_head=n_kv_head, n_embd=n_embd, n_expanded_embd=n_expanded_embd,
               vocab_size=vocab_size, use_gated_mlp=gated, num_tokens=tokens, num_tensor_parallel_workers=tp)
    return row


def _attn_row(*, batch, chunk, kv, prefill, median=0.1):
    row = {}
    row.update(_stats("attn_input_reshape", 0.0))
    row.update(_stats("attn_decode", float("nan") if prefill else median))
    row.update(_stats("attn_output_reshape", 0.002))
    row.update(_stats("attn_prefill", median if prefill else float("nan")))
    row.update(n_embd=8192, n_q_head=64, n_kv_head=8, block_size=16, num_tensor_parallel_workers=2,
               max_model_len=4096, batch_size=batch, prefill_chunk_size=chunk, kv_cache_size=kv,
               is_prefill=prefill, attention_backend="AttentionBackend.FLASH_ATTENTION",
               profile_method="ProfileMethod.KINETO")
    return row


def _net_rows(collective, rows):
    out = []
    for i, (workers, per_node, size, median) in enumerate(rows):
        r = {"": i}
        r.update(_stats(collective, median))
        r.update(rank=0, num_workers=workers, size=size, collective=collective, devices_per_node=per_node,
                 max_devices_per_node=8)
        out.append(r)
    return pd.DataFrame(out)


@pytest.fixture
def fake_vidur(tmp_path) -> Path:
    root = tmp_path / "vidur"
    llama = {"n_head": 32, "n_kv_head": 32, "n_embd": 4096, "n_expanded_embd": 11008, "vocab_size": 32768, "gated": True}
    rows = [_mlp_row(MLP_OPS, **llama, tokens=t, tp=tp) for tp in (1, 2) for t in (8, 4096)]
    rows[0]["time_stats.attn_pre_proj.median"] = float("nan")  # tp1, 8 tokens: a missing median
    d = root / "compute/a100/meta-llama/Llama-2-7b-hf"
    d.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(d / "mlp.csv", index=False)

    phi_ops = [op for op in MLP_OPS if op != "post_attention_layernorm"]
    phi = {"n_head": 32, "n_kv_head": 32, "n_embd": 2560, "n_expanded_embd": 10240, "vocab_size": 51200, "gated": False}
    d = root / "compute/a100/microsoft/phi-2"
    d.mkdir(parents=True)
    pd.DataFrame([_mlp_row(phi_ops, **phi, tokens=4, tp=1)]).to_csv(d / "mlp.csv", index=False)

    d = root / "compute/a100/meta-llama/Llama-2-70b-hf-tp2-attention"
    d.mkdir(parents=True)
    pd.DataFrame([
        _attn_row(batch=1, chunk=512, kv=1024, prefill=True),
        _attn_row(batch=1, chunk=64, kv=0, prefill=True),
        _attn_row(batch=4, chunk=0, kv=100, prefill=False),
        _attn_row(batch=1, chunk=0, kv=32, prefill=False),
    ]).to_csv(d / "attention.csv", index=False)

    d = root / "network/a100_dgx"
    d.mkdir(parents=True)
    _net_rows("all_reduce", [(2, 2, 2048, 0.01), (4, 4, 1048576, 0.03), (2, 1, 2048, 0.05)]).to_csv(
        d / "all_reduce.csv", index=False)
    _net_rows("send_recv", [(2, 2, 2048, 0.008), (2, 1, 2048, 0.02)]).to_csv(d / "send_recv.csv", index=False)
    d = root / "network/a100_pairwise_nvlink"
    d.mkdir(parents=True)
    _net_rows("all_reduce", [(2, 2, 4096, 0.02)]).to_csv(d / "all_reduce.csv", index=False)
    return root


def _one(df: pd.DataFrame, **where) -> pd.Series:
    sel = df
    for k, v in where.items():
        sel = sel[sel[k] == v]
    assert len(sel) == 1, (where, len(sel))
    return sel.iloc[0]


def test_gemm_shapes_per_gpu(fake_vidur, tmp_path):
    out = tmp_path / "out"
    rows = import_vidur(fake_vidur, out, gpu="a100")
    g = opdata.read_class(out, "gemm")
    assert rows["gemm"] == len(g)
    llama = g[g.source == "meta-llama/Llama-2-7b-hf"]
    # Llama-2-7B TP2: QKV column-parallel, O / down row-parallel, gate+up fused.
    assert tuple(_one(llama, op="qkv", tp=2, m=8)[["m", "n", "k"]]) == (8, 3 * 4096 // 2, 4096)
    assert tuple(_one(llama, op="o", tp=2, m=8)[["m", "n", "k"]]) == (8, 4096, 2048)
    assert tuple(_one(llama, op="gate_up", tp=2, m=4096)[["m", "n", "k"]]) == (4096, 11008, 4096)
    assert tuple(_one(llama, op="down", tp=2, m=4096)[["m", "n", "k"]]) == (4096, 4096, 5504)
    assert tuple(_one(llama, op="qkv", tp=1, m=4096)[["n", "k"]]) == (3 * 4096, 4096)
    # the NaN median (tp1, 8 tokens, QKV) is dropped and counted
    assert len(llama[(llama.op == "qkv") & (llama.tp == 1) & (llama.m == 8)]) == 0
    meta = opdata.read_meta(out)
    assert meta["dropped_rows"]["gemm"]["median missing"] == 1
    # phi-2: ungated MLP
    phi = g[g.source == "microsoft/phi-2"]
    assert tuple(_one(phi, op="gate_up")[["m", "n", "k"]]) == (4, 10240, 2560)
    # times: median in ms, min / max kept, no percentiles
    row = _one(llama, op="down", tp=2, m=4096)
    assert row.time_ms == pytest.approx(0.05)
    assert row.time_ms_min == pytest.approx(0.045) and row.time_ms_max == pytest.approx(0.055)
    assert math.isnan(row.time_ms_p10) and math.isnan(row.time_ms_p90)


def test_elementwise_bytes_follow_composed(fake_vidur, tmp_path):
    out = tmp_path / "out"
    import_vidur(fake_vidur, out, gpu="a100")
    e = opdata.read_class(out, "elementwise")
    llama = e[(e.source == "meta-llama/Llama-2-7b-hf") & (e.tp == 2) & (e.tokens == 8)]
    act = 8 * 4096 * 2
    assert _one(llama, op="embedding").num_bytes == 2 * act
    norms = llama[llama.op == "rmsnorm"]
    assert sorted(norms.vidur_op) == ["input_layernorm", "post_attention_layernorm"]
    assert set(norms.num_bytes) == {2 * act}
    assert _one(llama, op="rotary").num_bytes == 2 * 8 * (2048 + 2048) * 2  # Q and K shards, read + write
    assert _one(llama, op="silu_mul").num_bytes == 8 * (11008 + 5504) * 2  # read gate+up shard, write ffn shard
    assert _one(llama, op="add").num_bytes == 3 * act
    assert set(llama.hidden) == {4096}
    # phi-2 (parallel block, LayerNorm, GELU): the double add is left out
    phi = e[e.source == "microsoft/phi-2"]
    assert _one(phi, op="gelu").num_bytes == 4 * (10240 + 10240) * 2
    assert _one(phi, op="layernorm").num_bytes == 2 * 4 * 2560 * 2
    assert "add" not in set(phi.op)
    assert opdata.read_meta(out)["dropped_rows"]["elementwise"] == {"parallel-block add (two kernels in one timer)": 1}


def test_attention_rows(fake_vidur, tmp_path):
    out = tmp_path / "out"
    rows = import_vidur(fake_vidur, out, gpu="a100")
    assert rows["attention_prefill"] == 2 and rows["attention_decode"] == 2
    p = opdata.read_class(out, "attention_prefill")
    r = _one(p, new_tokens=512)
    assert (r.context, r.num_heads, r.num_kv_heads, r.head_dim, r.causal) == (1536, 32, 4, 128, 1)
    assert _one(p, new_tokens=64).context == 64
    assert r.time_ms == pytest.approx(0.1)  # the kernel only; the output copy is a side column
    assert r.time_ms_output_reshape == pytest.approx(0.002)
    d = opdata.read_class(out, "attention_decode")
    r = _one(d, batch=4)
    assert (r.context_sum, r.num_heads, r.num_kv_heads, r.head_dim) == (4 * 101, 32, 4, 128)
    assert _one(d, batch=1).context_sum == 33


def test_network_and_meta(fake_vidur, tmp_path):
    out = tmp_path / "out"
    rows = import_vidur(fake_vidur, out, gpu="a100")  # default network: a100_dgx
    a = opdata.read_class(out, "allreduce")
    assert sorted(zip(a.num_bytes, a.world)) == [(2048, 2), (1048576, 4)]  # the 2-node row is left out
    p = opdata.read_class(out, "p2p")
    assert list(p.num_bytes) == [2048] and rows["p2p"] == 1
    meta = json.loads((out / "meta.json").read_text())
    assert meta["source"].startswith("Vidur public profiles (microsoft/vidur, MIT licence, commit 7d47513)")
    assert meta["network_topology"] == "a100_dgx"
    assert meta["imported_by"] == "lmmsim import-vidur"
    assert meta["profile_method"]["attention"] == "kineto"
    assert meta["hardware"] == "a100-sxm-80gb"
    assert "meta-llama/Llama-2-7b-hf" in meta["models"] and "microsoft/phi-2" in meta["models"]
    assert meta["rows"] == rows
    assert meta["dropped_rows"]["allreduce"] == {"spans several nodes": 1}
    assert meta["notes"]

    out2 = tmp_path / "out2"
    rows2 = import_vidur(fake_vidur, out2, gpu="a100", network="a100_pairwise_nvlink", include_multinode=True)
    assert rows2["allreduce"] == 1 and "p2p" not in rows2  # no send_recv.csv there
    out3 = tmp_path / "out3"
    rows3 = import_vidur(fake_vidur, out3, gpu="a100", include_multinode=True)
    assert rows3["allreduce"] == 3 and rows3["p2p"] == 2
    assert sorted(opdata.read_class(out3, "p2p").num_nodes) == [1, 2]


def test_bad_arguments(fake_vidur, tmp_path):
    with pytest.raises(UserError, match="--gpu"):
        import_vidur(fake_vidur, tmp_path / "x", gpu="h100")
    with pytest.raises(UserError, match="--network"):
        import_vidur(fake_vidur, tmp_path / "x", gpu="a100", network="nope")


@pytest.mark.skipif(not REAL.is_dir(), reason="Vidur profiles not present")
@pytest.mark.parametrize("gpu", ["a100", "h100"])
def test_real_vidur_data(gpu, tmp_path):
    out = tmp_path / gpu
    rows = import_vidur(REAL, out, gpu=gpu)
    for cls in ("gemm", "elementwise", "allreduce", "p2p"):
        assert rows.get(cls, 0) > 0, cls
        assert len(opdata.read_class(out, cls)) == rows[cls]
    has_attention = gpu == "a100"
    assert ("attention_prefill" in rows) == has_attention
    assert ("attention_decode" in rows) == has_attention
    g = opdata.read_class(out, "gemm")
    qkv = g[(g.source == "meta-llama/Llama-2-7b-hf") & (g.op == "qkv") & (g.tp == 2)]
    assert len(qkv) > 0 and set(qkv.n) == {6144} and set(qkv.k) == {4096}
    assert (g.time_ms > 0).all()
    meta = opdata.read_meta(out)
    assert meta["network_topology"] == f"{gpu}_dgx"
    assert meta["rows"] == rows
