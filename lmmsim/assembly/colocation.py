"""GPUs that two workers share: their arbiters, and EAServe's dynamic SM split.

Any topology can place an encoder and an LLM worker on one GPU; this
component gives each worker the function its batches run through
(:meth:`Colocation.runner`) and, with a prepared SM table, the split an
encoder applies per batch (:meth:`Colocation.sm_split`).
"""

from __future__ import annotations

from lmmsim.assembly.parts import Parts, worker_name
from lmmsim.engine.gpu_share import SharedGpu

# Local prefill keeps this SM share when a batch would take every SM (set_shares cannot
# stop a running kernel, and it may start a step during the call); our choice, 5%.
MIN_RUNNING_SM_SHARE = 0.05


class Colocation:
    """The arbiters of one simulation's shared GPUs, created on first use."""

    def __init__(self, parts: Parts, env):
        self.parts = parts
        self.env = env
        self.arbiters: dict[int, SharedGpu] = {}  # GPU id -> arbiter

    def arbiter(self, g: int) -> SharedGpu:
        if g not in self.arbiters:
            parts, sharing = self.parts, self.parts.sharing
            shares = None
            if sharing.mode == "sm_split":
                shares = {worker_name(pn, w, parts.monolithic): sharing.sm_shares[pn] for pn, w in parts.shared[g]}
            self.arbiters[g] = SharedGpu(self.env, g, sharing.mode, shares,
                                         memory_interference=sharing.memory_interference)
        return self.arbiters[g]

    def runner(self, worker: str, ids):
        """How a worker's batch runs: None if its GPUs are its own, else through the
        arbiters of its shared GPUs; a TP group spread over several shared GPUs
        moves in lock step, so its batch ends when the slowest GPU's part ends."""
        gs = [g for g in ids if g in self.parts.shared]
        if not gs:
            return None
        tenant = worker.split("/")[0]
        arbs = [self.arbiter(g) for g in gs]
        if len(arbs) == 1:
            arb = arbs[0]
            return lambda compute_s, memory_s: arb.run(tenant, compute_s, memory_s)
        env = self.env
        return lambda compute_s, memory_s: env.all_of([a.run(tenant, compute_s, memory_s) for a in arbs])

    def sm_split(self, encoder_index: int, local_worker: str):
        """EAServe's dynamic SM split on an encoder's GPUs: per batch the smallest SM
        level that covers it, the rest to its local prefill worker; between batches all
        SMs to local prefill. None without a prepared SM table."""
        table = self.parts.sm_table
        if table is None:
            return None
        enc = f"encoder{encoder_index}"
        arbs = [self.arbiter(g) for g in self.parts.placement["encoder"][encoder_index]]

        def split(batch):
            if batch is None:
                shares = {enc: 0.0, local_worker: 1.0}
            else:
                # local prefill keeps a sliver of SMs: a kernel of its cannot stop
                # mid-flight, and it may start a step while the call runs
                share = min(table.share_for(len({id(it.seq) for it in batch})), 1.0 - MIN_RUNNING_SM_SHARE)
                shares = {enc: share, local_worker: round(1.0 - share, 12)}
            for a in arbs:
                a.set_shares(shares)

        return split
