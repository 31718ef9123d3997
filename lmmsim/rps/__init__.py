"""RPS-Serve (rocks, pebbles and sand): modality-aware scheduling components.

The offline part of RPS-Serve (rps-serve.txt sections 3.2-3.4) lives here,
one module per component:

* :mod:`lmmsim.rps.profiler` -- Workload Profiler: runs the scenario's own
  request mix one request at a time through the simulator and records each
  request's GPU prefill latency (vision encoding included) and prompt tokens.
* :mod:`lmmsim.rps.estimator` -- Impact Estimator: per-modality regressions
  from request features to prefill latency; memory is the prompt token count.
* :mod:`lmmsim.rps.classifier` -- Request Classifier: k-means over the scaled
  (latency, memory) plane, clusters named sand < pebbles < rocks; plus the
  naive modality-only classifier of the paper's ablation.

Nothing heavy is imported here: import the submodule you need (scikit-learn
and the simulator are only imported when a fit or a profile runs).
"""
