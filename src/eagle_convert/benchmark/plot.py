"""The `bench --context-lengths --plot FILE` figure: τ (left) and per-position acceptance (right) against context
length, one point per bucket, the head solid and the reference head (--reference-draft) dashed.

SVG is written here by hand (no plotting dependency; the same report gives the same bytes); PNG only when matplotlib
is importable. Every data point is a <circle class="point" data-series=... data-bucket=...>, so the figure can be
checked by reading it as XML."""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import escape

from ..errors import EagleConvertError

WIDTH, PANEL_W, PANEL_H, LEFT, TOP, LEGEND_ROW = 880, 360, 260, 60, 50, 16
LEGEND_TOP = TOP + PANEL_H + 64  # below the tick labels and the axis title
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f")


class PlotError(EagleConvertError, ValueError):
    """A --plot file the bench cannot write (an extension other than .svg/.png, or .png without matplotlib)."""


def series(context: dict) -> list[dict]:
    """The curves: per head (the draft, then the reference), τ and each position's rate, one value per bucket."""
    out = []
    for name, block, dashed in (("draft", context, False), ("reference", context.get("reference"), True)):
        if not block:
            continue
        accs = [b["acceptance"] for b in block["buckets"]]
        out.append({"panel": 0, "name": f"{name} τ", "dashed": dashed,
                    "values": [a["mean_acceptance_length"] for a in accs]})
        for i in range(len(accs[0]["per_position_rates"])):
            out.append({"panel": 1, "name": f"{name} position {i + 1}", "dashed": dashed,
                        "values": [a["per_position_rates"][i] for a in accs]})
    return out


def check_plot_path(path: str | Path) -> None:
    """Before any work: an extension we write, and matplotlib for a PNG."""
    suffix = Path(path).suffix.lower()
    if suffix not in (".svg", ".png"):
        raise PlotError(f"--plot {path}: the file must end in .svg or .png.",
                        "Use FILE.svg (no dependency) or FILE.png (with matplotlib).")
    if suffix == ".png":
        try:
            import matplotlib  # noqa: F401
        except ImportError as error:
            raise PlotError(f"--plot {path}: writing PNG needs matplotlib, which this Python cannot import.",
                            "Write the figure as SVG instead (--plot FILE.svg, no dependency), or install "
                            "matplotlib.") from error


def write_plot(context: dict, path: str | Path) -> None:
    check_plot_path(path)
    path = Path(path)
    if path.suffix.lower() == ".svg":
        path.write_text(svg(context), encoding="utf-8")
    else:
        _png(context, path)


def svg(context: dict) -> str:
    labels = [b["label"] for b in context["buckets"]]
    curves = series(context)
    tau_max = max([v for c in curves if c["panel"] == 0 for v in c["values"] if v is not None] + [1.0])
    ranges = ((1.0, max(2.0, float(int(tau_max) + 1))), (0.0, 1.0))
    height = LEGEND_TOP + LEGEND_ROW * ((len(curves) + 3) // 4) + 8
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
             f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">',
             f'<rect width="{WIDTH}" height="{height}" fill="white"/>']
    for panel, title in enumerate(("τ (mean acceptance length)", "per-position acceptance")):
        parts += _axes(panel, title, labels, ranges[panel])
    colour_of: dict[str, str] = {}
    for curve in curves:
        key = curve["name"].split(" ", 1)[1]  # the same colour for a position in both heads
        colour = colour_of.setdefault(key, COLOURS[len(colour_of) % len(COLOURS)])
        parts += _curve(curve, len(labels), ranges[curve["panel"]], colour)
    parts += _legend(curves, colour_of)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _x(panel: int, index: int, count: int) -> float:
    left = LEFT + panel * (PANEL_W + 80)
    return left + (PANEL_W * (index + 0.5) / count)


def _y(value: float, bounds: tuple[float, float]) -> float:
    low, high = bounds
    return TOP + PANEL_H * (1 - (value - low) / (high - low))


def _axes(panel: int, title: str, labels: list[str], bounds: tuple[float, float]) -> list[str]:
    left = LEFT + panel * (PANEL_W + 80)
    out = [f'<rect x="{left}" y="{TOP}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#444"/>',
           f'<text x="{left + PANEL_W / 2:.1f}" y="{TOP - 18}" text-anchor="middle">{escape(title)}</text>',
           f'<text x="{left + PANEL_W / 2:.1f}" y="{TOP + PANEL_H + 36}" text-anchor="middle">'
           'context length (prompt tokens)</text>']
    low, high = bounds
    for step in range(5):
        value = low + (high - low) * step / 4
        y = _y(value, bounds)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + PANEL_W}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{value:.2f}</text>')
    for index, label in enumerate(labels):
        x = _x(panel, index, len(labels))
        out.append(f'<text x="{x:.1f}" y="{TOP + PANEL_H + 16}" text-anchor="middle">{escape(label)}</text>')
    return out


def _curve(curve: dict, count: int, bounds: tuple[float, float], colour: str) -> list[str]:
    points = [(_x(curve["panel"], i, count), _y(v, bounds), i) for i, v in enumerate(curve["values"]) if v is not None]
    dash = ' stroke-dasharray="6 4"' if curve["dashed"] else ""
    out = [f'<polyline fill="none" stroke="{colour}" stroke-width="2"{dash} points="'
           + " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in points) + '"/>'] if len(points) > 1 else []
    name = escape(curve["name"], {'"': "&quot;"})
    out += [f'<circle class="point" data-series="{name}" data-bucket="{i}" cx="{x:.1f}" cy="{y:.1f}" r="3.5" '
            f'fill="{"white" if curve["dashed"] else colour}" stroke="{colour}"/>' for x, y, i in points]
    return out


def _legend(curves: list[dict], colour_of: dict[str, str]) -> list[str]:
    out = []
    for row, curve in enumerate(curves):
        x, y = LEFT + (row % 4) * 200, LEGEND_TOP + (row // 4) * LEGEND_ROW
        colour = colour_of[curve["name"].split(" ", 1)[1]]
        dash = ' stroke-dasharray="6 4"' if curve["dashed"] else ""
        out.append(f'<line x1="{x}" y1="{y}" x2="{x + 24}" y2="{y}" stroke="{colour}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{x + 30}" y="{y + 4}">{escape(curve["name"])}</text>')
    return out


def _png(context: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = [b["label"] for b in context["buckets"]]
    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    for curve in series(context):
        axes[curve["panel"]].plot(labels, curve["values"], marker="o", label=curve["name"],
                                  linestyle="--" if curve["dashed"] else "-")
    for ax, title in zip(axes, ("τ (mean acceptance length)", "per-position acceptance")):
        ax.set_title(title)
        ax.set_xlabel("context length (prompt tokens)")
        ax.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
