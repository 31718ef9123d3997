"""Where a deployment runs host preprocessing, and what each host pool charges a job.

Two placements (scenario key ``host.placement``, :class:`lmmsim.scenario.HostConfig`):

``api_server``
    vLLM: the API-server processes (``--api-server-count``, ``host.workers``) tokenise
    the prompt and run media decode + the HF processor before the engine core sees
    the request, one request at a time per process. One front-end pool does it all.
``encode_worker``
    Dynamo-style E+P+D: the front end tokenises only; each encoder worker decodes and
    processes the media it is sent in its own process(es)
    (``host.encode_worker_processes``) before its GPU calls -- a request's media waits
    there, not at the front end. The pools run beside the GPU (the next request is
    preprocessed while the GPU encodes the previous batch), as an async worker's CPU
    and GPU work overlap.

``auto`` is ``encode_worker`` for a deployment with an encoder pool and ``api_server``
otherwise. The host-to-device copy of the processed tensors is not a host-pool cost:
it is part of the encoder call (:mod:`lmmsim.costmodel.encoder_call`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lmmsim import catalog
from lmmsim.costmodel.host_costs import HostCosts, load_profile
from lmmsim.costmodel.encoder_call import processed_bytes
from lmmsim.engine.host import HostPool
from lmmsim.engine.media_cache import combined_stats
from lmmsim.errors import UserError


class ConstantHostCosts:
    """The what-if knob: ``per_request_s`` per request plus ``per_item_s`` per media item."""

    def __init__(self, per_request_s: float, per_item_s: float):
        self.per_request_s, self.per_item_s = per_request_s, per_item_s

    def tokenize_s(self, tokens: int) -> float:
        return self.per_request_s

    def item_s(self, item, processed: bool = False) -> float:
        return 0.0 if processed else self.per_item_s  # a cache hit skips the whole constant

    def describe(self) -> dict:
        return {"constant": {"per_request_s": self.per_request_s, "per_item_s": self.per_item_s}}


@dataclass
class HostStage:
    placement: str  # api_server | encode_worker
    costs: object  # HostCosts or ConstantHostCosts
    workers: int  # front-end processes
    encode_worker_processes: int
    step_log: list | None = None
    # the multimodal processor cache (lmmsim.engine.media_cache.ProcessorCacheConfig) and the
    # processed bytes of an item; one cache per pool that preprocesses media
    cache_config: object = None
    item_bytes: Callable = lambda item: 0.0
    front: HostPool | None = None
    encoder_pools: list = field(default_factory=list)  # (encoder worker, its HostPool)
    caches: list = field(default_factory=list)

    def _media_s(self, items, cache) -> float:
        """Decode + processor of ``items`` (media items in prompt order); processor-cache hits decode only."""
        if cache is None:
            return sum(self.costs.item_s(item) for item in items)
        return sum(self.costs.item_s(item, cache.access(item.media_id, self.item_bytes(item))) for item in items)

    def _new_cache(self):
        if self.cache_config is None or not self.cache_config.capacity_gib:
            return None
        cache = self.cache_config.make()
        self.caches.append(cache)
        return cache

    def make_front(self, env, deliver) -> HostPool:
        # vLLM keeps one processor cache per API-server process; the pool's processes share one here
        # (exact at the default api_server_count of 1, an upper bound on hits above it)
        cache = self._new_cache() if self.placement == "api_server" else None

        def cost_s(seq) -> float:
            request = seq.request
            t = self.costs.tokenize_s(request.num_text_tokens)
            if self.placement == "api_server":
                t += self._media_s([seg.item for seg in request.media_segments], cache)
            return t

        self.front = HostPool(env, self.workers, cost_s, deliver, name="api_server", step_log=self.step_log)
        return self.front

    def attach_encoder(self, env, worker) -> None:
        """Preprocess what ``worker`` is sent in its own processes, then queue it for the GPU."""
        if self.placement != "encode_worker":
            return
        cache = self._new_cache()
        pool = HostPool(env, self.encode_worker_processes,
                        lambda items: self._media_s([it.segment.item for it in items], cache), worker.enqueue,
                        name=f"{worker.name}/host", seqs_of=lambda items: list(dict.fromkeys(it.seq for it in items)),
                        step_log=self.step_log)
        worker.preprocess = pool
        self.encoder_pools.append((worker, pool))

    def describe(self) -> dict:
        out = {"placement": self.placement, **self.costs.describe()}
        if self.caches:
            out["processor_cache"] = combined_stats(self.caches)
        return out


def host_lines(stage: HostStage | None, scn, gpu, pools: dict) -> list[str]:
    """What ``lmmsim validate`` says of the host stage: where it runs and, where the GPU's reference
    server is in the catalog, whether its processes fit that server's cores."""
    if stage is None:
        return ["  host: no preprocessing stage (host.placement: none)"]
    procs = stage.workers
    where = f"{stage.workers} API-server process(es)"
    if stage.placement == "encode_worker":
        n_enc = pools["encoder"].workers * stage.encode_worker_processes
        procs += n_enc
        where = f"tokenisation in {stage.workers} front-end process(es), media in {n_enc} encode-worker process(es)"
    costs = stage.costs.describe()
    priced = (f"profile {costs['profile']!r} at cpu_speed {costs['cpu_speed']:g}" if "profile" in costs
              else f"constants {costs['constant']}")
    lines = [f"  host: {stage.placement}: {where}; {priced}"]
    spec = gpu.host_cpu
    if spec is not None:
        nodes = -(-scn.hardware.count // spec.gpus_per_node)
        cores = nodes * spec.cores_per_node
        if procs > cores:
            lines.append(f"  warning: {procs} host processes exceed the {cores} cores of {nodes} {spec.server} "
                         f"node(s) ({spec.cpu})")
    return lines


def host_stage(scn, model, base_dir: Path, pools: dict, step_log) -> HostStage | None:
    """The scenario's host stage, or None with ``host.placement: none``."""
    cfg = scn.host
    placement = cfg.placement
    if placement == "auto":
        placement = "encode_worker" if "encoder" in pools else "api_server"
    if placement == "none":
        return None
    if placement == "encode_worker" and "encoder" not in pools:
        raise UserError("host.placement", f"'encode_worker' needs a deployment with an encoder pool "
                                          f"({scn.deployment.kind} has none); valid: 'api_server', 'auto', 'none'")
    if cfg.constant:
        costs = ConstantHostCosts(cfg.per_request_s or 0.0, cfg.per_item_s or 0.0)
    else:
        costs = HostCosts(load_profile(str(host_profile_folder(cfg.profile, base_dir))), model, cpu_speed=cfg.cpu_speed,
                          image_format=cfg.image_format, variant=cfg.processor)
    enc = model.encoder
    item_bytes = (lambda item: processed_bytes(enc.family, enc.patch_size, item.encoder)) if enc else (lambda item: 0.0)
    return HostStage(placement, costs, cfg.workers, cfg.encode_worker_processes, step_log, cfg.processor_cache,
                     item_bytes)


def host_profile_folder(name: str, base_dir: Path) -> Path:
    path = Path(name)
    if path.is_absolute() or len(path.parts) > 1:
        return path if path.is_absolute() else base_dir / path
    folder = catalog.find(Path("host") / name)
    if not folder.is_dir():
        have = catalog.subfolders("host")
        raise UserError("host.profile", f"unknown host profile {name!r}; valid: {', '.join(map(repr, have))} "
                                        f"or a folder path")
    return folder
