"""lmmsim: a discrete-event simulator of multimodal-LLM inference serving."""

__version__ = "0.1.0"
