"""Build hook: a wheel carries the catalog (profiles/) inside the package as ``lmmsim/_catalog``.

The catalog -- GPU and model YAML, the shipped fits, the host profile -- lives
at the repository root, where an editable install and ``lmmsim fit`` use it;
``lmmsim.catalog.profiles_dir`` falls back to the packaged copy when lmmsim is
installed from a wheel, outside a checkout. Raw profile CSVs and the fit plots
stay out of the wheel.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

CATALOG = ("gpus/*.yaml", "models/*.yaml", "ops/README.md", "ops/*/fit/model.json", "ops/*/fit/*.npz",
           "ops/*/fit/report.md", "host/*/*")


class BuildWithCatalog(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):  # editable: the checkout's profiles/ is read in place
            return
        src = Path(__file__).resolve().parent / "profiles"
        dst = Path(self.build_lib) / "lmmsim" / "_catalog"
        shutil.rmtree(dst, ignore_errors=True)  # a reused build folder keeps no entry deleted since
        for pattern in CATALOG:
            for path in sorted(src.glob(pattern)):
                target = dst / path.relative_to(src)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)


setup(cmdclass={"build_py": BuildWithCatalog})
