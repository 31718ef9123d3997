"""Small CLI defects of issue 18: plot cdf on a run folder, a sweep's unknown top-level key, aligned
listings, the scenario's JSON schema."""

from __future__ import annotations

import json

import pytest
import yaml

from lmmsim.cli import main
from lmmsim.systems import systems

from test_reliability import QUICKSTART, error_line, small_quickstart


def test_plot_cdf_accepts_a_run_folder(tmp_path):
    scenario = small_quickstart(tmp_path)
    assert main(["run", str(scenario), "-o", str(tmp_path / "run")]) == 0
    out = tmp_path / "cdf.png"
    assert main(["plot", "cdf", str(tmp_path / "run"), "-o", str(out)]) == 0
    assert out.stat().st_size > 0


def test_a_sweeps_unknown_top_level_key_is_named_with_the_valid_ones(tmp_path, capsys):
    sweep = tmp_path / "bad.yaml"
    sweep.write_text(yaml.safe_dump({"base": str(QUICKSTART), "grid": {"workload.arrival.rate": [1, 2]}}))
    assert main(["sweep", str(sweep), "-o", str(tmp_path / "out")]) == 2
    line = error_line(capsys)
    assert "unknown key 'grid'" in line and "'axes'" in line


def test_list_systems_aligns_long_names(capsys):
    assert main(["list", "systems"]) == 0
    lines = capsys.readouterr().out.splitlines()
    width = max(map(len, systems()))
    assert len(lines) == len(systems())
    for line, name in zip(lines, systems()):
        assert line.startswith(name) and line[width] == " " and line[width + 1] != " "


def test_schema_is_json_with_the_scenarios_keys(capsys):
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert {"model", "hardware", "workload", "policy"} <= set(schema["properties"])
    with pytest.raises(KeyError):
        schema["properties"]["no_such_key"]


def test_completion_script_lists_every_subcommand_and_its_options(capsys, tmp_path):
    import shutil
    import subprocess

    from lmmsim.cli.completion import command_options
    from lmmsim.cli.parser import build_parser

    assert main(["completion", "bash"]) == 0
    text = capsys.readouterr().out
    table = command_options(build_parser())
    assert {"run", "sweep", "reproduce", "schema", "completion"} <= set(table)
    assert f'reproduce) opts="{" ".join(table["reproduce"])}"' in text and "--seeds" in table["reproduce"]
    if shutil.which("bash"):  # the script completes a prefix in a real shell
        (tmp_path / "c.sh").write_text(text)
        out = subprocess.run(["bash", "-c", f"source {tmp_path / 'c.sh'}; COMP_WORDS=(lmmsim repr); COMP_CWORD=1; "
                              "_lmmsim; echo ${COMPREPLY[@]}"], capture_output=True, text=True, check=True).stdout
        assert out.split() == ["reproduce"]


def test_search_prints_a_progress_line_per_trial_unless_quiet(tmp_path, capsys):
    pytest.importorskip("optuna")
    scenario = str(QUICKSTART.parent / "reproduce" / "easerve" / "image-llava34b.yaml")
    args = ["search", scenario, "--rate", "4", "--budget", "2", "--trial-requests", "40"]
    assert main([*args, "-o", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "trial 1/2:" in out and "trial 2/2:" in out and "ETA" in out
    assert main([*args, "-o", str(tmp_path / "b"), "-q"]) == 0
    assert "trial 1/2" not in capsys.readouterr().out
