"""``lmmsim search``: EAServe's Hybrid Auto Selection (HAS, easerve.txt §3.1) and two baselines.

What lives where:

* :mod:`~lmmsim.search.mapping` -- a configuration ``(alloc, B, s)`` and the
  scenario it stands for (:class:`Problem`: mapping, feasibility);
* :mod:`~lmmsim.search.capacity` -- Stage 1's analytic model: allocations,
  stage loads at the target rate, pruning, seeds;
* :mod:`~lmmsim.search.profiling` -- Stage 1's per-worker capacities, by
  simulated stress runs;
* :mod:`~lmmsim.search.evaluator` -- simulating trials (cache, process pool, Dask);
* :mod:`~lmmsim.search.trials` -- the trial history, ranking, stopping rules, search cost;
* :mod:`~lmmsim.search.drivers` -- the methods: TPE (HAS's Stage 2), random,
  coordinate descent;
* :mod:`~lmmsim.search.runner` -- :func:`search`, one method end to end;
* :mod:`~lmmsim.search.outputs` -- the search folder and its files.
"""

from lmmsim.search.drivers import require_optuna
from lmmsim.search.mapping import DEPLOY_S, Config, Problem, read_raw
from lmmsim.search.outputs import OUTPUT_FILES, check_output_dir, write_outputs
from lmmsim.search.runner import METHODS, SearchResult, search
from lmmsim.search.trials import TIE_TOLERANCE

__all__ = ["DEPLOY_S", "METHODS", "OUTPUT_FILES", "TIE_TOLERANCE", "Config", "Problem", "SearchResult",
           "check_output_dir", "read_raw", "require_optuna", "search", "write_outputs"]
