"""The figures of a run report, drawn with matplotlib's Agg canvas into PNG files.

Each function takes plain data (no run-folder knowledge), draws one idea, writes one PNG and
returns its path. matplotlib is imported inside the functions, and figures are built on an
explicit Agg canvas rather than through pyplot, so nothing here touches global plotting state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

DPI = 110
WIDE = (9.0, 4.8)
MARKERS = ("o", "s", "^", "D", "v", "P", "X")

# One colour per evaluation outcome, the same in every figure.
STATUS_COLORS = {
    "ok": "#2ca02c",
    "incorrect": "#ff7f0e",
    "compile_error": "#d62728",
    "rejected": "#9467bd",
    "timeout": "#8c564b",
    "memory_exceeded": "#e377c2",
    "crashed": "#7f7f7f",
    "model_error": "#17becf",
    "not_judged": "#dbdb8d",
    "operator failed": "#c7c7c7",
}


@dataclass(frozen=True)
class LineageStep:
    """One kernel on the chain from a baseline to a best kernel."""

    id: str
    generation: int
    speedup: float | None
    operator: str                            # the operator that produced it
    other_parents: tuple[float, ...] = ()    # speedups of further parents (crossover)


def _figure(size: tuple[float, float] = WIDE) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def _colors(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def _integer_x(ax: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _legend_outside(ax: Any, title: str | None = None) -> None:
    ax.legend(title=title, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)


def line_per_problem(series: Mapping[str, Sequence[tuple[int, float]]], *, title: str, ylabel: str, path: Path,
                     reference: float | None = None, reference_label: str = "", pending_from: int | None = None,
                     percent: bool = False) -> Path:
    """A value per generation, one line per problem (best speedup, best % of peak).

    Generations from `pending_from` on have no checkpoint yet and are shaded; `percent` puts
    the value axis on 0..100 (or above) so that a small gain is not drawn as a large one."""
    fig = _figure()
    ax = fig.add_subplot()
    if pending_from is not None:
        last = max((g for points in series.values() for g, _ in points), default=pending_from)
        ax.axvspan(pending_from - 0.5, last + 0.5, color="#eeeeee", label="no checkpoint yet")
    many = len(series) > 10   # tab20 pairs similar hues: tell neighbours apart by marker and dash
    for i, ((name, points), color) in enumerate(zip(series.items(), _colors(len(series)))):
        if points:
            xs, ys = zip(*sorted(points))
            ax.plot(xs, ys, marker=MARKERS[i % len(MARKERS)] if many else "o", markersize=4.5, color=color,
                    linestyle="--" if many and i % 2 else "-", label=name)
    if reference is not None:
        ax.axhline(reference, color="black", linestyle="--", linewidth=1, label=reference_label or None)
    if percent:
        top = max((v for points in series.values() for _, v in points), default=100.0)
        ax.set_ylim(0, max(100.0, top * 1.05))
    ax.set_xlabel("generation")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    _integer_x(ax)
    _legend_outside(ax, "problem")
    return _save(fig, path)


def fitness_distribution(dist: Mapping[str, Mapping[int, Sequence[float]]], *, title: str, ylabel: str,
                         path: Path) -> Path:
    """Box plots of the population's speedups per generation; one panel per problem."""
    names = [n for n, by_gen in dist.items() if any(by_gen.values())]
    cols = 1 if len(names) == 1 else 2 if len(names) <= 4 else 3
    rows = math.ceil(len(names) / cols)
    fig = _figure((WIDE[0], max(3.4, 2.9 * rows + 0.8)))
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, name in zip(axes.flat, names):
        gens = sorted(g for g, values in dist[name].items() if values)
        ax.boxplot([list(dist[name][g]) for g in gens], positions=gens, widths=0.6, manage_ticks=False,
                   medianprops={"color": "#1f77b4"}, flierprops={"markersize": 3})
        ax.set_title(name, fontsize="medium")
        ax.set_xlabel("generation")
        ax.set_ylabel(ylabel)
        ax.set_xlim(min(gens) - 0.7, max(gens) + 0.7)
        ax.grid(alpha=0.3)
        _integer_x(ax)
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    fig.suptitle(title)
    return _save(fig, path)


def stacked_bars(counts: Mapping[Any, Mapping[str, float]], *, categories: Sequence[str], title: str, xlabel: str,
                 ylabel: str, path: Path, colors: Mapping[str, str] | None = None, horizontal: bool = False,
                 legend_title: str | None = None, value_format: str | None = None) -> Path:
    """Bars of per-category values stacked per group (outcomes per generation, tokens per role...);
    `value_format` formats the value axis (a str.format pattern of `x`, e.g. "{x:,.0f}")."""
    groups = list(counts)
    shown = [c for c in categories if any(counts[g].get(c, 0) for g in groups)]
    palette = dict(zip(shown, _colors(len(shown))))
    palette.update({c: v for c, v in (colors or {}).items() if c in palette})
    height = max(3.2, 0.45 * len(groups) + 1.6) if horizontal else WIDE[1]
    fig = _figure((WIDE[0], height))
    ax = fig.add_subplot()
    positions = list(range(len(groups))) if horizontal or not all(isinstance(g, int) for g in groups) else groups
    bottom = [0.0] * len(groups)
    for cat in shown:
        values = [float(counts[g].get(cat, 0)) for g in groups]
        if horizontal:
            ax.barh(positions, values, left=bottom, color=palette[cat], label=cat)
        else:
            ax.bar(positions, values, bottom=bottom, color=palette[cat], label=cat, width=0.75)
        bottom = [b + v for b, v in zip(bottom, values)]
    if horizontal:
        ax.set_yticks(positions, [str(g) for g in groups])
        ax.invert_yaxis()
        ax.set_xlabel(ylabel)
        ax.set_ylabel(xlabel)
        ax.grid(axis="x", alpha=0.3)
    else:
        if positions is not groups:
            ax.set_xticks(positions, [str(g) for g in groups])
        else:
            _integer_x(ax)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3)
    if value_format:
        from matplotlib.ticker import StrMethodFormatter

        (ax.xaxis if horizontal else ax.yaxis).set_major_formatter(StrMethodFormatter(value_format))
    ax.set_title(title)
    _legend_outside(ax, legend_title)
    return _save(fig, path)


def lineage(steps: Sequence[LineageStep], *, title: str, ylabel: str, path: Path) -> Path:
    """The chain of kernels that led to a best kernel, one step per kernel, each point coloured by
    the operator that produced it; further parents of a crossover are hollow grey points."""
    operators = list(dict.fromkeys(s.operator for s in steps))
    palette = dict(zip(operators, _colors(len(operators))))
    fig = _figure()
    ax = fig.add_subplot()
    xs = list(range(len(steps)))
    known = [(x, s) for x, s in zip(xs, steps) if s.speedup is not None]
    ax.plot([x for x, _ in known], [s.speedup for _, s in known], color="#555555", linewidth=1.2, zorder=1)
    labelled: set[str] = set()
    for x, s in known:
        label = s.operator if s.operator not in labelled else None
        labelled.add(s.operator)
        ax.scatter([x], [s.speedup], s=80, color=palette[s.operator], edgecolors="black", linewidths=0.8,
                   label=label, zorder=3)
        ax.annotate(f"{s.speedup:.2f}×", (x, s.speedup), textcoords="offset points", xytext=(0, 9), ha="center",
                    fontsize="small")
        for i, other in enumerate(s.other_parents):
            ax.scatter([x - 0.5], [other], s=45, facecolors="none", edgecolors="#777777", zorder=2,
                       label="other parent (crossover)" if "other" not in labelled else None)
            labelled.add("other")
            ax.annotate("", xy=(x, s.speedup), xytext=(x - 0.5, other),
                        arrowprops={"arrowstyle": "-|>", "color": "#999999", "linestyle": "--", "shrinkA": 4,
                                    "shrinkB": 6})
    ax.axhline(1.0, color="black", linestyle=":", linewidth=1)
    ax.set_xticks(xs, [f"gen {s.generation}" for s in steps])
    ax.set_xlabel("step on the chain (generation in which each kernel was produced)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.margins(x=0.08, y=0.15)
    _legend_outside(ax, "produced by")
    return _save(fig, path)
