"""Scheduling policies, registered by role and name.

A policy never imports SimPy: it sees plain request objects and returns
decisions, so it can be unit-tested on hand-built queues. Built-in policies
register on import of this package; third-party ones through the
``lmmsim.policies`` entry-point group (each entry point is imported once,
and registers with :func:`register` as a side effect).
"""

from lmmsim.policies.registry import config_union, create, describe, names, register, registry_version  # noqa: F401
from lmmsim.policies import batching, encode_dispatch, offload, queueing, routing, rps_queue  # noqa: F401,E402  (registers built-ins)
