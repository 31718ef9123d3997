"""A broken catalog file costs only the commands that need it: every other entry
still loads, `lmmsim list` warns, and the entry's users get one line naming the
file and the field."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from conftest import assert_user_error, run_cli
from lmmsim import catalog
from lmmsim.errors import UserError

REPO = Path(catalog.__file__).resolve().parent.parent
PROFILES = REPO / "profiles"
QUICKSTART = REPO / "scenarios" / "quickstart.yaml"  # llava-onevision-qwen2-7b on h100-sxm-80gb


@pytest.fixture
def profiles(tmp_path, monkeypatch):
    """A copy of the shipped catalog as $LMMSIM_PROFILES, run from its parent so errors
    read ``profiles/...``; the catalog caches are emptied before and after."""
    root = tmp_path / "profiles"
    shutil.copytree(PROFILES, root, ignore=shutil.ignore_patterns("ops"))
    (root / "ops").symlink_to(PROFILES / "ops")  # 13 MB of fitted profiles, only read: not copied
    monkeypatch.setenv("LMMSIM_PROFILES", str(root))
    monkeypatch.chdir(tmp_path)
    catalog.reload()
    yield root
    catalog.reload()


def write_entry(root: Path, sub: str, base: str, name: str, edit=None, stem: str | None = None) -> str:
    """Copy shipped entry ``base`` as ``<stem or name>.yaml`` named ``name``, apply ``edit``;
    returns the path errors show."""
    data = yaml.safe_load((PROFILES / sub / f"{base}.yaml").read_text())
    data["name"] = name
    if edit:
        edit(data)
    filename = f"{stem or name}.yaml"
    (root / sub / filename).write_text(yaml.safe_dump(data, sort_keys=False))
    return f"profiles/{sub}/{filename}"


def no_layers(data):
    data["llm"]["num_layers"] = 0


def error_of(fn, *args) -> str:
    with pytest.raises(UserError) as info:
        fn(*args)
    return str(info.value)


# ------------------------------------------------------------------ list
def test_list_gpus_shows_the_good_ones_and_warns_about_the_broken_one(profiles, capsys):
    write_entry(profiles, "gpus", "h200", "bad", lambda d: d.update(num_sms=0))
    code, out, err = run_cli(capsys, "list", "gpus")
    assert code == 0
    listed = {line.split()[0] for line in out.splitlines()}
    assert listed == {p.stem for p in (PROFILES / "gpus").glob("*.yaml")}
    assert err.splitlines() == [
        "lmmsim: warning: profiles/gpus/bad.yaml: num_sms: input should be greater than 0 (got 0); "
        "this entry is skipped"
    ]


def test_list_models_warns_once_per_broken_file(profiles, capsys):
    write_entry(profiles, "models", "llama-3-8b", "foo", no_layers)
    (profiles / "models" / "syn.yaml").write_text("name: syn\nllm: [1, 2\n")
    code, out, err = run_cli(capsys, "list", "models")
    assert code == 0
    assert len(out.splitlines()) == len(list((PROFILES / "models").glob("*.yaml")))
    warnings = err.splitlines()
    assert len(warnings) == 2, err
    assert warnings[0].startswith("lmmsim: warning: profiles/models/foo.yaml: llm.num_layers: ")
    assert warnings[1].startswith("lmmsim: warning: profiles/models/syn.yaml:3: not valid YAML")


# ------------------------------------------------------------------ scenarios
def test_a_good_scenario_validates_beside_broken_entries(profiles, capsys):
    write_entry(profiles, "models", "llama-3-8b", "foo", no_layers)
    write_entry(profiles, "gpus", "h200", "bad", lambda d: d.update(num_sms=0))
    (profiles / "models" / "syn.yaml").write_text("llm: {\n")
    code, out, err = run_cli(capsys, "validate", QUICKSTART)
    assert code == 0, err
    assert "valid" in out


def test_a_scenario_naming_a_broken_model_fails_with_file_and_field(profiles, capsys):
    path = write_entry(profiles, "models", "llama-3-8b", "foo", no_layers)
    line = assert_user_error(capsys, ["validate", QUICKSTART, "--set", "model=foo"])
    assert line == f"lmmsim: error: {path}: llm.num_layers: input should be greater than 0 (got 0)"


def test_a_scenario_naming_a_broken_gpu_fails_with_file_and_field(profiles, capsys):
    path = write_entry(profiles, "gpus", "h200", "bad",
                       lambda d: d["links"]["nvlink"].update(bandwidth_gbs=-1))
    line = assert_user_error(capsys, ["validate", QUICKSTART, "--set", "hardware.gpu=bad"])
    assert line == f"lmmsim: error: {path}: links.nvlink.bandwidth_gbs: input should be greater than 0 (got -1)"


# ------------------------------------------------------------------ messages
def test_missing_sources_says_it_is_required_and_where_the_format_is(profiles):
    path = write_entry(profiles, "models", "llama-3-8b", "nosrc", lambda d: d.pop("sources"))
    assert error_of(catalog.get_model, "nosrc") == (
        f"{path}: sources: required key is missing; "
        'every catalog file cites its figures, see README "Catalog format"'
    )
    assert "## Catalog format" in (REPO / "README.md").read_text()


@pytest.mark.parametrize("edit,expected", [
    (lambda d: d.update(colour="red"),
     "colour: unknown key 'colour'; valid keys: 'display_name', 'encoder', 'hf_id', 'llm', 'media', 'name', "
     "'sources'"),
    (lambda d: d["llm"].update(head_dim=0), "llm.head_dim: input should be greater than 0 (got 0)"),
    # the union tag pydantic puts in the location ('qwen2_vl') is not a key of the file
    (lambda d: d["media"]["image"].update(patch_size=0),
     "media.image.patch_size: input should be greater than 0 (got 0)"),
    (lambda d: d["media"]["image"].update(kind="jpeg"),
     "media.image.kind: unknown kind 'jpeg'; valid: 'qwen2_vl', 'llava_onevision', 'llava_next', 'internvl', "
     "'gemma3', 'llama4'"),
    (lambda d: d["encoder"]["projector"].update(stride=2),
     "encoder.projector.stride: unknown key 'stride'; valid keys: 'hidden_dim', 'input_dim', 'num_layers', "
     "'output_dim', 'tokens_merged'"),
])
def test_validation_errors_name_the_dotted_field(profiles, edit, expected):
    path = write_entry(profiles, "models", "qwen2.5-vl-7b", "odd", edit)
    assert error_of(catalog.get_model, "odd") == f"{path}: {expected}"


def test_a_yaml_syntax_error_names_the_file_and_line_and_spares_the_rest(profiles):
    (profiles / "models" / "syn.yaml").write_text("name: syn\nllm: [1, 2\n")
    message = error_of(catalog.get_model, "syn")  # no readable name: found by its file name
    assert message.startswith("profiles/models/syn.yaml:3: not valid YAML")
    assert catalog.get_model("llama-3-8b").llm.num_layers == 32


def test_a_duplicate_key_is_an_error_with_its_line(profiles):
    text = (PROFILES / "models" / "llama-3-8b.yaml").read_text().replace("name: llama-3-8b", "name: dup")
    text += "hf_id: again\n"  # otherwise a valid file; plain PyYAML would keep this value silently
    (profiles / "models" / "dup.yaml").write_text(text)
    line = len(text.splitlines())
    assert error_of(catalog.get_model, "dup") == (
        f"profiles/models/dup.yaml:{line}: key 'hf_id' appears twice in one mapping"
    )


@pytest.mark.parametrize("text,got", [("- a\n- b\n", "a list"), ("", "an empty file"), ("h200\n", "a str")])
def test_a_file_that_is_not_a_mapping_is_one_line(profiles, text, got):
    (profiles / "gpus" / "flat.yaml").write_text(text)
    assert error_of(catalog.get_gpu, "flat") == (
        f"profiles/gpus/flat.yaml: a catalog file must be a YAML mapping of keys (got {got})"
    )
    assert "h200" in catalog.gpus()


def test_unknown_name_lists_good_entries_and_the_broken_file_of_that_name(profiles):
    # foo.yaml declares `name: zzz`: the catalog keys by `name:`, so 'foo' is unknown, but
    # the file called foo.yaml is the likely culprit and the message says so.
    path = write_entry(profiles, "models", "llama-3-8b", "zzz", no_layers, stem="foo")
    message = error_of(catalog.get_model, "foo")
    assert message.startswith("model: unknown model 'foo'; valid: 'gemma-3-27b', ")
    assert "'zzz'" not in message.split("; broken file")[0]
    assert message.endswith(f"; broken file of that name: {path}: llm.num_layers: input should be greater "
                            "than 0 (got 0)")
    assert error_of(catalog.get_model, "zzz").startswith(f"{path}: llm.num_layers: ")


def test_reload_reads_an_edited_file_again(profiles):
    path = write_entry(profiles, "models", "llama-3-8b", "foo", no_layers)
    error_of(catalog.get_model, "foo")
    write_entry(profiles, "models", "llama-3-8b", "foo")
    assert error_of(catalog.get_model, "foo").startswith(path)  # still the loaded (cached) file
    catalog.reload()
    assert catalog.get_model("foo").llm.num_layers == 32
