"""EAServe (/work/shared/seeds/easerve.txt): encode-aware EPD serving.

* :mod:`lmmsim.easerve.sm_table` -- the dynamic SM partitioning table (§3.4);
* :mod:`lmmsim.easerve.has` -- Hybrid Auto Selection, the configuration search (§3.1).

The prefill offload routers (§3.3) are policies, in
:mod:`lmmsim.policies.offload` (role ``offload``).
"""
