"""Installable anywhere: the catalog and the example scenarios are package data found with
importlib.resources; ``LMMSIM_PROFILES`` is a search path laid over the built-ins (its entries
win by name); relative paths in a scenario resolve against the scenario file's folder. The wheel
itself is built and run outside the checkout by CI (``.ci/wheel-smoke``), not here."""

from __future__ import annotations

import os
import shutil
from importlib import resources
from pathlib import Path

import pytest
import yaml

from conftest import assert_user_error, run_cli
from lmmsim import catalog
from lmmsim.build import build
from lmmsim.scenario import examples_dir, load_scenario, scenario_file

PACKAGE = Path(str(resources.files("lmmsim")))
BUILTIN = PACKAGE / "profiles"
H100_FIT = "ops/h100-sxm-80gb/fit"


@pytest.fixture
def clean_catalog(monkeypatch):
    monkeypatch.delenv("LMMSIM_PROFILES", raising=False)
    catalog.reload()
    yield
    catalog.reload()


def user_model(root: Path, base: str, name: str, **changes) -> None:
    """A copy of shipped model ``base`` as ``root/models/<name>.yaml`` named ``name``."""
    data = yaml.safe_load((BUILTIN / "models" / f"{base}.yaml").read_text())
    data.update(name=name, **changes)
    (root / "models").mkdir(parents=True, exist_ok=True)
    (root / "models" / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


# ------------------------------------------------------------- package data
def test_importlib_resources_finds_the_catalog_and_the_examples(clean_catalog):
    assert catalog.builtin_dir() == BUILTIN
    assert catalog.search_path() == [BUILTIN]
    assert (resources.files("lmmsim") / "profiles" / "gpus" / "h100-sxm-80gb.yaml").is_file()
    assert (BUILTIN / H100_FIT / "model.json").is_file()
    assert (BUILTIN / "host" / "cpu").is_dir()
    assert {"h100-sxm-80gb", "h200"} <= set(catalog.gpus())
    assert catalog.find(H100_FIT) == BUILTIN / H100_FIT
    assert (examples_dir() / "quickstart.yaml").is_file() and examples_dir() == PACKAGE / "scenarios"
    assert (PACKAGE / "py.typed").is_file()


def test_the_package_data_globs_cover_every_file_a_run_reads():
    """pyproject's package-data patterns match each catalog entry, shipped fit, host profile
    and example (a wheel built from them holds what the simulator reads)."""
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["lmmsim"]
    shipped = {p for pattern in patterns for p in PACKAGE.glob(pattern) if p.is_file()}
    needed = [*BUILTIN.glob("gpus/*.yaml"), *BUILTIN.glob("models/*.yaml"), *(BUILTIN / "host" / "cpu").iterdir(),
              *examples_dir().rglob("*.yaml"), *examples_dir().glob("traces/*"), PACKAGE / "py.typed"]
    for gpu in catalog.gpus().values():
        if gpu.fitted_profile:
            needed += [p for p in (BUILTIN / gpu.fitted_profile).iterdir() if p.suffix in (".json", ".npz")]
    assert sorted(map(str, set(needed) - shipped)) == []
    assert not [p for p in shipped if p.suffix in (".png", ".sh")]  # plots and scripts stay out


def test_a_shipped_example_is_named_from_any_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    quickstart = examples_dir() / "quickstart.yaml"
    assert scenario_file("quickstart") == quickstart
    assert scenario_file("quickstart.yaml") == quickstart
    assert scenario_file("scenarios/quickstart.yaml") == quickstart  # the README's commands
    fig4 = examples_dir() / "reproduce" / "rps" / "fig4.yaml"
    assert scenario_file("reproduce/rps/fig4") == fig4
    (tmp_path / "quickstart.yaml").write_text("name: mine\n")
    assert scenario_file("quickstart.yaml") == Path("quickstart.yaml")  # a file of the user's wins
    code, out, _ = run_cli(capsys, "list", "scenarios")
    assert code == 0 and "quickstart " in out and "reproduce/rps/" in out
    assert_user_error(capsys, ["validate", "no-such-example"], "no-such-example", "lmmsim list scenarios")


def test_a_shipped_example_with_a_relative_trace_validates_from_elsewhere(tmp_path, monkeypatch, clean_catalog):
    monkeypatch.chdir(tmp_path)
    scn, base_dir = load_scenario("trace-replay")
    assert base_dir == examples_dir()
    assert len(build(scn, base_dir).requests) == 100


# ------------------------------------------------------------- search path
def test_a_user_folder_is_laid_over_the_builtins(tmp_path, monkeypatch, clean_catalog):
    builtin_gpus = set(catalog.gpus())
    user_model(tmp_path, "llama-3-8b", "my-llama")
    user_model(tmp_path, "llama-3-8b", "llama-3-8b", display_name="Mine")
    monkeypatch.setenv("LMMSIM_PROFILES", str(tmp_path))
    catalog.reload()
    assert set(catalog.gpus()) == builtin_gpus  # one model does not hide the GPUs
    assert catalog.get_model("my-llama").name == "my-llama"
    assert "qwen2.5-vl-7b" in catalog.models()  # nor the other models
    assert catalog.get_model("llama-3-8b").display_name == "Mine"  # the user's entry wins by name
    assert os.path.samefile(catalog.entry_path("model", "llama-3-8b"), tmp_path / "models" / "llama-3-8b.yaml")
    assert catalog.find(H100_FIT) == BUILTIN / H100_FIT  # the shipped fits still found
    assert catalog.profiles_dir() == tmp_path  # where lmmsim fit / profile write by default


def test_the_search_path_is_colon_separated_and_the_first_entry_wins(tmp_path, monkeypatch, clean_catalog):
    first, second = tmp_path / "a", tmp_path / "b"
    user_model(first, "llama-3-8b", "llama-3-8b", display_name="First")
    user_model(second, "llama-3-8b", "llama-3-8b", display_name="Second")
    user_model(second, "llama-3-8b", "only-second")
    (second / "ops" / "h100-sxm-80gb").mkdir(parents=True)
    shutil.copytree(BUILTIN / H100_FIT, second / H100_FIT)  # a user's own fit for a shipped GPU
    monkeypatch.setenv("LMMSIM_PROFILES", os.pathsep.join([str(first), "", str(second)]))
    catalog.reload()
    assert catalog.search_path() == [first, second, BUILTIN]
    assert catalog.get_model("llama-3-8b").display_name == "First"
    assert "only-second" in catalog.models()
    assert catalog.find(H100_FIT) == second / H100_FIT


def test_a_fitted_profile_is_read_from_the_user_folder_first(tmp_path, monkeypatch, clean_catalog):
    (tmp_path / "ops" / "h100-sxm-80gb").mkdir(parents=True)
    (tmp_path / H100_FIT).symlink_to(BUILTIN / H100_FIT)  # the user's folder holds the fit auto uses
    monkeypatch.setenv("LMMSIM_PROFILES", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    catalog.reload()
    scn, base_dir = load_scenario("quickstart", ["workload.num_requests=5"])
    assert catalog.find(H100_FIT) == tmp_path / H100_FIT
    assert build(scn, base_dir).cost_model["kind"] == "fitted"


# ------------------------------------------------------ scenario-relative paths
def test_relative_paths_resolve_against_the_scenario_file_not_the_working_directory(
        tmp_path, monkeypatch, clean_catalog):
    folder = tmp_path / "experiments"
    (folder / "traces").mkdir(parents=True)
    shutil.copy(examples_dir() / "traces" / "quickstart-100.jsonl", folder / "traces")
    (folder / "my-fit").symlink_to(BUILTIN / H100_FIT)
    raw = yaml.safe_load((examples_dir() / "trace-replay.yaml").read_text())
    raw["hardware"]["cost_model"] = "my-fit"
    (folder / "s.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # neither traces/ nor my-fit is here
    scn, base_dir = load_scenario(folder / "s.yaml")
    assert base_dir == folder
    built = build(scn, base_dir)
    assert len(built.requests) == 100
    assert built.cost_model["kind"] == "fitted" and built.cost_model["fit"] == "my-fit"
    # a path relative to the working directory is not found
    (elsewhere / "cwd-fit").symlink_to(BUILTIN / H100_FIT)
    scn, base_dir = load_scenario(folder / "s.yaml", ["hardware.cost_model=cwd-fit"])
    with pytest.raises(Exception, match="not found: a relative cost_model is read from the scenario file's folder"):
        build(scn, base_dir)
