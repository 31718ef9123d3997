"""Prefill/decode disaggregation (``p_d``): text models, KV hand-off, TTFT, errors, and
decode workers' ``max_running`` (on ``p_d`` and ``e_p_d``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmmsim.costmodel.engine_overheads import EngineCostsConfig
from lmmsim.results import run_scenario
from lmmsim.scenario import scenario_cls, validate_scenario

from conftest import assert_user_error, run_cli

ROOT = Path(__file__).resolve().parent.parent
TEXT_PD = ROOT / "scenarios" / "text-pd.yaml"

ONE_REQUEST = {"num_requests": 1, "arrival": {"kind": "poisson", "rate": 1.0}}
TEXT_MIX = [{"name": "short", "weight": 1, "text_tokens": {"kind": "uniform", "low": 50, "high": 900}},
            {"name": "long", "weight": 1, "text_tokens": {"kind": "uniform", "low": 1500, "high": 3000}}]


def text_pd(**deployment) -> dict:
    """A small p_d scenario on llama-3-8b, 1 prefill + 1 decode worker (TP1 each)."""
    return {
        "name": "pd", "seed": 5, "model": "llama-3-8b",
        "hardware": {"gpu": "h100-sxm-80gb", "count": 2, "interconnect": "pcie", "cost_model": "roofline"},
        "deployment": {"kind": "p_d", "max_model_len": 8192, **deployment},
        "workload": {"num_requests": 40, "arrival": {"kind": "poisson", "rate": 20.0}, "mix": TEXT_MIX,
                     # lows of 1: some requests end at the prefill worker and never travel
                     "output_tokens": {"kind": "uniform", "low": 1, "high": 12}},
    }


def transfers_by_request(log) -> dict[int, list]:
    out: dict[int, list] = {}
    for rec in log:
        if rec.worker.startswith("link:prefill") and rec.kind == "transfer":
            out.setdefault(rec.request_ids[0], []).append(rec)
    return out


def test_text_pd_finishes_every_request_with_one_kv_transfer_each():
    run = run_scenario(validate_scenario(text_pd()), trace=True)
    seqs = run.built.simulation.seqs
    assert {s.status for s in seqs} == {"finished"}
    for s in seqs:  # tokens conserved: every output token generated once, prompt computed whole
        assert s.num_generated == s.request.num_output_tokens
        assert s.num_computed >= s.request.num_prompt_tokens
    transfers = transfers_by_request(run.built.step_log)
    travelled = {s.request.request_id for s in seqs if s.request.num_output_tokens > 1}
    assert 0 < len(travelled) < len(seqs)  # the workload has both kinds
    assert set(transfers) == travelled
    assert all(len(recs) == 1 for recs in transfers.values())
    assert run.summary["deployment"]["num_kv_transfers"] == len(travelled)
    on_decode = {rid for rec in run.built.step_log if rec.worker == "decode0" for rid in rec.request_ids}
    assert on_decode == travelled
    for engine in run.built.simulation.frontend.llm_engines:  # every KV block returned
        assert engine.scheduler.pool.num_free == engine.scheduler.pool.num_blocks
    plan = run.summary["deployment"]
    assert plan["kind"] == "p_d" and set(plan["pools"]) == {"prefill", "decode"}
    assert plan["pools"]["prefill"]["gpu_ids"] == [[0]] and plan["pools"]["decode"]["gpu_ids"] == [[1]]


@pytest.mark.parametrize("first_token", ["decode", "prefill"])
def test_ttft_includes_the_kv_transfer_unless_the_prefill_worker_streams_it(first_token):
    run = run_scenario(validate_scenario(text_pd(first_token=first_token)), trace=True)
    log = run.built.step_log
    transfers = transfers_by_request(log)
    prefill_end = {}
    for rec in log:
        if rec.worker == "prefill0":
            for rid in rec.request_ids:
                prefill_end[rid] = max(prefill_end.get(rid, 0.0), rec.end_at)
    checked = 0
    for s in run.built.simulation.seqs:
        rid = s.request.request_id
        if rid not in transfers:  # one output token: it ends at the prefill worker
            assert s.first_token_at == s.finished_at == prefill_end[rid]
            continue
        (kv,) = transfers[rid]
        assert kv.end_at > kv.start_at >= prefill_end[rid]
        expected = kv.end_at if first_token == "decode" else prefill_end[rid]
        assert s.first_token_at == pytest.approx(expected, abs=1e-12)
        checked += 1
    assert checked > 10


def test_text_pd_example_runs_through_the_cli(capsys, tmp_path):
    out = tmp_path / "tpd"
    code, stdout, err = run_cli(capsys, "run", TEXT_PD, "-o", out, "--force", "-q",
                                "--set", "workload.num_requests=30")
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_finished"] == 30
    assert summary["deployment"]["kind"] == "p_d"
    assert summary["deployment"]["num_kv_transfers"] == 30  # lognormal outputs: all > 1 token
    code, stdout, err = run_cli(capsys, "validate", TEXT_PD)
    assert code == 0, err
    assert "deployment p_d" in stdout and "prefill: 1 worker(s) on GPUs [[0]]" in stdout
    assert "decode: 1 worker(s) on GPUs [[1]]" in stdout


def test_dynamo_preset_on_a_text_model_is_p_d():
    scn = validate_scenario({"system": "dynamo", "model": "llama-3-8b",
                             "hardware": {"gpu": "h100-sxm-80gb", "count": 4},
                             "workload": {**ONE_REQUEST, "mix": TEXT_MIX}})
    dep = scn.deployment
    assert (dep.kind, dep.prefill.tp, dep.decode.tp) == ("p_d", 2, 2)
    mm = validate_scenario({"system": "dynamo", "model": "qwen2.5-vl-7b",
                            "hardware": {"gpu": "h100-sxm-80gb", "count": 4},
                            "workload": {**ONE_REQUEST, "mix": TEXT_MIX}})
    assert mm.deployment.kind == "e_p_d"


def test_multimodal_p_d_encodes_at_the_prefill_worker():
    raw = text_pd()
    raw["model"] = "qwen2.5-vl-7b"
    raw["workload"]["mix"] = [*TEXT_MIX, {"name": "img", "weight": 2, "text_tokens": {"kind": "fixed", "value": 60},
                                          "images": {"count": 2, "width": 672, "height": 672}}]
    run = run_scenario(validate_scenario(raw), trace=True)
    seqs = run.built.simulation.seqs
    assert {s.status for s in seqs} == {"finished"}
    media = [s for s in seqs if s.request.media_segments]
    assert media and all(s.encode_finished_at <= s.first_token_at for s in media)
    # the encoder runs inside the prefill worker's steps; no encoder pool, no embeddings travel
    assert set(run.built.placement) == {"prefill", "decode"}
    assert not any(rec.worker.startswith(("encoder", "link:encoder")) for rec in run.built.step_log)
    plans = run.built.memory
    assert plans["prefill"].weight_bytes > plans["decode"].weight_bytes  # encoder weights on prefill GPUs


# The same e_p_d scenario's summary before p_d existed (git b9a6ee0, roofline, engine
# overheads off): the refactoring to share e_p_d's machinery must not move it.
EPD_BEFORE = {"sim_end_at_s": 8.288281116195137, "sim_steps": 1288, "num_kv_transfers": 60,
              "ttft_mean": 0.029689335116649184, "ttft_p99": 0.055758569826880544}


def test_e_p_d_with_a_multimodal_model_is_unchanged():
    raw = {"name": "epd-mm", "seed": 3, "system": "dynamo", "model": "qwen2.5-vl-7b",
           "hardware": {"gpu": "h100-sxm-80gb", "count": 3, "cost_model": "roofline"},
           "deployment": {"max_model_len": 16384},
           "workload": {"num_requests": 60, "arrival": {"kind": "poisson", "rate": 8.0},
                        "mix": [{"name": "t", "weight": 1,
                                 "text_tokens": {"kind": "uniform", "low": 100, "high": 2000}},
                                {"name": "i", "weight": 1, "text_tokens": {"kind": "fixed", "value": 80},
                                 "images": {"count": 1, "width": 896, "height": 896}}],
                        "output_tokens": {"kind": "uniform", "low": 1, "high": 120}}}
    if "engine" in scenario_cls().model_fields:  # per-step engine costs came later: the kernels only
        raw["engine"] = {"cudagraph_padding": False, "collective_launch_us": 0, "kv_write": "off"}
        if "encoder_h2d" in EngineCostsConfig.model_fields:  # encoder-call host costs came later still
            raw["engine"].update(encoder_h2d=False, encoder_launch_us=0)
    if "host" in scenario_cls().model_fields:  # host preprocessing came later too
        raw["host"] = {"placement": "none"}
    s = run_scenario(validate_scenario(raw)).summary
    got = {"sim_end_at_s": s["sim_end_at_s"], "sim_steps": s["sim_steps"],
           "num_kv_transfers": s["deployment"]["num_kv_transfers"],
           "ttft_mean": s["ttft_s"]["mean"], "ttft_p99": s["ttft_s"]["p99"]}
    assert got == pytest.approx(EPD_BEFORE, rel=1e-12)


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize("sets, needles", [
    (["deployment.kind=e_p_d"], ["deployment.kind", "llama-3-8b has no encoder", "p_d"]),
    (["deployment=null", "deployment.kind=e_pd"],
     ["deployment.kind", "llama-3-8b has no encoder", "monolithic or p_d"]),
    (["deployment.encoder={tp: 1}"], ["deployment.encoder", "unknown key", "'prefill'"]),
    (["deployment.admission=streaming"], ["deployment.admission", "unknown key"]),
    (["deployment.first_token=later"], ["deployment.first_token", "prefill", "decode"]),
    (["hardware.count=1"], ["deployment", "hardware.count is 1"]),
    (["deployment.prefill.gpu_ids=[[0]]", "deployment.decode.gpu_ids=[[0]]"],
     ["deployment", "GPU 0 is given to prefill worker 0 and decode worker 0", "own GPUs"]),
])
def test_bad_p_d_combinations_are_one_line_errors(capsys, sets, needles):
    argv = ["validate", TEXT_PD]
    for s in sets:
        argv += ["--set", s]
    assert_user_error(capsys, argv, *needles)


# ----------------------------------------------------- decode max_running
def widest_decode_step(log, worker_prefix: str = "decode") -> int:
    """Most sequences in one step of a decode worker (its step log records)."""
    sizes = [rec.batch_size for rec in log
             if rec.worker.startswith(worker_prefix) and rec.kind in ("prefill", "decode", "mixed")]
    assert sizes
    return max(sizes)


BURST = {"num_requests": 64, "arrival": {"kind": "deterministic", "rate": 10_000.0},
         "mix": [{"name": "t", "weight": 1, "text_tokens": {"kind": "fixed", "value": 64}}],
         "output_tokens": {"kind": "fixed", "value": 40}}


def test_p_d_decode_worker_honours_max_running_under_a_burst():
    raw = text_pd(max_in_flight_kv_transfers=None)
    raw["workload"] = BURST
    raw["policy"] = {"batching": {"kind": "chunked_prefill", "token_budget": 2048, "max_running": 8}}
    run = run_scenario(validate_scenario(raw), trace=True)
    assert {s.status for s in run.built.simulation.seqs} == {"finished"}
    # the burst hands many requests off at once: the cap binds (8 on the decode worker)
    assert widest_decode_step(run.built.step_log) == 8


def test_p_d_decode_worker_that_preempts_stays_within_max_running():
    """A decode KV cache of ~3 requests: it preempts, and re-admits its own preempted
    requests beside reservations for transfers under way, never above max_running."""
    raw = text_pd(max_in_flight_kv_transfers=None, max_model_len=512)
    raw["workload"] = {**BURST, "num_requests": 24, "output_tokens": {"kind": "fixed", "value": 200}}
    raw["policy"] = {"batching": {"kind": "chunked_prefill", "token_budget": 2048, "max_running": 4}}
    probe = run_scenario(validate_scenario({**raw, "workload": {**raw["workload"], "num_requests": 1}}))
    plan = probe.built.memory["decode"]
    kv_per_token = plan.kv_bytes / plan.kv_capacity_tokens
    # keep ~3 requests' worth (264 tokens each at the end) of KV: shrink by the activation reserve
    raw["deployment"]["activation_reserve_gib"] = (plan.activation_bytes + plan.kv_bytes
                                                   - 3 * 264 * kv_per_token) / 2**30
    run = run_scenario(validate_scenario(raw), trace=True)
    assert {s.status for s in run.built.simulation.seqs} == {"finished"}
    assert run.summary["num_preemptions"] > 0
    assert widest_decode_step(run.built.step_log) <= 4


def test_e_p_d_decode_worker_honours_max_running_under_a_burst():
    raw = {"name": "epd-burst", "seed": 1, "system": "dynamo", "model": "qwen2.5-vl-7b",
           "hardware": {"gpu": "h100-sxm-80gb", "count": 3, "cost_model": "roofline"},
           "deployment": {"max_model_len": 4096, "max_in_flight_kv_transfers": None,
                          "prefill": {"workers": 1, "tp": 1}},
           "policy": {"batching": {"kind": "chunked_prefill", "token_budget": 2048, "max_running": 8}},
           "workload": {**BURST, "mix": [*BURST["mix"], {"name": "i", "weight": 1,
                                                         "text_tokens": {"kind": "fixed", "value": 30},
                                                         "images": {"count": 1, "width": 448, "height": 448}}]}}
    run = run_scenario(validate_scenario(raw), trace=True)
    assert {s.status for s in run.built.simulation.seqs} == {"finished"}
    assert widest_decode_step(run.built.step_log) == 8
