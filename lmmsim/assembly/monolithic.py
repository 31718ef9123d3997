"""``monolithic``: replicas that encode, prefill and decode on their own GPUs, behind a router."""

from __future__ import annotations

import functools

from lmmsim import policies
from lmmsim.assembly.colocation import Colocation
from lmmsim.assembly.parts import Parts, make_engine
from lmmsim.engine.frontends import MonolithicFrontend


def assemble_monolithic(parts: Parts, env, on_finish, barrier_at) -> MonolithicFrontend:
    scn = parts.scn
    colocation = Colocation(parts, env)
    # A replica syncs when a request reaches it mid-stretch (lmmsim.engine.replica), so its
    # fast-forward need not stop at every arrival in the fleet, only at the horizon. Alone,
    # every arrival is its own: stopping there plans no steps a sync would throw away.
    # A pipeline engine's stretch cannot sync (lmmsim.engine.pipeline_ff): it stops at arrivals.
    fleet = scn.deployment.pp == 1 and scn.deployment.replicas > 1
    own_barrier_at = functools.partial(barrier_at, False) if fleet else barrier_at
    engines = [make_engine(parts, colocation, env, "llm", i, on_finish, own_barrier_at, media="local",
                           fast_forward=scn.sim.fast_forward)
               for i in range(scn.deployment.replicas)]
    return MonolithicFrontend(engines, policies.create("router", scn.policy.router))
