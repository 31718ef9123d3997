"""Operator profiler: times the operators the cost model composes, on this machine's CPU or GPU.

Needs torch (``pip install 'lmmsim[profile]'``); the simulator never imports
this package. Modules:

* :mod:`~lmmsim.profiler.run` — ``profile(...)`` and ``python -m lmmsim.profiler.run``;
* :mod:`~lmmsim.profiler.grid` — the shape grids and their thinning;
* :mod:`~lmmsim.profiler.planning` — predicted costs and the thinning factor under ``max_minutes``;
* :mod:`~lmmsim.profiler.ops` — one benchmark per operator (and the kernels the
  reference models share);
* :mod:`~lmmsim.profiler.children` — SM-limit and collective measurements in child processes;
* :mod:`~lmmsim.profiler.timing` — warm-up, repeats, CUDA events / wall clock;
* :mod:`~lmmsim.profiler.reference` — small real models for checking the composition;
* :mod:`~lmmsim.profiler.vidur_import` — Vidur-format profiles into the same format.

Output: one CSV per operator class plus ``meta.json``
(:mod:`lmmsim.costmodel.opdata`).
"""


def __getattr__(name):  # lazy: importing the package must not import torch
    if name == "profile":
        from lmmsim.profiler.run import profile

        return profile
    raise AttributeError(name)
