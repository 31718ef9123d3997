"""The GPU and model catalogs: every file loads, every figure is cited, and the
figures add up to the published model sizes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lmmsim import catalog
from lmmsim.errors import UserError

PROFILES = Path(catalog.__file__).resolve().parent.parent / "profiles"

REQUIRED_GPUS = {"h100-sxm-80gb", "h100-96gb", "h200", "a100-sxm-80gb", "a100-40gb", "rtx-6000-ada", "cpu"}
REQUIRED_MODELS = {
    "qwen2.5-vl-7b",
    "qwen2.5-vl-32b",
    "qwen2.5-vl-72b",
    "llava-onevision-qwen2-7b",
    "llava-onevision-qwen2-72b",
    "llava-v1.6-34b",
    "internvl3.5-38b",
    "gemma-3-27b",
    "ultravox-v0.6-27b",
    "llama-2-7b",
    "llama-2-70b",
    "llama-3-8b",
    "qwen3-vl-8b",
    "qwen3-vl-32b",
    "qwen3-vl-30b-a3b",
    "qwen3-vl-235b-a22b",
    "llama-4-scout-17b-16e",
    "glm-4.5v",
    "qwen3-omni-30b-a3b",
}
TEXT_ONLY = {"llama-2-7b", "llama-2-70b", "llama-3-8b"}


def numeric_paths(obj, path=""):
    """Dotted paths of every number (or list of numbers) in a dumped spec."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from numeric_paths(value, f"{path}.{key}" if path else key)
    elif isinstance(obj, (list, tuple)):
        if obj and all(isinstance(x, (int, float, list, tuple)) and not isinstance(x, bool) for x in obj):
            yield path
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield path


# Defaults that say a feature is absent (no DeepStack mergers): a file that has the feature states
# and cites it; the others need not cite its absence. Every other number, defaults included, is cited.
ABSENT_BY_DEFAULT = {"encoder.deepstack_mergers": 0}


def cited_fields(spec):
    dump = spec.model_dump()
    dump.pop("sources")
    stated = set(numeric_paths(spec.model_dump(exclude_unset=True)))
    return {f for f in numeric_paths(dump) if f in stated or f not in ABSENT_BY_DEFAULT}


ALL_SPECS = [pytest.param(s, id=s.name) for s in (*catalog.gpus().values(), *catalog.models().values())]


# ------------------------------------------------------------------ loading
def test_every_file_loads_under_its_own_name():
    for sub, table in (("gpus", catalog.gpus()), ("models", catalog.models())):
        stems = {p.stem for p in (PROFILES / sub).glob("*.yaml")}
        assert stems == set(table), f"{sub}: file names must equal the `name:` inside"


def test_required_names_exist():
    assert REQUIRED_GPUS <= set(catalog.gpus())
    assert REQUIRED_MODELS <= set(catalog.models())


def test_unknown_names_are_user_errors():
    with pytest.raises(UserError, match="unknown GPU 'h300'"):
        catalog.get_gpu("h300")
    with pytest.raises(UserError, match="unknown model"):
        catalog.get_model("gpt-5")


def test_profiles_folder_override_and_bad_file(tmp_path, monkeypatch):
    builtin_gpus = catalog.gpus()
    (tmp_path / "gpus").mkdir()
    (tmp_path / "models").mkdir()
    shutil.copy(PROFILES / "gpus" / "h200.yaml", tmp_path / "gpus")
    monkeypatch.setenv("LMMSIM_PROFILES", str(tmp_path))
    catalog.reload()
    assert set(catalog.gpus()) == set(builtin_gpus)  # laid over the built-ins, not replacing them
    assert catalog.entry_path("gpu", "h200") == tmp_path / "gpus" / "h200.yaml"  # the user's copy wins
    (tmp_path / "models" / "broken.yaml").write_text("name: broken\nllm: {hidden_size: -1}\n")
    catalog.reload()
    assert "broken" not in catalog.models()  # a broken file is left out (with a warning), not fatal
    with pytest.raises(UserError, match="broken.yaml: display_name: required key is missing"):
        catalog.get_model("broken")


# ------------------------------------------------------------------ sources
@pytest.mark.parametrize("spec", ALL_SPECS)
def test_every_numeric_field_is_cited(spec):
    fields = cited_fields(spec)
    missing = sorted(f for f in fields if not spec.sources.get(f, "").strip())
    assert not missing, f"{spec.name}: no source for {missing}"


@pytest.mark.parametrize("spec", ALL_SPECS)
def test_no_source_for_a_field_that_does_not_exist(spec):
    stale = sorted(set(spec.sources) - cited_fields(spec))
    assert not stale, f"{spec.name}: sources name unknown fields {stale}"


# ------------------------------------------------------------------ GPUs
def test_gpu_figures():
    gpus = catalog.gpus()
    h200 = gpus["h200"]
    assert h200.peak_flops == pytest.approx(989.4e12)
    assert h200.hbm_bytes_per_s == pytest.approx(4.8e12)
    assert h200.memory_bytes == 141 * 2**30
    assert gpus["h100-sxm-80gb"].links["nvlink"].bandwidth_gbs == 450
    assert gpus["a100-sxm-80gb"].links["nvlink"].bandwidth_gbs == 300
    assert "nvlink" not in gpus["rtx-6000-ada"].links
    assert gpus["rtx-6000-ada"].links["pcie"].bandwidth_gbs == 32
    for gpu in gpus.values():
        assert set(gpu.links) <= {"nvlink", "pcie", "network"}, gpu.name
        assert "network" in gpu.links, gpu.name


# ------------------------------------------------------------------ models
# Published total sizes (LLM + encoder + projector), in billions. Embedding
# tables count once when tied. Norm weights and biases are ignored by the
# formula, hence the tolerance.
PUBLISHED_TOTAL_B = {
    "qwen2.5-vl-7b": 8.29,
    "qwen2.5-vl-32b": 33.5,
    "qwen2.5-vl-72b": 73.4,
    "llava-onevision-qwen2-7b": 8.03,
    "llava-onevision-qwen2-72b": 73.2,
    "llava-v1.6-34b": 34.8,
    "internvl3.5-38b": 38.4,
    "gemma-3-27b": 27.4,
    "qwen3-30b-a3b": 30.5,  # HF Qwen/Qwen3-30B-A3B model card: 30.5B total (3.3B activated)
}
PUBLISHED_LLM_B = {
    "llama-2-7b": 6.74,
    "llama-2-70b": 68.98,
    "llama-3-8b": 8.03,
    "qwen2.5-vl-7b": 7.62,  # Qwen2.5-7B
    "internvl3.5-38b": 32.8,  # Qwen3-32B
    "gemma-3-27b": 27.0,
    "ultravox-v0.6-27b": 27.0,
}


@pytest.mark.parametrize("name,billions", sorted(PUBLISHED_TOTAL_B.items()))
def test_total_params_match_published_size(name, billions):
    model = catalog.get_model(name)
    total = model.weight_bytes / catalog.BYTES_PER_PARAM_BF16
    assert total / 1e9 == pytest.approx(billions, rel=0.03)


@pytest.mark.parametrize("name,billions", sorted(PUBLISHED_LLM_B.items()))
def test_llm_params_match_published_size(name, billions):
    assert catalog.get_model(name).llm.num_params / 1e9 == pytest.approx(billions, rel=0.02)


def test_kv_bytes_per_token():
    models = catalog.models()
    assert models["llama-2-7b"].llm.kv_bytes_per_token == 2 * 32 * 32 * 128 * 2 == 524288
    assert models["llama-2-70b"].llm.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2
    # head_dim differs from hidden/heads: 5376/32 = 168, but Gemma-3 uses 128.
    assert models["gemma-3-27b"].llm.dim_head == 128
    assert models["gemma-3-27b"].llm.kv_bytes_per_token == 2 * 62 * 16 * 128 * 2
    assert models["internvl3.5-38b"].llm.dim_head == 128


def test_modalities():
    models = catalog.models()
    for name in TEXT_ONLY:
        assert models[name].modalities == ("text",)
        assert models[name].encoder is None
        with pytest.raises(UserError, match="does not take image"):
            models[name].image_item(512, 512)
    assert models["qwen2.5-vl-7b"].modalities == ("text", "image", "video")
    assert models["llava-v1.6-34b"].modalities == ("text", "image")
    assert models["ultravox-v0.6-27b"].modalities == ("text", "audio")
    for name in REQUIRED_MODELS - TEXT_ONLY:
        assert models[name].encoder is not None, name


def test_encoder_consistency():
    for model in catalog.models().values():
        enc = model.encoder
        if enc is None:
            continue
        assert enc.projector.output_dim == model.llm.hidden_size, model.name
        assert all(0 <= i < enc.num_layers for i in enc.full_attention_layers), model.name
        assert enc.hidden_size % enc.num_heads == 0, model.name


def test_model_items_use_the_family_rules():
    models = catalog.models()
    item = models["qwen2.5-vl-72b"].image_item(1024, 1024)
    assert item.num_llm_tokens == 37 * 37
    assert models["gemma-3-27b"].image_item(3000, 200).num_llm_tokens == 256
    assert models["ultravox-v0.6-27b"].audio_item(30).num_llm_tokens == 188
    assert models["internvl3.5-38b"].video_item(8, 1280, 720).num_llm_tokens == 8 * 256
