"""A wheel carries the catalog: installed outside a checkout, lmmsim still finds its models,
GPUs, shipped fits and example scenarios (package data: lmmsim/profiles, lmmsim/scenarios)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from lmmsim import catalog

REPO = Path(__file__).resolve().parent.parent


def test_the_wheel_holds_every_catalog_entry_and_fit(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "-w", str(tmp_path), "--no-deps",
                    "--no-build-isolation", "-q"], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("lmmsim-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    root = "lmmsim/profiles/"
    for gpu in catalog.gpus().values():
        assert f"{root}gpus/{gpu.name}.yaml" in names
        if gpu.fitted_profile:
            assert f"{root}{gpu.fitted_profile}/model.json" in names, gpu.name
    for model in catalog.models():
        assert f"{root}models/{model}.yaml" in names
    assert "lmmsim/scenarios/quickstart.yaml" in names and "lmmsim/py.typed" in names
    assert not any(n.endswith(".png") or n.endswith(".csv") and "/ops/" in n for n in names if n.startswith(root))
