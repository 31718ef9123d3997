"""EAServe (/work/shared/seeds/easerve.txt): encode-aware EPD serving.

* :mod:`lmmsim.easerve.sm_table` -- the dynamic SM partitioning table (§3.4).

Hybrid Auto Selection, the configuration search (§3.1, ``lmmsim search``),
is its own package, :mod:`lmmsim.search`.

The prefill offload routers (§3.3) are policies, in
:mod:`lmmsim.policies.offload` (role ``offload``).
"""
