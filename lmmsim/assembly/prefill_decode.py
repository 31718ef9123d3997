"""``p_d``: prefill and decode pools without an encoder pool (DistServe, Splitwise, Dynamo
on a text model). e_p_d's machinery with no encoders, inboxes or embedding links; a
multimodal model's prefill workers encode its media in their own steps."""

from __future__ import annotations

from lmmsim import policies
from lmmsim.assembly.colocation import Colocation
from lmmsim.assembly.disaggregated import FrontendCallbacks, decode_engines, kv_senders
from lmmsim.assembly.parts import Parts, make_engine
from lmmsim.engine.disaggregation import DisaggregatedFrontend


def assemble_prefill_decode(parts: Parts, env, on_finish, barrier_at) -> DisaggregatedFrontend:
    scn, pools = parts.scn, parts.pools
    dep, router_cfg = scn.deployment, scn.policy.router
    colocation, calls = Colocation(parts, env), FrontendCallbacks()
    prefill = [make_engine(parts, colocation, env, "prefill", i, on_finish, barrier_at, media="local",
                           prefill_only=True, on_handoff=calls.on_handoff(i))
               for i in range(pools["prefill"].workers)]
    decode = decode_engines(parts, colocation, calls, env, on_finish, barrier_at)
    frontend = DisaggregatedFrontend(
        env, encoders=[], llm_engines=prefill, inboxes=[], encoder_senders=[],
        router=policies.create("router", router_cfg), streaming=False, decode_engines=decode,
        kv_senders=kv_senders(parts, env, [pools["prefill"].gpus_per_worker] * len(prefill)),
        kv_bytes_per_token=parts.kv_bytes_per_token,
        decode_router=policies.create("router", router_cfg), first_token_at_decode=dep.first_token == "decode")
    calls.frontend = frontend
    return frontend
