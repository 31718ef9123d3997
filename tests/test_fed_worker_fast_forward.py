"""LLM workers fed by transfers -- decode workers by KV caches (``e_p_d``, ``p_d``), ``e_pd``
workers by embeddings -- fast-forward decode stretches that stop before the simulation's next
event of any kind (lmmsim.engine.replica.until_next_event): the timeline must equal stepping
bit for bit -- with two decode workers, and with KV blocks so few that stretches stop at the
pool's edge and requests are preempted."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmmsim.build import build
from lmmsim.scenario import load_scenario

from test_invariants import timeline

ROOT = Path(__file__).resolve().parent.parent
DYNAMO = ROOT / "scenarios" / "baselines" / "rps-mix-internvl38b-dynamo.yaml"
MODSERVE = ROOT / "scenarios" / "baselines" / "rps-mix-internvl38b-modserve.yaml"
TEXT_PD = ROOT / "scenarios" / "text-pd.yaml"


def _run(path: Path, overrides: list[str], fast_forward: bool):
    scn, base = load_scenario(path, [*overrides, f"sim.fast_forward={str(fast_forward).lower()}"])
    result = build(scn, base).simulation.run()
    llm = [e for e in result.frontend.workers if hasattr(e, "scheduler")]  # not the encoders
    return result, sum(e.num_steps for e in llm)


CASES = {  # (scenario, overrides, does a decode worker's next step usually end before anything else happens?)
    "e_p_d": (DYNAMO, ["workload.num_requests=150"], True),
    # each worker's steps bound the other's stretches: exact, though hardly shorter
    "e_p_d-two-decode-workers": (DYNAMO, ["workload.num_requests=150", "hardware.count=6",
                                          "deployment.decode.workers=2", "deployment.decode.gpu_ids=[[2,3],[4,5]]"],
                                 False),
    "p_d": (TEXT_PD, ["workload.num_requests=200"], True),
    "e_pd": (MODSERVE, ["workload.num_requests=150"], True),
    # KV blocks run out: stretches stop at the pool's edge, requests are preempted (23 of them)
    "p_d-tight-kv": (TEXT_PD, ["workload.num_requests=200", "deployment.gpu_memory_utilization=0.245",
                               "deployment.max_model_len=8192"], True),
}


@pytest.mark.parametrize("case", CASES)
def test_fed_worker_stretches_equal_stepping(case):
    path, overrides, saves = CASES[case]
    stepped, steps = _run(path, overrides, fast_forward=False)
    jumped, jumped_steps = _run(path, overrides, fast_forward=True)
    assert timeline(jumped) == timeline(stepped)
    assert jumped_steps == steps > 0
    assert [s.token_spans and s.token_spans[-1] for s in jumped.seqs] == \
        [s.token_spans and s.token_spans[-1] for s in stepped.seqs]
    assert case != "p_d-tight-kv" or sum(s.num_preemptions for s in jumped.seqs) > 0
    if saves:  # the stretches ran: one SimPy event for several decode steps
        assert jumped.num_events < stepped.num_events - steps // 2
