"""Turn a :class:`WorkloadConfig` into the request list a run replays.

Randomness: one ``numpy.random.SeedSequence(seed)`` is spawned into
independent streams, one per purpose (:data:`STREAMS`). Each stream is drawn
in a fixed order, so the same config and seed give the same requests, and
changing one aspect leaves the others alone: editing the mix, say, does not
move arrival times, and changing the output lengths does not change prompts.

Everything random is drawn vectorised per class; the per-request loop only
assembles segments and builds :class:`Request` objects. Media items come from
the model's token rules through a :class:`MediaFactory`, which computes each
distinct shape once. Repeated media (``reuse``, :mod:`lmmsim.workload.reuse`)
is applied last, per class, from the ``reuse`` stream. Shared system prompts
(:mod:`lmmsim.workload.shared_prefix`) and multi-turn conversations
(:mod:`lmmsim.workload.conversation`) draw from streams of their own, and only when a
class asks for them, so a workload without them is exactly as before.
"""

from __future__ import annotations

import contextlib
import itertools
from pathlib import Path

import numpy as np

from lmmsim.errors import UserError
from lmmsim.workload.arrivals import ClosedLoopArrival, TraceArrival
from lmmsim.workload.config import MixClass, WorkloadConfig
from lmmsim.workload.conversation import expand_conversations, first_turn, plan_class
from lmmsim.workload.request import MediaItem, Request, build_segments, prompt_parts, request_modality
from lmmsim.workload.reuse import apply_reuse
from lmmsim.workload.shared_prefix import draw_variants, system_run
from lmmsim.workload.trace import MediaFactory, lead_text_parts
from lmmsim.workload.trace_formats import read_any_trace

#: Independent random streams, in spawn order (append only: reordering changes every run;
#: a SeedSequence's children do not depend on how many are spawned).
STREAMS = ("arrivals", "classes", "text", "output", "media", "reuse", "shared", "conversation")

#: Prefix of the scenario keys named in errors.
CONFIG_KEY = "workload"

#: Sampled audio durations are rounded to this many decimals of a second
#: (10 ms, Whisper's frame hop), which bounds the distinct clips the token rules see.
AUDIO_DECIMALS = 2


def generate_requests(cfg: WorkloadConfig, model, seed: int, base_dir: Path = Path(".")) -> list[Request]:
    """Requests for ``model``, ids ``0..n-1`` in arrival order.

    ``base_dir`` resolves relative file paths (trace, empirical
    distributions), normally the scenario file's folder. Raises
    :class:`UserError` keyed ``workload.mix.<i>.<medium>`` when the model does
    not take a medium a class asks for, even if that class draws no request.
    """
    base_dir = Path(base_dir)
    if isinstance(cfg.arrival, TraceArrival):
        return _replay_trace(cfg, model, base_dir)
    draws = RequestDraws(cfg, model, seed, base_dir)
    requests = list(draws)
    if any(c.conversation is not None for c in cfg.mix):
        requests = _conversations(cfg, requests, draws.class_of, draws.seeds["conversation"], base_dir)
    return requests


def stream_requests(cfg: WorkloadConfig, model, seed: int, base_dir: Path = Path(".")):
    """The requests of :func:`generate_requests`, each built when it is asked for
    (``sim.keep_requests: false``): a :class:`RequestDraws` -- the same draws, so the same
    requests -- where it can be; a trace or a conversation workload is materialised."""
    if isinstance(cfg.arrival, TraceArrival) or any(c.conversation is not None for c in cfg.mix):
        return generate_requests(cfg, model, seed, base_dir)
    return RequestDraws(cfg, model, seed, Path(base_dir))


#: Requests whose draws :meth:`RequestDraws.__iter__` turns into Python numbers at once.
ITER_BLOCK = 65536


class RequestDraws:
    """The random draws of a synthetic workload, compactly (a few numbers per request), and
    the sequence of requests they make: ``draws[i]`` builds request ``i`` on demand, so a run
    need not hold every :class:`Request` at once. Everything random is drawn here, up front
    and vectorised per class, exactly as :func:`generate_requests` always drew it."""

    def __init__(self, cfg: WorkloadConfig, model, seed: int, base_dir: Path):
        self.seeds = _stream_seeds(seed)
        rngs = {name: np.random.default_rng(s) for name, s in self.seeds.items()}
        if isinstance(cfg.arrival, ClosedLoopArrival):  # sent during the run (lmmsim.engine.closed_loop)
            times = np.zeros(int(cfg.num_requests))
        else:
            times = cfg.arrival.times(rngs["arrivals"], cfg.num_requests, cfg.duration_s)
        n = len(times)
        factory = MediaFactory(model)
        mix = cfg.mix
        self.fixed_media = [_fixed_media(k, c, factory) for k, c in enumerate(mix)]
        weights = np.array([c.weight for c in mix], dtype=np.float64)
        class_of = rngs["classes"].choice(len(mix), size=n, p=weights / weights.sum())
        text_tokens = np.empty(n, dtype=np.int64)
        output_tokens = np.empty(n, dtype=np.int64)
        audio: list[MediaItem | None] = [None] * n
        self.modality = []
        for k, c in enumerate(mix):
            members = np.flatnonzero(class_of == k)
            text_tokens[members] = c.text_tokens.sample(rngs["text"], len(members), base_dir)
            out_dist = c.output_tokens if c.output_tokens is not None else cfg.output_tokens
            output_tokens[members] = out_dist.sample(rngs["output"], len(members), base_dir)
            probe = ()
            if c.audio is not None:
                probe = (_audio_items(k, c, factory, rngs["media"], members, audio, base_dir),)
            self.modality.append(request_modality(self.fixed_media[k] + probe))
        self.names = [c.name for c in mix]
        self.layouts = [c.layout for c in mix]
        self.reused = _reused_media(cfg, class_of, self.fixed_media, audio, self.seeds["reuse"])
        self.system = _system_runs(cfg, class_of, self.seeds["shared"])
        # held for the whole run: the narrowest integers that keep the values (same Python ints out)
        self.times, self.class_of = times, class_of.astype(np.int16 if len(mix) < 2**15 else np.int64)
        self.text_tokens, self.output_tokens = _narrow(text_tokens), _narrow(output_tokens)
        self.audio = audio if any(a is not None for a in audio) else None  # a list of None costs 8 B a request

    def __len__(self) -> int:
        return len(self.times)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.request(j) for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.request(i)

    def __iter__(self):
        # plain Python values (numpy scalars are slow to index and would leak into Request
        # fields), converted a block at a time: a whole column as Python numbers is 32 B a request
        for lo in range(0, len(self), ITER_BLOCK):
            hi = lo + ITER_BLOCK
            clips = self.audio[lo:hi] if self.audio is not None else itertools.repeat(None)
            for i, at, k, text, out, clip in zip(range(lo, hi), self.times[lo:hi].tolist(),
                                                 self.class_of[lo:hi].tolist(), self.text_tokens[lo:hi].tolist(),
                                                 self.output_tokens[lo:hi].tolist(), clips):
                yield self._make(i, at, k, text, out, clip)

    def request(self, i: int) -> Request:
        clip = self.audio[i] if self.audio is not None else None
        return self._make(i, self.times[i].item(), self.class_of[i].item(), self.text_tokens[i].item(),
                          self.output_tokens[i].item(), clip)

    def _make(self, i: int, at: float, k: int, text: int, out: int, clip) -> Request:
        media = self.reused.get(i)
        if media is None:
            media = self.fixed_media[k] if clip is None else (*self.fixed_media[k], clip)
        parts = prompt_parts(self.layouts[k], text, media)
        run = self.system.get(i)
        if run is None:
            return Request(i, at, self.modality[k], self.names[k], build_segments(parts), out)
        # the system prompt first; it joins a leading text run (one text segment, two runs)
        return Request(i, at, self.modality[k], self.names[k], build_segments(lead_text_parts(run[1], parts)), out,
                       shared_content=(run,))


def _narrow(a: np.ndarray) -> np.ndarray:
    return a.astype(np.int32) if a.size and 0 <= a.min() and a.max() < 2**31 else a


def _fixed_media(k: int, c: MixClass, factory: MediaFactory) -> tuple[MediaItem, ...]:
    """The class's images and video (same shape in every request), in prompt order."""
    items: tuple[MediaItem, ...] = ()
    with _rekey(f"{CONFIG_KEY}.mix.{k}.images"):
        if c.images is not None:
            items += (factory.image(c.images.width, c.images.height),) * c.images.count
    with _rekey(f"{CONFIG_KEY}.mix.{k}.video"):
        if c.video is not None:
            items += (factory.video(c.video.frames, c.video.width, c.video.height),)
    return items


def _audio_items(k, c, factory, rng, members, out, base_dir) -> MediaItem:
    """Draw one audio clip per member of class ``k`` into ``out``; return a
    representative item (so unsupported audio fails even with no members)."""
    seconds = c.audio.seconds.sample_float(rng, len(members), base_dir)
    seconds = np.maximum(np.round(seconds, AUDIO_DECIMALS), 10.0**-AUDIO_DECIMALS)
    with _rekey(f"{CONFIG_KEY}.mix.{k}.audio"):
        probe = factory.audio(float(seconds[0]) if len(seconds) else 1.0)
        for j, s in zip(members.tolist(), seconds.tolist()):
            out[j] = factory.audio(s)
    return probe


def _reused_media(cfg: WorkloadConfig, class_of, fixed_media, audio, seed) -> dict[int, tuple]:
    """Request index -> its media with ids and copies, for the classes whose reuse
    is on (the class's own ``reuse``, else the workload's); each class draws from
    its own child of the ``reuse`` stream."""
    out: dict[int, tuple] = {}
    for k, (c, child) in enumerate(zip(cfg.mix, seed.spawn(len(cfg.mix)))):
        spec = c.reuse if c.reuse is not None else cfg.reuse
        if spec is None or not spec.active:
            continue
        members = np.flatnonzero(class_of == k).tolist()
        media = [fixed_media[k] if audio[j] is None else (*fixed_media[k], audio[j]) for j in members]
        out.update(zip(members, apply_reuse(media, spec, np.random.default_rng(child), c.name)))
    return out


def _system_runs(cfg: WorkloadConfig, class_of, seed) -> dict[int, tuple]:
    """Request index -> its system prompt's ``(key, tokens)`` run, for the classes with a
    ``system_prompt``; each class draws its variants from its own child of the ``shared`` stream."""
    out: dict[int, tuple] = {}
    if all(c.system_prompt is None for c in cfg.mix):
        return out  # draw nothing: requests stay exactly as without the key
    for k, (c, child) in enumerate(zip(cfg.mix, seed.spawn(len(cfg.mix)))):
        if c.system_prompt is None:
            continue
        members = np.flatnonzero(class_of == k).tolist()
        variants = draw_variants(c.system_prompt, np.random.default_rng(child), len(members))
        out.update((i, system_run(c.system_prompt, c.name, v)) for i, v in zip(members, variants))
    return out


def _conversations(cfg: WorkloadConfig, requests: list[Request], class_of, seed, base_dir) -> list[Request]:
    """The requests with every conversation class's follow-up turns added
    (:mod:`lmmsim.workload.conversation`); each class draws from its own child stream."""
    plans = []
    for k, (c, child) in enumerate(zip(cfg.mix, seed.spawn(len(cfg.mix)))):
        if c.conversation is None:
            continue
        members = np.flatnonzero(class_of == k).tolist()
        system_tokens = c.system_prompt.tokens if c.system_prompt is not None else 0
        for i in members:
            requests[i] = first_turn(requests[i], system_tokens)
        out_dist = c.output_tokens if c.output_tokens is not None else cfg.output_tokens
        plans.append(plan_class(c.conversation, members, requests, c.text_tokens, out_dist,
                                np.random.default_rng(child), base_dir))
    return expand_conversations(requests, plans, cfg.num_requests, cfg.duration_s)


@contextlib.contextmanager
def _rekey(key: str):
    """Re-raise a model's UserError (an unsupported medium) under a scenario key."""
    try:
        yield
    except UserError as exc:
        raise UserError(key, exc.message) from None


def think_times(cfg: WorkloadConfig, seed: int):
    """A closed-loop workload's pauses (one per request, in the order users take them), drawn
    from the ``arrivals`` stream; None for any other arrival."""
    if not isinstance(cfg.arrival, ClosedLoopArrival):
        return None
    rng = np.random.default_rng(_stream_seeds(seed)["arrivals"])
    return cfg.arrival.think_times(rng, int(cfg.num_requests)).tolist()


def _stream_seeds(seed: int) -> dict[str, np.random.SeedSequence]:
    """The seed of each of :data:`STREAMS`, by name."""
    return dict(zip(STREAMS, np.random.SeedSequence(seed).spawn(len(STREAMS))))


def _replay_trace(cfg: WorkloadConfig, model, base_dir: Path) -> list[Request]:
    a = cfg.arrival
    image = (a.image.width, a.image.height) if a.image is not None else None
    requests = read_any_trace(base_dir / a.path, model, fmt=a.format, speedup=a.speedup, start_s=a.start_s,
                              duration_s=a.duration_s, image=image, limit=cfg.num_requests)
    if cfg.duration_s is not None:
        # Timestamps are non-decreasing, so this keeps a prefix and ids stay 0..n-1.
        requests = [r for r in requests if r.arrived_at < cfg.duration_s]
    return requests
