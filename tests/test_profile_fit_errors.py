"""`lmmsim fit`, `import-vidur` and `profile` on bad input, and their --force rule.

Bad input: a CSV without the columns lmmsim needs, with values that are not
numbers, empty, or a folder with nothing to fit or import, is one line on
stderr naming the file, exit 2, and nothing written. --force: lmmsim replaces
only the files it wrote (the folder's manifest), stops before replacing
anything when a user's file has an output's name, and leaves every other file
alone. All on tiny hand-written CSVs; one real `lmmsim profile --quick`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import assert_user_error, run_cli
from lmmsim.costmodel import opdata
from lmmsim.outputs import MANIFEST

REAL_VIDUR = Path("/work/shared/data/vidur-profiling")
MLP = "compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv"
ALL_REDUCE = "network/a100_dgx/all_reduce.csv"
SEND_RECV = "network/a100_dgx/send_recv.csv"
MLP_OPS = ("emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
           "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")


def _manifest(folder: Path) -> list[str]:
    return json.loads((folder / MANIFEST).read_text())["files"]


# ----------------------------------------------------------------- profiles
def _gemm_rows(n: int = 12) -> pd.DataFrame:
    """``n`` GEMM shapes timed at a clean roofline (50 GFLOP/s plus 10 us)."""
    m = np.array([16, 32, 64, 128, 256, 512, 1024, 2048] * 2)[:n]
    k = np.array([512] * 8 + [1024] * 8)[:n]
    return pd.DataFrame({"m": m, "n": 512, "k": k, "time_ms": 2 * m * 512 * k / 5e10 * 1e3 + 0.01})


def _profile(folder: Path, **csv_text: str | bytes) -> Path:
    """A profile folder: meta.json naming the cpu, plus ``<class>.csv`` files (contents as given)."""
    folder.mkdir(parents=True, exist_ok=True)
    opdata.write_meta(folder, {"hardware": "cpu"})
    for cls, text in csv_text.items():
        path = folder / f"{cls}.csv"
        path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
    return folder


@pytest.fixture
def fittable(tmp_path) -> Path:
    return _profile(tmp_path / "prof", gemm=_gemm_rows().to_csv(index=False))


# ----------------------------------------------------------------- fit: bad input
@pytest.mark.parametrize("text,needles", [
    ("a,b\n1,2\n", ("gemm.csv", "missing column(s) m, n, k, time_ms", "it has a, b")),
    ("m,n,k,time_ms\n1,512,512,0.1\n2,512,512,abc\n", ("gemm.csv", "'time_ms'", "'abc' is not a number")),
    ("m,n,k,time_ms\n1,five,512,0.1\n", ("gemm.csv", "'n'", "'five'")),
    ("", ("gemm.csv", "empty file")),
    (b"\x89PNG\r\n\x1a\n\xff\xfe\x00garbage", ("gemm.csv", "not a readable CSV")),
    ("\x89PNG,\x1b[31m\n1,2\n", ("gemm.csv", "missing column(s)", "'\\x89PNG'")),
], ids=["missing-columns", "text-time", "text-shape", "empty-file", "binary", "control-characters"])
def test_fit_rejects_an_unusable_csv(capsys, tmp_path, text, needles):
    folder = _profile(tmp_path / "prof", gemm=text, elementwise=_gemm_rows().assign(num_bytes=1e6).to_csv(index=False))
    assert_user_error(capsys, ["fit", folder], *needles)
    assert not (folder / "fit").exists()


def test_fit_rejects_a_flag_that_is_not_true_or_false(capsys, tmp_path):
    rows = "new_tokens,context,num_heads,num_kv_heads,head_dim,causal,time_ms\n16,16,8,8,64,maybe,0.1\n"
    folder = _profile(tmp_path / "prof", attention_prefill=rows, gemm=_gemm_rows().to_csv(index=False))
    assert_user_error(capsys, ["fit", folder], "attention_prefill.csv", "'causal'", "'maybe'")


def test_fit_rejects_meta_json_that_is_not_json(capsys, fittable):
    (fittable / "meta.json").write_text("{hardware: cpu")
    assert_user_error(capsys, ["fit", fittable], "meta.json", "not valid JSON")


@pytest.mark.parametrize("files", [{}, {"gemm": "m,n,k,time_ms\n", "p2p": "num_bytes,time_ms\n"}],
                         ids=["no-csv", "headers-only"])
def test_fit_with_nothing_to_fit_writes_nothing(capsys, tmp_path, files):
    folder = _profile(tmp_path / "prof", **files)
    assert_user_error(capsys, ["fit", folder], "nothing to fit", "gemm.csv", "attention_decode.csv", "p2p.csv")
    assert not (folder / "fit").exists()


def test_fit_where_no_class_has_enough_rows_is_an_error(capsys, tmp_path):
    folder = _profile(tmp_path / "prof", gemm=_gemm_rows(3).to_csv(index=False))
    assert_user_error(capsys, ["fit", folder], "no class could be fitted", "gemm: 3 usable rows")
    assert not (folder / "fit").exists()


def test_fit_still_skips_a_thin_class_beside_a_fitted_one(capsys, tmp_path):
    folder = _profile(tmp_path / "prof", gemm=_gemm_rows().to_csv(index=False), p2p="num_bytes,time_ms\n1,0.1\n")
    code, out, err = run_cli(capsys, "fit", folder)
    assert code == 0, err
    assert "p2p: not fitted (1 usable rows" in out
    assert sorted(json.loads((folder / "fit" / "model.json").read_text())["classes"]) == ["gemm"]
    assert "model.json" in _manifest(folder / "fit")


def test_fit_refuses_the_profile_folder_as_its_output(capsys, fittable):
    assert_user_error(capsys, ["fit", fittable, "--out", fittable, "--force"], "--out", "profile folder itself")
    assert sorted(p.name for p in fittable.iterdir()) == ["gemm.csv", "meta.json"]


# ----------------------------------------------------------------- fit: --force
def test_fit_force_replaces_its_own_files_and_keeps_the_users(capsys, fittable):
    assert run_cli(capsys, "fit", fittable)[0] == 0
    fit = fittable / "fit"
    assert set(_manifest(fit)) >= {"model.json", "report.md", "pred_vs_measured.png"}
    (fit / "keep.txt").write_text("mine")
    assert_user_error(capsys, ["fit", fittable], "--out", "--force")  # not empty, no --force
    before = (fit / "model.json").stat().st_mtime_ns
    code, _, err = run_cli(capsys, "fit", fittable, "--force")
    assert code == 0, err
    assert (fit / "keep.txt").read_text() == "mine"
    assert (fit / "model.json").stat().st_mtime_ns != before
    assert not [p for p in fit.iterdir() if p.name.endswith(".tmp")]  # no temporary sibling left


def test_fit_force_stops_at_a_users_model_json(capsys, fittable):
    fit = fittable / "fit"
    fit.mkdir()
    (fit / "model.json").write_text('{"mine": true}')
    assert_user_error(capsys, ["fit", fittable, "--force"], "--out", "model.json", "not written by lmmsim")
    assert (fit / "model.json").read_text() == '{"mine": true}'
    assert sorted(p.name for p in fit.iterdir()) == ["model.json"]


def test_fit_force_replaces_nothing_when_one_output_is_a_users(capsys, fittable):
    assert run_cli(capsys, "fit", fittable)[0] == 0
    fit = fittable / "fit"
    model = (fit / "model.json").read_bytes()
    manifest = json.loads((fit / MANIFEST).read_text())
    manifest["files"].remove("report.md")  # as if the user had written report.md there
    (fit / MANIFEST).write_text(json.dumps(manifest))
    (fit / "report.md").write_text("my notes")
    assert_user_error(capsys, ["fit", fittable, "--force"], "report.md", "not written by lmmsim")
    assert (fit / "report.md").read_text() == "my notes"
    assert (fit / "model.json").read_bytes() == model


# ----------------------------------------------------------------- import-vidur
def _stats(metric: str, median) -> dict:
    return {f"time_stats.{metric}.{s}": median for s in ("min", "max", "mean", "median", "std")}


def _vidur(root: Path) -> Path:
    """A tiny Vidur tree in the public layout: one model's mlp.csv, one DGX network folder."""
    rows = []
    for tokens in (8, 16):
        row = {k: v for op in MLP_OPS for k, v in _stats(op, 0.01 * tokens).items()}
        row.update(n_head=32, n_kv_head=32, n_embd=4096, n_expanded_embd=11008, vocab_size=32768,
                   use_gated_mlp=True, num_tokens=tokens, num_tensor_parallel_workers=1)
        rows.append(row)
    (root / MLP).parent.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(root / MLP, index=False)
    (root / ALL_REDUCE).parent.mkdir(parents=True)
    for path, metric in ((ALL_REDUCE, "all_reduce"), (SEND_RECV, "send_recv")):
        net = [{"": i, **_stats(metric, 0.01 * (i + 1)), "rank": 0, "num_workers": 2, "size": 2048 << i,
                "collective": metric, "devices_per_node": 2, "max_devices_per_node": 8} for i in range(2)]
        pd.DataFrame(net).to_csv(root / path, index=False)
    return root


@pytest.fixture
def vidur(tmp_path) -> Path:
    return _vidur(tmp_path / "vidur")


def _set_cell(path: Path, column: str, value: str) -> None:
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    df.loc[1, column] = value
    df.to_csv(path, index=False)


def _drop_columns(path: Path, prefix: str) -> None:
    df = pd.read_csv(path)
    df[[c for c in df.columns if not c.startswith(prefix)]].to_csv(path, index=False)


CORRUPTIONS = {
    "missing-columns": (lambda r: (r / MLP).write_text("a,b\n1,2\n"), (MLP, "missing column(s)", "num_tokens")),
    "empty-file": (lambda r: (r / MLP).write_text(""), (MLP, "empty file")),
    "header-only": (lambda r: (r / MLP).write_text((r / MLP).read_text().splitlines()[0] + "\n"),
                    (MLP, "no rows")),
    "text-shape": (lambda r: _set_cell(r / MLP, "num_tokens", "lots"), (MLP, "'num_tokens'", "'lots'")),
    "text-time": (lambda r: _set_cell(r / MLP, "time_stats.emb.median", "n/a ms"), (MLP, "'n/a ms'")),
    "bad-flag": (lambda r: _set_cell(r / MLP, "use_gated_mlp", "sometimes"), (MLP, "'use_gated_mlp'")),
    "no-timings": (lambda r: _drop_columns(r / MLP, "time_stats."), (MLP, "no operator timings")),
    "binary": (lambda r: (r / ALL_REDUCE).write_bytes(bytes(range(256)) * 3), (ALL_REDUCE, "not a readable CSV")),
    "network-median-missing": (lambda r: _drop_columns(r / SEND_RECV, "time_stats.send_recv.median"),
                               (SEND_RECV, "time_stats.send_recv.median")),
    "compute-without-files": (lambda r: shutil.rmtree(r / "compute/a100/meta-llama"),
                              ("compute/a100", "no mlp.csv or attention.csv")),
}


@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_import_vidur_names_the_file_it_cannot_read(capsys, vidur, tmp_path, case):
    corrupt, needles = CORRUPTIONS[case]
    corrupt(vidur)
    out = tmp_path / "out"
    assert_user_error(capsys, ["import-vidur", vidur, "-o", out, "--gpu", "a100"], *needles)
    assert not out.exists()


@pytest.mark.skipif(not (REAL_VIDUR / MLP).is_file(), reason="Vidur profiles not present")
def test_import_vidur_names_a_corrupted_copy_of_real_data(capsys, tmp_path):
    copy = tmp_path / "vidur" / MLP
    copy.parent.mkdir(parents=True)
    copy.write_text("".join((REAL_VIDUR / MLP).read_text().splitlines(keepends=True)[:4]))
    _set_cell(copy, "n_embd", "4096?")
    assert_user_error(capsys, ["import-vidur", tmp_path / "vidur", "-o", tmp_path / "out", "--gpu", "a100"],
                      str(copy), "'n_embd'", "'4096?'")


def test_import_vidur_force_keeps_foreign_files_and_stops_at_clashes(capsys, vidur, tmp_path):
    out = tmp_path / "out"
    argv = ["import-vidur", vidur, "-o", out, "--gpu", "a100"]
    code, stdout, err = run_cli(capsys, *argv)
    assert code == 0, err
    assert "gemm" in stdout and "allreduce 2" in stdout
    assert set(_manifest(out)) == {"gemm.csv", "elementwise.csv", "allreduce.csv", "p2p.csv", "meta.json"}
    (out / "keep.txt").write_text("mine")
    assert run_cli(capsys, *argv, "--force")[0] == 0  # over its own output
    assert (out / "keep.txt").read_text() == "mine"

    (out / MANIFEST).unlink()  # now nothing here is known to be lmmsim's
    meta = (out / "meta.json").read_text()
    assert_user_error(capsys, [*argv, "--force"], "-o", "not written by lmmsim")
    assert (out / "meta.json").read_text() == meta


# ----------------------------------------------------------------- profile
@pytest.fixture
def fake_profile(monkeypatch):
    """Replace the measuring by a writer of the given classes (the CLI's file handling is what is tested)."""
    pytest.importorskip("torch")
    from lmmsim.profiler import run

    written = {"classes": ("gemm", "elementwise")}

    def profile(device, hardware, models, out_dir, **kwargs):
        for cls in written["classes"]:
            opdata.write_class(out_dir, cls, pd.DataFrame({c: [1] for c in (*opdata.SHAPE_COLUMNS[cls], "time_ms")}))
        opdata.write_meta(out_dir, {"hardware": hardware, "models": models})
        return out_dir

    monkeypatch.setattr(run, "profile", profile)
    return written


PROFILE = ("profile", "--device", "cpu", "--hardware", "cpu", "--models", "llama-2-7b", "--quick")


def test_real_quick_profile_records_what_it_wrote(capsys, tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "prof"
    code, _, err = run_cli(capsys, *PROFILE, "-o", out)
    assert code == 0, err
    written = sorted(p.name for p in out.iterdir() if p.name != MANIFEST)
    assert sorted(_manifest(out)) == written and "meta.json" in written and "gemm.csv" in written


def test_profile_force_replaces_its_own_files_only(capsys, tmp_path, fake_profile):
    out = tmp_path / "prof"
    assert run_cli(capsys, *PROFILE, "-o", out)[0] == 0
    (out / "keep.txt").write_text("mine")
    (out / "allreduce.csv").write_text("num_bytes,world,time_ms\n1,2,0.1\n")  # the user's, not a CPU output
    assert_user_error(capsys, [*PROFILE, "-o", out], "-o", "--force")
    fake_profile["classes"] = ("gemm",)  # this time no elementwise rows
    code, stdout, err = run_cli(capsys, *PROFILE, "-o", out, "--force")
    assert code == 0, err
    assert not (out / "elementwise.csv").exists()  # the earlier run's rows would be fitted as this profile's
    assert (out / "keep.txt").read_text() == "mine"
    assert (out / "allreduce.csv").read_text().startswith("num_bytes,world")
    assert sorted(_manifest(out)) == ["gemm.csv", "meta.json"]


def test_profile_force_stops_before_measuring_at_a_users_csv(capsys, tmp_path, fake_profile, monkeypatch):
    from lmmsim.profiler import run

    out = tmp_path / "prof"
    out.mkdir()
    (out / "gemm.csv").write_text("my own gemm timings")
    monkeypatch.setattr(run, "profile", lambda *a, **k: pytest.fail("measured although the output is blocked"))
    assert_user_error(capsys, [*PROFILE, "-o", out, "--force"], "gemm.csv", "not written by lmmsim")
    assert (out / "gemm.csv").read_text() == "my own gemm timings"
    assert sorted(p.name for p in out.iterdir()) == ["gemm.csv"]
