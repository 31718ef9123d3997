"""Shared helpers: hand-built requests and a direct engine harness (no YAML)."""

from __future__ import annotations

import math

import pytest

from lmmsim.errors import UserError

from lmmsim.engine.kv_cache import BlockPool
from lmmsim.engine.frontends import MonolithicFrontend
from lmmsim.engine.replica import Replica
from lmmsim.engine.scheduler import ContinuousBatchingScheduler
from lmmsim.engine.simulation import Simulation
from lmmsim.policies.queueing import FcfsQueue
from lmmsim.policies.routing import RoundRobinRouter
from lmmsim.workload.request import EncoderWork, MediaItem, Request, build_segments, request_modality


class FakeModel:
    """Stand-in for a catalog ModelSpec: simple token rules, counts its calls."""

    def __init__(self, modalities=("text", "image", "video", "audio"), name="fake"):
        self.name = name
        self.modalities = tuple(modalities)
        self.calls = 0

    def _check(self, modality):
        self.calls += 1
        if modality not in self.modalities:
            raise UserError("model", f"{self.name!r} does not take {modality} input")

    def image_item(self, width, height):
        self._check("image")
        tokens = math.ceil(width / 28) * math.ceil(height / 28)
        return MediaItem("image", tokens, EncoderWork(1, 4 * tokens))

    def video_item(self, frames, width, height):
        self._check("video")
        per_group = math.ceil(width / 28) * math.ceil(height / 28)
        groups = max(1, frames // 2)
        return MediaItem("video", groups * per_group, EncoderWork(groups, 4 * per_group))

    def audio_item(self, seconds):
        self._check("audio")
        return MediaItem("audio", max(1, round(seconds * 25)), EncoderWork(math.ceil(seconds / 30), 1500))


def text_request(rid: int, at: float, prompt: int, output: int) -> Request:
    return Request(rid, at, "text", "text", build_segments([prompt]), output)


def media_request(rid: int, at: float, parts: list, output: int) -> Request:
    """``parts``: ints (text runs) and ('image', llm_tokens) tuples, in prompt order."""
    built = []
    for p in parts:
        if isinstance(p, tuple):
            kind, tokens = p
            built.append(MediaItem(kind, tokens, EncoderWork(1, tokens * 4)))
        else:
            built.append(p)
    items = [b for b in built if isinstance(b, MediaItem)]
    return Request(rid, at, request_modality(items), "mm", build_segments(built), output)


def simulate(requests, cost, *, num_blocks=100_000, block_size=16, token_budget=2048, max_running=256,
             encoder_budget=None, replicas=1, fast_forward=True, step_log=False, horizon_s=None,
             rejected=None):
    """Run requests through FCFS replicas; returns (result, log)."""
    log = [] if step_log else None

    def make_frontend(env, on_finish, barrier_at):
        engines = []
        for index in range(replicas):
            sched = ContinuousBatchingScheduler(
                FcfsQueue(), BlockPool(num_blocks, block_size), token_budget, max_running,
                encoder_budget if encoder_budget is not None else token_budget,
            )
            engines.append(Replica(env, index, sched, cost, (index,), on_finish, barrier_at,
                                   fast_forward=fast_forward, step_log=log))
        return MonolithicFrontend(engines, RoundRobinRouter())

    sim = Simulation(requests, make_frontend, rejected=rejected, horizon_s=horizon_s)
    return sim.run(), log


@pytest.fixture
def harness():
    return simulate


def run_cli(capsys, *argv):
    """Run ``lmmsim ARGV`` in-process: (exit code, stdout, stderr)."""
    from lmmsim.cli import main

    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_user_error(capsys, argv, *needles):
    """The command fails as a user error: exit 2, one line naming every needle, no traceback."""
    code, _out, err = run_cli(capsys, *argv)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]
