"""Small inline SVG charts and tables for the HTML report (no scripts, no CDN; everything escaped)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

W, H, PAD = 640, 200, 40
COLOURS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2"]


def _e(value: Any) -> str:
    return html.escape(str(value))


def bars(title: str, items: Sequence[tuple[str, float]]) -> str:
    if not items:
        return f"<h3>{_e(title)}</h3><p>no data</p>"
    top = max(v for _, v in items) or 1
    width = (W - 2 * PAD) / len(items)
    parts = []
    for i, (label, value) in enumerate(items):
        h = (H - 2 * PAD) * value / top
        x = PAD + i * width
        parts.append(f'<rect x="{x:.1f}" y="{H - PAD - h:.1f}" width="{width * 0.8:.1f}" height="{h:.1f}" '
                     f'fill="{COLOURS[0]}"><title>{_e(label)}: {_e(value)}</title></rect>')
        parts.append(f'<text x="{x + width * 0.4:.1f}" y="{H - PAD + 14}" font-size="10" text-anchor="middle">'
                     f"{_e(label)}</text>")
    return _svg(title, parts, top)


def lines(title: str, series: dict[str, Sequence[tuple[float, float]]]) -> str:
    points = [p for s in series.values() for p in s]
    if not points:
        return f"<h3>{_e(title)}</h3><p>no data</p>"
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    top = max(p[1] for p in points) or 1
    span = (x1 - x0) or 1
    parts = []
    for i, (name, pts) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        xy = " ".join(f"{PAD + (W - 2 * PAD) * (x - x0) / span:.1f},{H - PAD - (H - 2 * PAD) * y / top:.1f}"
                      for x, y in pts)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{xy}">'
                     f"<title>{_e(name)}</title></polyline>")
        for x, y in pts:
            cx, cy = PAD + (W - 2 * PAD) * (x - x0) / span, H - PAD - (H - 2 * PAD) * y / top
            parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="2.5" fill="{colour}">'
                         f"<title>{_e(name)}: {_e(y)}</title></circle>")
        parts.append(f'<text x="{W - PAD}" y="{PAD + 14 * i}" font-size="11" text-anchor="end" fill="{colour}">'
                     f"{_e(name)}</text>")
    return _svg(title, parts, top)


def _svg(title: str, parts: list[str], top: float) -> str:
    axis = (f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="#999"/>'
            f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{H - PAD}" stroke="#999"/>'
            f'<text x="{PAD - 4}" y="{PAD}" font-size="10" text-anchor="end">{_e(f"{top:g}")}</text>'
            f'<text x="{PAD - 4}" y="{H - PAD}" font-size="10" text-anchor="end">0</text>')
    return (f'<figure><figcaption>{_e(title)}</figcaption><svg role="img" aria-label="{_e(title)}" '
            f'viewBox="0 0 {W} {H}" width="{W}" height="{H}">{axis}{"".join(parts)}</svg></figure>')


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<h3>{_e(title)}</h3><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def page(title: str, summary: str, sections: list[str]) -> str:
    style = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:60em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}figcaption{font-weight:600}")
    return (f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{_e(title)}</title>"
            f"<style>{style}</style></head><body><h1>{_e(title)}</h1><p>{_e(summary)}</p>{''.join(sections)}</body></html>")
