"""``monolithic``: replicas that encode, prefill and decode on their own GPUs, behind a router."""

from __future__ import annotations

from lmmsim import policies
from lmmsim.assembly.colocation import Colocation
from lmmsim.assembly.parts import Parts, make_engine
from lmmsim.engine.frontends import MonolithicFrontend


def assemble_monolithic(parts: Parts, env, on_finish, barrier_at) -> MonolithicFrontend:
    scn = parts.scn
    colocation = Colocation(parts, env)
    engines = [make_engine(parts, colocation, env, "llm", i, on_finish, barrier_at, media="local",
                           fast_forward=scn.sim.fast_forward)
               for i in range(scn.deployment.replicas)]
    return MonolithicFrontend(engines, policies.create("router", scn.policy.router))
