"""Time to move bytes over a link.

This is the one formula every transfer in the simulator goes through
(embeddings encoder -> prefill, KV cache prefill -> decode, point-to-point
sends between pipeline stages): a fixed one-way latency plus the payload
streamed at the link's per-direction bandwidth. When the disaggregation work
shares a link between concurrent transfers it will do so by changing the
bandwidth a transfer sees, not by adding a second formula.
"""

from __future__ import annotations

from lmmsim.catalog import LinkSpec


def transfer_s(num_bytes: float, link: LinkSpec) -> float:
    """Seconds to send ``num_bytes`` over ``link``: ``latency + bytes / bandwidth``.

    A zero-byte message still pays the latency (a message is still sent).
    """
    return link.latency_us / 1e6 + num_bytes / (link.bandwidth_gbs * 1e9)
