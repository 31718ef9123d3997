"""Parameter sweeps: many scenarios from one sweep YAML, run locally or on dask.

``run_sweep(sweep_path, out)`` expands the sweep (:mod:`lmmsim.sweep.spec`),
runs every point not already finished (one run dir per resolved scenario,
``out/runs/<hash>/``), and collects one row per run into ``out/results.parquet``.
"""

from lmmsim.sweep.runner import run_sweep
from lmmsim.sweep.spec import Point, SweepSpec, expand, load_sweep

__all__ = ["Point", "SweepSpec", "expand", "load_sweep", "run_sweep"]
