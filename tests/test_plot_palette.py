"""The figure palette: Okabe-Ito, a fixed look per known system, distinct series in every figure; SVG; --linear."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from lmmsim.cli.parser import build_parser
from lmmsim.plotting import palette
from lmmsim.plotting.figures import make_figure, plot
from lmmsim.plotting.style import fit_tick_labels, new_figure, paper_style
from lmmsim.systems import systems

REPRODUCE = Path(__file__).resolve().parent.parent / "scenarios" / "reproduce"
EXTRA = ("vllm-best", "dynamo-best", "easerve-has", "easerve-has-s1", "rserve-tt", "has", "random", "coordinate")


def _series_sets() -> dict[str, list[str]]:
    """Each reproduction sweep's ``system`` and ``name`` axis values (the series drawn together)."""
    out = {}

    def walk(node, where):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("system", "name") and isinstance(value, list) and all(isinstance(v, str) for v in value):
                    out[f"{where}:{key}"] = list(dict.fromkeys(value))
                walk(value, where)
        elif isinstance(node, list):
            for item in node:
                walk(item, where)

    for path in sorted(REPRODUCE.glob("*/*.yaml")):
        walk(yaml.safe_load(path.read_text()).get("axes", []), path.relative_to(REPRODUCE).as_posix())
    return out


SETS = _series_sets()


def test_every_known_system_has_a_fixed_okabe_ito_look():
    names = [*systems(), *EXTRA]
    for name in names:
        style = palette.known_style(name)
        assert style is not None, name
        assert style["color"] in palette.OKABE_ITO and style["linestyle"] in palette.LINESTYLES
        assert palette.system_color(name) == style["color"]
    assert palette.known_style("gllm-best")["color"] == palette.system_color("gllm")  # X-best follows X
    assert palette.known_style("gllm-best")["linestyle"] == "--"


def test_reproduction_figures_have_distinct_colours():
    assert len(SETS) >= 20 and any("fig14" in k for k in SETS) and any("fig9-image" in k for k in SETS)
    # the series of the figures one sweep draws: its system axis, or its name axis where it labels them
    for where, names in SETS.items():
        if where.endswith(":system") and where.replace(":system", ":name") in SETS:
            continue
        if where.startswith("rps/fig15"):  # share-10/30/50: unknown labels, checked below
            continue
        fixed = [palette.known_style(n)["color"] for n in names]
        assert len(set(fixed)) == len(fixed), (where, names)
        assert palette.series_styles(names) == {n: palette.known_style(n) for n in names}  # none displaced
    search = palette.series_styles(["has", "random", "coordinate"])
    assert len({s["color"] for s in search.values()}) == 3


def test_baseline_systems_compared_together_differ():
    names = ["vllm", "vllm-pp", "gllm", "gllm-epd", "modserve", "dynamo", "rserve"]  # scenarios/baselines/
    assert len({palette.system_color(n) for n in names}) == len(names)


def test_unknown_series_get_distinct_colours_in_order():
    looks = palette.series_styles(["alpha", "beta", "gamma"])
    assert [v["color"] for v in looks.values()] == list(palette.OKABE_ITO[:3])
    # known names keep theirs; unknown ones take the colours left over
    mixed = palette.series_styles(["share-10", "vllm", "share-30", "rserve"])
    assert mixed["vllm"]["color"] == palette.BLUE and mixed["rserve"]["color"] == palette.GREEN
    assert len({v["color"] for v in mixed.values()}) == 4
    # a known name whose colour is already taken in the figure gets another one
    clash = palette.series_styles(["gllm", "easerve-s1"])  # both orange
    assert clash["gllm"]["color"] == palette.ORANGE and clash["easerve-s1"]["color"] != palette.ORANGE
    # past the palette: colours repeat with another line style, never the same look twice
    many = palette.series_styles([f"s{i}" for i in range(20)])
    assert len({(v["color"], v["linestyle"]) for v in many.values()}) == 20
    assert len({v["color"] for v in list(many.values())[:9]}) == 9


@pytest.fixture
def results(tmp_path):
    rows = []
    for system, k in (("has", 1.0), ("random", 1.5), ("my-variant", 2.0), ("other-variant", 3.0)):
        for rate in (1.0, 2.0, 4.0):
            rows.append({"system": system, "workload.arrival.rate": rate, "run_id": f"{system}{rate}",
                         "status": "ok", "ttft_s.mean": k * rate, "ttft_s.p99": 2 * k * rate})
    pd.DataFrame(rows).to_parquet(tmp_path / "results.parquet", index=False)
    return tmp_path


def test_figure_lines_never_share_a_colour(results):
    frame = pd.read_parquet(results / "results.parquet")
    fig = make_figure("ttft-vs-rate", frame)
    colors = [ln.get_color() for ln in fig.axes[0].get_lines()]
    assert len(colors) == 4 and len(set(colors)) == 4
    assert colors[:2] == [palette.system_color("has"), palette.system_color("random")]


def test_svg_and_pdf_written(results, tmp_path):
    svg = plot("ttft-vs-rate", results, tmp_path / "out" / "fig.svg")
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    again = plot("ttft-vs-rate", results, tmp_path / "out" / "fig.svg", force=True)
    assert again.read_text() == text  # no date, fixed ids: same bytes
    assert plot("bars", results, tmp_path / "out" / "fig.pdf").read_bytes().startswith(b"%PDF")


def test_linear_option_changes_the_y_scale(results):
    frame = pd.read_parquet(results / "results.parquet")
    assert make_figure("ttft-vs-rate", frame).axes[0].get_yscale() == "log"  # the default
    assert make_figure("ttft-vs-rate", frame, log_y=False).axes[0].get_yscale() == "linear"
    parser = build_parser()
    base = ["plot", "ttft-vs-rate", str(results), "-o", "f.svg"]
    assert parser.parse_args(base).log_y is None
    assert parser.parse_args(base + ["--linear"]).log_y is False
    assert parser.parse_args(base + ["--log-y"]).log_y is True
    with pytest.raises(SystemExit):
        parser.parse_args(base + ["--linear", "--log-y"])


def test_cli_writes_a_linear_svg(results, tmp_path, capsys):
    from lmmsim.cli import main

    out = tmp_path / "lin.svg"
    assert main(["plot", "ttft-vs-rate", str(results), "-o", str(out), "--linear"]) == 0
    assert out.exists() and "<svg" in out.read_text()


def test_long_bar_labels_are_rotated(results):
    frame = pd.DataFrame({"system": ["rps-serve", "rps-serve-naive-classes", "rps-serve-static-only",
                                     "rps-serve-aging-only", "rps-serve-edf"], "ttft_s.mean": [1, 2, 3, 4, 5]})
    ax = make_figure("bars", frame).axes[0]
    labels = ax.get_xticklabels()
    assert [t.get_text() for t in labels][:2] == ["rps-serve", "rps-serve-naive-classes"]
    assert all(t.get_rotation() == 30 and t.get_horizontalalignment() == "right" for t in labels)
    bars = [p.get_facecolor() for p in ax.patches]
    assert len(set(bars)) == 5 and {p.get_hatch() for p in ax.patches} == {None}
    many = make_figure("bars", pd.DataFrame({"system": [f"s{i}" for i in range(11)], "ttft_s.mean": range(11)}))
    looks = [(p.get_facecolor(), p.get_hatch()) for p in many.axes[0].patches]
    assert len(set(looks)) == 11  # past nine colours: a hatch tells them apart
    with paper_style():
        short = new_figure().add_subplot()
        assert not fit_tick_labels(short, ["a", "b", "c"])
        assert short.get_xticklabels()[0].get_rotation() == 0
