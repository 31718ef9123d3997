"""Assembling a simulation's runtime objects from a planned deployment.

:func:`lmmsim.build.build` plans (catalog, memory, placement, cost models,
requests, prepared policies) into a :class:`~lmmsim.assembly.parts.Parts`;
this package turns the parts into engines and a front end when the
simulation starts:

* :mod:`.parts` -- what a topology needs, and the engine factory (scheduler
  choice by batching kind and queue capabilities, replica or pipeline);
* :mod:`.colocation` -- GPUs two workers share: the arbiters and EAServe's
  dynamic SM split, usable by any topology;
* one module per deployment kind: :mod:`.monolithic`, :mod:`.disaggregated`
  (``e_pd``, ``e_p_d``) and :mod:`.prefill_decode` (``p_d``);
  :data:`TOPOLOGIES` maps ``deployment.kind`` to its assembler.

Nothing here imports :mod:`lmmsim.build`.
"""

from __future__ import annotations

from lmmsim.assembly.disaggregated import assemble_disaggregated
from lmmsim.assembly.monolithic import assemble_monolithic
from lmmsim.assembly.prefill_decode import assemble_prefill_decode

#: deployment.kind -> assemble(parts, env, on_finish, barrier_at) -> front end
TOPOLOGIES = {
    "monolithic": assemble_monolithic,
    "e_pd": assemble_disaggregated,
    "e_p_d": assemble_disaggregated,
    "p_d": assemble_prefill_decode,
}
