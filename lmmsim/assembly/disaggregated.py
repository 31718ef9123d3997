"""``e_pd`` and ``e_p_d``: encoder workers send embeddings to prefill (or prefill+decode)
workers; with a decode pool, KV caches go on to decode workers. EAServe's local prefill
workers (on the encoder GPUs) join the prefill workers, after the remote ones.
"""

from __future__ import annotations

from lmmsim import policies
from lmmsim.assembly.colocation import Colocation
from lmmsim.assembly.parts import Parts, encoder_cache, make_engine, worker_name
from lmmsim.engine.disaggregation import DisaggregatedFrontend, EmbeddingInbox, egress
from lmmsim.engine.encoder import EncoderWorker
from lmmsim.placement import GIB


class FrontendCallbacks:
    """Routes engine and encoder events to the front end, which is built after them
    (it takes the engines): each callback looks the front end up when it fires."""

    def __init__(self):
        self.frontend = None

    def on_batch(self, i):
        return lambda plan: self.frontend.on_batch(i, plan)

    def on_handoff(self, i):
        return lambda seq: self.frontend.on_prefilled(i, seq)

    def on_decode_finish(self, d, on_finish):
        def finished(seq):
            on_finish(seq)
            self.frontend.on_decode_finish(d)
        return finished

    def on_encoded(self, e):
        return lambda batch, started_at, ended_at: self.frontend.on_encoded(e, batch)

    def resend(self, encoder, items):
        self.frontend.send_embeddings(encoder, items)


def first_pool(parts: Parts) -> str:
    """The pool arrivals (or embeddings) reach first: prefill+decode ``llm`` or ``prefill``."""
    return "llm" if "llm" in parts.pools else "prefill"


def decode_engines(parts: Parts, colocation, calls: FrontendCallbacks, env, on_finish, barrier_at) -> list:
    if "decode" not in parts.pools:
        return []
    return [make_engine(parts, colocation, env, "decode", d, calls.on_decode_finish(d, on_finish), barrier_at,
                        media="remote")
            for d in range(parts.pools["decode"].workers)]


def kv_senders(parts: Parts, env, prefill_gpus: list[int]) -> list:
    """One KV-cache link per prefill worker (``prefill_gpus``: GPUs each sends from)."""
    dep = parts.scn.deployment
    return [egress(env, parts.link, n, f"prefill{p}->decode", dep.max_in_flight_kv_transfers, parts.on_transfer)
            for p, n in enumerate(prefill_gpus)]


def _local_prefill(parts, colocation, calls, env, on_finish, barrier_at, n_remote: int):
    """EAServe's local prefill engines and, per encoder, the index of the one on its GPUs."""
    if "local_prefill" not in parts.pools:
        return [], []
    engines = [make_engine(parts, colocation, env, "local_prefill", j, on_finish, barrier_at, media="remote",
                           prefill_only=True, on_handoff=calls.on_handoff(n_remote + j),
                           on_batch=calls.on_batch(n_remote + j))
               for j in range(parts.pools["local_prefill"].workers)]
    local = parts.placement["local_prefill"]
    targets = [n_remote + next(j for j, lids in enumerate(local) if ids[0] in lids)
               for ids in parts.placement["encoder"]]
    return engines, targets


def _encoders(parts, colocation, calls, env, local_target: list[int], n_remote: int) -> list:
    enc_pool = parts.pools["encoder"]
    workers = []
    for e in range(enc_pool.workers):
        ids = parts.placement["encoder"][e]
        split = (colocation.sm_split(e, worker_name("local_prefill", local_target[e] - n_remote, False))
                 if parts.sm_table is not None else None)
        workers.append(EncoderWorker(
            env, e, f"encoder{e}", parts.costs["encoder"], policies.create("encode_dispatch", enc_pool.dispatch),
            ids, calls.on_encoded(e), step_log=parts.log, run=colocation.runner(f"encoder{e}", ids), split=split,
            call_overhead_s=enc_pool.call_overhead_s, encoder_cache=encoder_cache(parts)))
        if parts.host is not None:
            parts.host.attach_encoder(env, workers[-1])
    return workers


def assemble_disaggregated(parts: Parts, env, on_finish, barrier_at) -> DisaggregatedFrontend:
    # Engines other than the monolithic ones get work from transfers, not only arrivals, so their
    # fast-forward stops before the simulation's next event that is not their own (anything may
    # route work to them): an e_pd LLM pipeline's run ahead (lmmsim.engine.pipeline_ff) and a
    # one-stage worker's decode stretch on GPUs of its own (lmmsim.engine.replica.until_next_event,
    # set in make_engine). Prefill-only workers never decode: they step.
    scn, pools = parts.scn, parts.pools
    dep, router_cfg = scn.deployment, scn.policy.router
    colocation, calls = Colocation(parts, env), FrontendCallbacks()
    first = first_pool(parts)
    prefill_only = first == "prefill"
    pipeline_ff = scn.sim.fast_forward and not prefill_only and pools[first].pp > 1
    llm = [make_engine(parts, colocation, env, first, i, on_finish, barrier_at, media="remote",
                       prefill_only=prefill_only, on_handoff=calls.on_handoff(i) if prefill_only else None,
                       on_batch=calls.on_batch(i), fast_forward=pipeline_ff,
                       outside_events_stop=True)
           for i in range(pools[first].workers)]
    n_remote = len(llm)
    local, local_target = _local_prefill(parts, colocation, calls, env, on_finish, barrier_at, n_remote)
    llm += local
    decode = decode_engines(parts, colocation, calls, env, on_finish, barrier_at)
    encoders = _encoders(parts, colocation, calls, env, local_target, n_remote)
    enc_pool = pools["encoder"]
    enc_senders = [egress(env, parts.link, enc_pool.tp, f"encoder{e}->{first}", enc_pool.max_in_flight_sends,
                          parts.on_transfer) for e in range(enc_pool.workers)]
    prefill_gpus = [pools[first].gpus_per_worker] * pools[first].workers
    if "local_prefill" in pools:
        prefill_gpus += [pools["local_prefill"].tp] * pools["local_prefill"].workers
    inboxes = [EmbeddingInbox(env, e, dep.embedding_buffer_gib * GIB, parts.hidden_bytes,
                              admit_when_complete=dep.admission == "after_encode", resend=calls.resend)
               for e in llm]
    frontend = DisaggregatedFrontend(
        env, encoders=encoders, llm_engines=llm, inboxes=inboxes, encoder_senders=enc_senders,
        router=policies.create("router", router_cfg), streaming=dep.admission == "streaming",
        decode_engines=decode, kv_senders=kv_senders(parts, env, prefill_gpus) if decode else None,
        kv_bytes_per_token=parts.kv_bytes_per_token,
        decode_router=policies.create("router", router_cfg) if decode else None,
        envelope=enc_pool.envelope_transfer,
        offload=policies.create("offload", dep.local_prefill.offload) if local_target else None,
        local_target=local_target,
    )
    frontend.arbiters = colocation.arbiters
    calls.frontend = frontend
    return frontend
