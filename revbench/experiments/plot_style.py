"""The figures' common style, and the check that a drawn figure reads well.

Every figure of :mod:`revbench.experiments.plot` is laid out by matplotlib's
``constrained_layout``; its log axes carry a label on each power of ten only (matplotlib's
:class:`~matplotlib.ticker.LogLocator` spaces them for the axis' length, minor ticks are not
labelled) and span at least two of them; its legends are at least :data:`LEGEND_FONTSIZE`
points; its point labels are placed clear of every marker and of each other
(:func:`place_labels`).  :func:`layout_problems` measures a drawn figure for what would break
these (overprinted tick labels, labels on markers, small legends, text cut off), and the tests
apply it to every figure.

matplotlib is imported inside the functions: importing this module costs nothing.
"""

from __future__ import annotations

import math
from typing import Any

#: the smallest font of a legend, in points
LEGEND_FONTSIZE = 9
#: the font of a point's label, in points
LABEL_FONTSIZE = 8


def figure(nrows: int = 1, ncols: int = 1, **kw: Any):
    """``plt.subplots`` with ``constrained_layout``: ``(fig, axes)``."""
    import matplotlib.pyplot as plt

    return plt.subplots(nrows, ncols, layout="constrained", **kw)


def log_axis(ax: Any, which: str = "xy") -> None:
    """Log scale on ``ax``'s x and/or y axis (``which``), labels on the powers of ten only.

    The major ticks are matplotlib's ``LogLocator`` (as many as the axis' length has room for,
    ``numticks="auto"``) written as ``10^k``; the minor ticks (2..9 times a power) are drawn,
    unlabelled.  Call :func:`decade_limits` once the data are plotted, so that at least two
    labels show."""
    from matplotlib.ticker import LogFormatterSciNotation, LogLocator, NullFormatter

    for name in which:
        axis = ax.xaxis if name == "x" else ax.yaxis
        (ax.set_xscale if name == "x" else ax.set_yscale)("log")
        axis.set_major_locator(LogLocator(base=10.0, numticks="auto"))
        axis.set_major_formatter(LogFormatterSciNotation(base=10.0))
        axis.set_minor_locator(LogLocator(base=10.0, subs=tuple(range(2, 10)), numticks="auto"))
        axis.set_minor_formatter(NullFormatter())


def _decades(lo: float, hi: float) -> tuple[float, float]:
    """``(lo, hi)`` widened, as little as it takes, to hold at least two powers of ten (a log
    axis with fewer would show one label, or none)."""
    def powers(a: float, b: float) -> int:
        return math.floor(math.log10(b) + 1e-9) - math.ceil(math.log10(a) - 1e-9) + 1

    if powers(lo, hi) >= 2:
        return lo, hi
    down = 10.0 ** math.floor(math.log10(lo) + 1e-9)
    up = 10.0 ** math.ceil(math.log10(hi) - 1e-9)
    wider = [(a, b) for a, b in ((down, hi), (lo, up), (down, up)) if powers(a, b) >= 2]
    if not wider:  # lo = hi, a power of ten
        return lo, lo * 10.0
    return min(wider, key=lambda ab: ab[1] / ab[0])


def decade_limits(ax: Any, which: str = "xy") -> None:
    """Widen ``ax``'s log axes (``which``) to hold at least two powers of ten, each labelled."""
    for name in which:
        lo, hi = ax.get_xlim() if name == "x" else ax.get_ylim()
        flipped = lo > hi
        lo, hi = sorted((lo, hi))
        if not (lo > 0 and math.isfinite(lo) and math.isfinite(hi)):
            continue
        lo, hi = _decades(lo, hi)
        if flipped:
            lo, hi = hi, lo
        (ax.set_xlim if name == "x" else ax.set_ylim)(lo, hi)


def _renderer(fig: Any):
    fig.draw_without_rendering()  # runs constrained_layout: positions are final from here
    return fig.canvas.get_renderer()


def _laid_out(fig: Any):
    """The renderer, once ``fig``'s layout engine has placed the axes (what
    :func:`place_labels` measures: axes and markers, not the text drawn around them) --
    without drawing the whole figure, which costs as much again."""
    engine = fig.get_layout_engine()
    if engine is None:
        return _renderer(fig)
    engine.execute(fig)
    return fig.canvas.get_renderer()


def _overlap(a: Any, b: Any, pad: float = 0.0) -> bool:
    return (a.x0 < b.x1 - pad and b.x0 < a.x1 - pad and a.y0 < b.y1 - pad and b.y0 < a.y1 - pad)


def _inside(box: Any, frame: Any, pad: float = 0.0) -> bool:
    return (box.x0 >= frame.x0 - pad and box.y0 >= frame.y0 - pad and box.x1 <= frame.x1 + pad
            and box.y1 <= frame.y1 + pad)


def _marker_boxes(ax: Any) -> list[Any]:
    """A display-space box around each marker drawn in ``ax`` (scatter points and the markers
    of lines)."""
    import numpy as np
    from matplotlib.collections import PathCollection
    from matplotlib.transforms import Bbox

    px = ax.figure.dpi / 72.0
    boxes = []
    for coll in ax.collections:
        if not isinstance(coll, PathCollection) or not coll.get_visible():
            continue
        offsets = coll.get_offset_transform().transform(np.asarray(coll.get_offsets(), float))
        sizes = coll.get_sizes()
        for i, (x, y) in enumerate(offsets):
            if not (np.isfinite(x) and np.isfinite(y)):
                continue
            r = math.sqrt(sizes[i % len(sizes)] if len(sizes) else 36.0) / 2 * px
            boxes.append(Bbox.from_extents(x - r, y - r, x + r, y + r))
    for line in ax.lines:
        if line.get_marker() in (None, "None", "", " ") or not line.get_visible():
            continue
        r = line.get_markersize() / 2 * px
        xy = line.get_transform().transform(np.column_stack(line.get_data()).astype(float))
        for x, y in xy:
            if np.isfinite(x) and np.isfinite(y):
                boxes.append(Bbox.from_extents(x - r, y - r, x + r, y + r))
    return boxes


#: where a point's label may go, in points from the point, nearest first: (dx, dy, ha, va)
_SPOTS = [(dx * k, dy * k, ha, va) for k in (1, 2, 3.5)
          for dx, dy, ha, va in ((6, 4, "left", "bottom"), (6, -4, "left", "top"),
                                 (-6, 4, "right", "bottom"), (-6, -4, "right", "top"),
                                 (0, 7, "center", "bottom"), (0, -7, "center", "top"),
                                 (8, 0, "left", "center"), (-8, 0, "right", "center"))]


def _segment_hits(a: tuple[float, float], b: tuple[float, float], box: Any) -> bool:
    """Whether the segment from ``a`` to ``b`` (display space) crosses ``box`` (sampled)."""
    return any(box.contains(a[0] + (b[0] - a[0]) * k / 16, a[1] + (b[1] - a[1]) * k / 16)
               for k in range(1, 16))


def place_labels(ax: Any, points: list[tuple[float, float, str, Any]],
                 fontsize: float = LABEL_FONTSIZE) -> list[Any]:
    """Label each ``(x, y, text, color)`` of ``points`` (data coordinates) in ``ax``, at the
    nearest spot around it where the label covers no marker, no other label or leader line
    and stays inside the axes; a label moved further than the nearest ring gets a thin leader
    line, which crosses no other label.  The most crowded points are labelled first; where
    no spot is free, the one covering least is taken.  Call it last: it measures the figure as
    laid out."""
    import numpy as np

    renderer = _laid_out(ax.figure)
    frame = ax.get_window_extent(renderer)
    markers = _marker_boxes(ax)
    where = ax.transData.transform(np.array([(x, y) for x, y, _, _ in points], float).reshape(-1, 2))
    near = 40 * ax.figure.dpi / 72.0  # "crowded": other markers within 40 points

    def crowd(i: int) -> int:
        return sum(abs(m.x0 + m.x1 - 2 * where[i][0]) < 2 * near and
                   abs(m.y0 + m.y1 - 2 * where[i][1]) < 2 * near for m in markers)

    placed: list[Any] = []
    leaders: list[tuple[tuple[float, float], tuple[float, float]]] = []
    out: list[Any] = [None] * len(points)
    for n in sorted(range(len(points)), key=lambda i: -crowd(i)):
        x, y, text, color = points[n]
        px, py = where[n]
        best = None
        for i, (dx, dy, ha, va) in enumerate(_SPOTS):
            ann = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points",
                              ha=ha, va=va, fontsize=fontsize, color=color)
            box = ann.get_window_extent(renderer)
            ann.remove()
            leader = None
            if i >= 8:
                start = (min(max(px, box.x0), box.x1), min(max(py, box.y0), box.y1))
                leader = (start, (px, py))
            cost = sum(_overlap(box, m, 0.5) for m in markers) + \
                2 * sum(_overlap(box, p) for p in placed) + \
                sum(_segment_hits(a, b, box) for a, b in leaders) + \
                (sum(_segment_hits(*leader, p) for p in placed) if leader else 0) + \
                (0 if _inside(box, frame) else 4)
            if best is None or cost < best[0]:
                best = (cost, i, box, leader)
            if cost == 0:
                break
        _, i, box, leader = best
        dx, dy, ha, va = _SPOTS[i]
        arrow = dict(arrowstyle="-", color=color, lw=0.5, shrinkA=0, shrinkB=4) if leader else None
        ann = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", ha=ha,
                          va=va, fontsize=fontsize, color=color, arrowprops=arrow)
        ann.set_in_layout(False)  # placed inside the axes: the layout need not move for it
        placed.append(box)
        if leader:
            leaders.append(leader)
        out[n] = ann
    return out


def _tick_labels(axis: Any, lo: float, hi: float, index: int) -> list[Any]:
    """The tick labels ``axis`` draws: visible, not empty, at a tick inside its view."""
    lo, hi = sorted((lo, hi))
    tol = 1e-9 * max(abs(lo), abs(hi), 1.0)
    return [t for t in axis.get_ticklabels(which="both")
            if t.get_visible() and t.get_text().strip()
            and lo - tol <= t.get_position()[index] <= hi + tol]


def drawn_texts(fig: Any) -> list[Any]:
    """Every text ``fig`` draws that is visible and not empty: titles, axis and tick labels,
    annotations, legends."""
    texts = list(fig.texts)
    if getattr(fig, "_suptitle", None) is not None:
        texts.append(fig._suptitle)
    legends = list(fig.legends)
    for ax in fig.axes:
        texts += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label]
        texts += list(ax.texts)
        texts += _tick_labels(ax.xaxis, *ax.get_xlim(), 0) + _tick_labels(ax.yaxis, *ax.get_ylim(), 1)
        if ax.get_legend() is not None:
            legends.append(ax.get_legend())
    for leg in legends:
        texts += list(leg.get_texts()) + [leg.get_title()]
    return [t for t in texts if t.get_visible() and t.get_text().strip()]


def layout_problems(fig: Any) -> list[str]:
    """What reads badly in ``fig``, drawn: overlapping tick labels on one axis, a log axis with
    fewer than two labels, a point's label on a marker or on another label, a legend under
    :data:`LEGEND_FONTSIZE` points, a text reaching out of the figure.  Empty when it reads
    well."""
    from matplotlib.text import Annotation, Text

    renderer = _renderer(fig)
    problems = []
    for n, ax in enumerate(fig.axes):
        for name, axis, lim, index in (("x", ax.xaxis, ax.get_xlim(), 0),
                                       ("y", ax.yaxis, ax.get_ylim(), 1)):
            labels = _tick_labels(axis, *lim, index)
            if axis.get_scale() == "log" and ax.get_visible() and len(labels) < 2:
                problems.append(f"axes {n}: log {name} axis has fewer than two labelled ticks")
            boxes = [t.get_window_extent(renderer) for t in labels]
            for i in range(len(boxes)):
                for j in range(i + 1, len(boxes)):
                    if _overlap(boxes[i], boxes[j]):
                        problems.append(f"axes {n}: {name} tick labels {labels[i].get_text()!r} "
                                        f"and {labels[j].get_text()!r} overlap")
        anns = [a for a in ax.texts if isinstance(a, Annotation) and a.get_text().strip()]
        markers = _marker_boxes(ax)
        boxes = [Text.get_window_extent(a, renderer) for a in anns]  # the text, no arrow
        for i, (a, box) in enumerate(zip(anns, boxes)):
            point = ax.transData.transform(a.xy)
            if box.contains(*point):
                problems.append(f"axes {n}: label {a.get_text()!r} covers its own point")
            if any(_overlap(box, m, 0.5) for m in markers):
                problems.append(f"axes {n}: label {a.get_text()!r} covers a marker")
            for j in range(i + 1, len(boxes)):
                if _overlap(box, boxes[j]):
                    problems.append(f"axes {n}: labels {a.get_text()!r} and "
                                    f"{anns[j].get_text()!r} overlap")
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    for leg in legends:
        for t in leg.get_texts():
            if t.get_fontsize() < LEGEND_FONTSIZE:
                problems.append(f"legend entry {t.get_text()!r} is {t.get_fontsize():.1f} pt")
    frame = fig.bbox
    for t in drawn_texts(fig):
        box = t.get_window_extent(renderer)
        if not _inside(box, frame, 1.0):
            problems.append(f"text {t.get_text()!r} reaches out of the figure")
    return problems
