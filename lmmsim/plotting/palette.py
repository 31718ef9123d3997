"""Colours, markers and line styles of lmmsim's series: Okabe-Ito, fixed per known system, distinct per figure.

The palette is Okabe & Ito's eight colours (*Color Universal Design*, 2008),
chosen to stay distinguishable under protanopia, deuteranopia and tritanopia
and in greyscale print, plus a neutral grey as a ninth:

======================  =========  ==============
name                    hex        Okabe-Ito name
======================  =========  ==============
``OKABE_ITO[0]``        #0072B2    blue
``OKABE_ITO[1]``        #E69F00    orange
``OKABE_ITO[2]``        #009E73    bluish green
``OKABE_ITO[3]``        #D55E00    vermillion
``OKABE_ITO[4]``        #CC79A7    reddish purple
``OKABE_ITO[5]``        #56B4E9    sky blue
``OKABE_ITO[6]``        #000000    black
``OKABE_ITO[7]``        #999999    grey (extra)
``OKABE_ITO[8]``        #F0E442    yellow (last: weak on white)
======================  =========  ==============

:data:`SYSTEM_STYLES` fixes a colour, marker and line style for every system
preset (``lmmsim list systems``), the reproduction labels (``vllm-best``,
``dynamo-best``, ``easerve-has``, ``easerve-has-s1``, ``rserve-tt``) and the
search methods (``has``, ``random``, ``coordinate``), chosen so that the series
drawn together in one reproduction figure all differ in colour (the tests check
every ``system``/``name`` axis under ``scenarios/reproduce/``). A name
``X-best`` for another known ``X`` takes X's colour and marker, dashed.

:func:`series_styles` styles the series of *one* figure: known names keep their
fixed style unless an earlier known name in the figure already holds that
colour; every other name takes, in order of appearance, the first palette colour
the figure does not use yet, and once all nine are taken, the first
(colour, line style) pair not used yet, so no two series of a figure look alike.
Markers (a second channel for lines and scatter points) follow the same rule.
"""

from __future__ import annotations

from collections.abc import Iterable

BLUE, ORANGE, GREEN, VERMILLION, PURPLE, SKY, BLACK, GREY, YELLOW = (
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#999999", "#F0E442",
)
#: Okabe-Ito colours plus grey, in the order unknown series take them.
OKABE_ITO: tuple[str, ...] = (BLUE, ORANGE, GREEN, VERMILLION, PURPLE, SKY, BLACK, GREY, YELLOW)
#: Line styles, in the order a figure falls back to once its colours run out.
LINESTYLES: tuple[str, ...] = ("-", "--", "-.", ":")
#: Markers for series without a fixed one, in order.
FALLBACK_MARKERS: tuple[str, ...] = ("o", "s", "^", "v", "D", "P", "X", "*", "h", "p", "<", ">", "d", "H", "8")


def _s(color: str, marker: str, linestyle: str = "-") -> dict[str, str]:
    return {"color": color, "marker": marker, "linestyle": linestyle}


#: Fixed colour, marker and line style per known series name.
SYSTEM_STYLES: dict[str, dict[str, str]] = {
    # presets (lmmsim.systems)
    "vllm": _s(BLUE, "o"),
    "vllm-pp": _s(SKY, "s"),
    "gllm": _s(ORANGE, "^"),
    "gllm-epd": _s(VERMILLION, "v"),
    "modserve": _s(PURPLE, "D"),
    "modserve+rps": _s(ORANGE, "d", "--"),
    "dynamo": _s(BLACK, "P"),
    "rserve": _s(GREEN, "*"),
    "rserve-intra": _s(BLACK, "X", "--"),
    "rps-serve": _s(VERMILLION, "h"),
    "rps-serve-naive-classes": _s(SKY, "<", "--"),
    "rps-serve-static-only": _s(GREEN, ">", "--"),
    "rps-serve-aging-only": _s(ORANGE, "H", "--"),
    "rps-serve-edf": _s(BLACK, "8", "--"),
    "easerve": _s(VERMILLION, "p"),
    "easerve-s1": _s(ORANGE, "<", "-."),
    # reproduction labels
    "easerve-has": _s(PURPLE, ">"),
    "easerve-has-s1": _s(GREEN, "d", "-."),
    "vllm-best": _s(SKY, "o", "--"),
    "dynamo-best": _s(GREY, "P", "--"),
    "rserve-tt": _s(PURPLE, "d", "--"),
    # search methods (lmmsim search --method)
    "has": _s(VERMILLION, "*"),
    "random": _s(SKY, "s", "--"),
    "coordinate": _s(BLACK, "^", "-."),
}


def known_style(name: str) -> dict[str, str] | None:
    """The fixed style of ``name`` (``X-best``: X's colour and marker, dashed), or None."""
    style = SYSTEM_STYLES.get(name)
    if style is None and name.endswith("-best") and name[: -len("-best")] in SYSTEM_STYLES:
        style = {**SYSTEM_STYLES[name[: -len("-best")]], "linestyle": "--"}
    return dict(style) if style else None


def series_styles(names: Iterable) -> dict[str, dict[str, str]]:
    """``{name: {"color", "marker", "linestyle"}}`` for the distinct ``names`` of one figure (see the module doc)."""
    order = list(dict.fromkeys(str(n) for n in names))
    styles: dict[str, dict[str, str]] = {}
    colors: set[str] = set()
    pairs: set[tuple[str, str]] = set()
    markers: set[str] = set()
    for name in order:  # known names first: they keep their colour unless it is taken
        style = known_style(name)
        if style is not None and style["color"] not in colors:
            styles[name] = style
            colors.add(style["color"])
            pairs.add((style["color"], style["linestyle"]))
            markers.add(style["marker"])
    for name in order:
        if name in styles:
            continue
        free = [c for c in OKABE_ITO if c not in colors]
        if free:
            color, linestyle = free[0], "-"
        else:
            color, linestyle = next(((c, ls) for ls in LINESTYLES for c in OKABE_ITO if (c, ls) not in pairs),
                                    (OKABE_ITO[len(styles) % len(OKABE_ITO)], "-"))
        known = known_style(name)
        marker = known["marker"] if known and known["marker"] not in markers else \
            next((m for m in FALLBACK_MARKERS if m not in markers), FALLBACK_MARKERS[len(styles) % len(FALLBACK_MARKERS)])
        styles[name] = {"color": color, "marker": marker, "linestyle": linestyle}
        colors.add(color)
        pairs.add((color, linestyle))
        markers.add(marker)
    return {name: styles[name] for name in order}


def system_color(name: str) -> str:
    """Fixed colour of ``name``; an unknown name alone gets the palette's first (use :func:`series_styles`
    for the series of one figure)."""
    return series_styles([name])[name]["color"]


def system_marker(name: str) -> str:
    """Fixed marker of ``name`` (an unknown name alone: the first fallback marker)."""
    return series_styles([name])[name]["marker"]


def system_style(name: str) -> dict[str, str]:
    """``{"color", "marker", "linestyle", "label"}`` for ``ax.plot(..., **system_style(name))``."""
    return {**series_styles([name])[name], "label": name}


#: Colour per request modality (Okabe-Ito).
MODALITY_COLORS: dict[str, str] = {"text": BLUE, "image": ORANGE, "video": GREEN, "audio": PURPLE}
MIXED_COLOR = BLACK  # anything else (e.g. a request mixing modalities)


def modality_color(modality: str) -> str:
    """Colour of a modality; unknown or mixed modalities share :data:`MIXED_COLOR`."""
    return MODALITY_COLORS.get(modality, MIXED_COLOR)
