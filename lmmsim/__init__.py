"""lmmsim: a discrete-event simulator of multimodal-LLM inference serving.

The Python API (:mod:`lmmsim.api`): ``from lmmsim import load_scenario, run, sweep``.
"""

__version__ = "0.1.0"
__all__ = ["load_scenario", "run", "sweep", "__version__"]

from lmmsim import native as _native

_native.install()  # compiled copies of the hot modules, where built and fresh (lmmsim.native)

_API = frozenset({"load_scenario", "run", "sweep", "RunResult"})


def __getattr__(name: str):
    # Imported on first use, so `import lmmsim` (and every CLI start) stays cheap. By
    # import_module rather than an import statement: lmmsim.api reaches modules that read
    # lmmsim.__version__, and the package must not import them back when it loads.
    # `sweep` is the lmmsim.sweep package, which is callable (lmmsim.api.sweep): a function
    # of that name here would be replaced by the package when lmmsim.sweep.* is imported.
    if name in _API:
        import importlib

        if name == "sweep":
            return importlib.import_module("lmmsim.sweep")
        return getattr(importlib.import_module("lmmsim.api"), name)
    raise AttributeError(f"module 'lmmsim' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _API)
