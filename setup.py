"""Optional compiled copies of lmmsim's hot modules (see lmmsim/native.py).

Everything else about the package is in pyproject.toml. Here the install compiles the modules
in ``lmmsim.native.MODULES`` with Cython into ``lmmsim/_native/`` and records the SHA-256 of
each source there; without Cython or a C compiler, or with ``LMMSIM_NATIVE_BUILD=0``, it skips
them and lmmsim runs as pure Python (the same results, slower).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "lmmsim"))  # lmmsim/native.py alone: the package's imports are not installed yet
import native  # noqa: E402

sys.path.pop(0)

# Same operations as the source, never contracted into fused multiply-adds (bit-identical floats).
CFLAGS = ["-O1", "-g0", "-ffp-contract=off", "-fno-fast-math", "-Wno-unused-function", "-Wno-unreachable-code"]
DIRECTIVES = {"language_level": 3, "annotation_typing": False, "binding": True}


def cythonize_one(name: str, source: str, out_dir: Path) -> str:
    """``source`` (a module's .py) as C in ``out_dir``; returns the .c file's path."""
    from Cython.Build import cythonize

    (ext,) = cythonize([Extension(name, [source])], compiler_directives=DIRECTIVES, quiet=True,
                       build_dir=str(out_dir))
    return ext.sources[0]


class NativeBuild(build_ext):
    """Builds each compiled copy into ``lmmsim/_native`` (in place for an editable install),
    writes the manifest of source digests, and never fails the install: a module that does not
    translate or compile is left out (setuptools' optional extensions) and runs as Python."""

    def run(self):
        wanted = os.environ.get("LMMSIM_NATIVE_BUILD", "1") != "0"
        if wanted and importlib.util.find_spec("Cython") is None:
            print("lmmsim: no Cython; the hot modules stay pure Python", file=sys.stderr)
            wanted = False
        kept = []
        for ext in self.extensions if wanted else ():
            try:  # the Python source translated to C in the build folder
                ext.sources = [cythonize_one(ext.name, ext.sources[0], Path(self.build_temp) / "cython")]
                kept.append(ext)
            except Exception as err:
                print(f"lmmsim: {ext.name} not translated ({err}); it runs as Python", file=sys.stderr)
        self.extensions = kept
        self.parallel = self.parallel or os.cpu_count()  # modules compile side by side
        super().run()  # into the build folder; copy_extensions_to_source below does nothing
        out = Path(self.build_lib) / "lmmsim" / "_native"
        built = {ext.name: native.source_digest(native.source_path(ext.name)) for ext in kept
                 if (out / native.binary_name(ext.name)).is_file()}
        out.mkdir(parents=True, exist_ok=True)
        (out / native.MANIFEST).write_text(json.dumps(built, indent=1, sort_keys=True) + "\n")
        if self.inplace:  # an editable install runs from the checkout: the copies go there
            self.copy_tree(str(out), str(ROOT / "lmmsim" / "_native"))

    def copy_extensions_to_source(self):
        pass  # (setuptools' copies to each module's own folder; run copies lmmsim/_native whole)

    def get_ext_fullpath(self, ext_name):
        return str(Path(self.build_lib) / "lmmsim" / "_native" / native.binary_name(ext_name))

    def get_outputs(self):
        out = Path(self.build_lib) / "lmmsim" / "_native"
        return [str(out / native.binary_name(m)) for m in native.MODULES] + [str(out / native.MANIFEST)]


extensions = [Extension(m, [str(native.source_path(m).relative_to(ROOT))], extra_compile_args=CFLAGS, optional=True)
              for m in native.MODULES]
setup(ext_modules=extensions, cmdclass={"build_ext": NativeBuild})
