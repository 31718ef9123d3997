"""Parameter sweeps: many scenarios from one sweep YAML, run locally or on dask.

``run_sweep(sweep_path, out)`` expands the sweep (:mod:`lmmsim.sweep.spec`),
runs every point not already finished (one run dir per resolved scenario,
``out/runs/<hash>/``), and collects one row per run into ``out/results.parquet``.

The package is also the Python API's ``sweep`` (``from lmmsim import sweep``): calling it,
``lmmsim.sweep(spec, output=None, jobs=1, executor="local")``, is :func:`lmmsim.api.sweep`.
(A function of that name on ``lmmsim`` would be replaced by this package as soon as
anything imported ``lmmsim.sweep.*``, so the package itself is callable.)
"""

import sys
import types

from lmmsim.sweep.runner import run_sweep
from lmmsim.sweep.spec import Point, SweepSpec, expand, load_sweep

__all__ = ["Point", "SweepSpec", "expand", "load_sweep", "run_sweep"]


class _CallablePackage(types.ModuleType):
    def __call__(self, spec, **options):
        """Run a sweep and return its results DataFrame: :func:`lmmsim.api.sweep`."""
        from lmmsim.api import sweep

        return sweep(spec, **options)


sys.modules[__name__].__class__ = _CallablePackage
