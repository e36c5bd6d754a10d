"""app/spark/charts.py: the report's inline SVG charts and tables scale to their data and escape
every text they show."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from chunkmq.spark import charts

EVIL = '<script>alert("x")</script>&'


def _svg(figure: str) -> ET.Element:
    return ET.fromstring(figure)  # well-formed XML, so nothing unescaped slipped in


def test_bars_scale_to_the_largest_value_and_escape_labels() -> None:
    fig = _svg(charts.bars(EVIL, [("a", 10), (EVIL, 5), ("c", 0)]))
    rects = list(fig.iter("rect"))
    heights = [float(r.attrib["height"]) for r in rects]
    assert heights == [charts.H - 2 * charts.PAD, (charts.H - 2 * charts.PAD) / 2, 0.0]
    assert [r.find("title").text for r in rects] == ["a: 10", f"{EVIL}: 5", "c: 0"]  # type: ignore[union-attr]
    assert fig.find("figcaption").text == EVIL  # type: ignore[union-attr]


def test_all_zero_bars_do_not_divide_by_zero_and_no_data_is_said() -> None:
    fig = _svg(charts.bars("t", [("a", 0), ("b", 0)]))
    assert [float(r.attrib["height"]) for r in fig.iter("rect")] == [0.0, 0.0]
    assert charts.bars("<t>", []) == "<h3>&lt;t&gt;</h3><p>no data</p>"
    assert charts.lines("t", {"s": []}) == "<h3>t</h3><p>no data</p>"


def test_lines_span_the_plot_from_the_first_to_the_last_point() -> None:
    fig = _svg(charts.lines("rate", {"a": [(0, 0), (10, 4)], EVIL: [(5, 2)]}))
    first, second = fig.iter("polyline")
    start, end = first.attrib["points"].split()
    assert start == f"{charts.PAD:.1f},{charts.H - charts.PAD:.1f}"  # lowest x, y = 0
    assert end == f"{charts.W - charts.PAD:.1f},{charts.PAD:.1f}"  # highest x, the top value
    assert second.find("title").text == EVIL  # type: ignore[union-attr]
    assert [c.attrib["fill"] for c in fig.iter("circle")] == [charts.COLOURS[0]] * 2 + [charts.COLOURS[1]]


def test_a_single_point_has_no_span_and_still_draws() -> None:
    fig = _svg(charts.lines("one", {"a": [(7, 0)]}))
    assert next(fig.iter("circle")).attrib["cx"] == f"{charts.PAD:.1f}"


def test_tables_and_the_page_escape_every_cell() -> None:
    table = charts.table("t", ["h<1>"], [[EVIL, 3]])
    assert "<script>" not in table and "<td>3</td>" in table and "<th>h&lt;1&gt;</th>" in table
    page = charts.page(EVIL, EVIL, [table])
    assert "<script>" not in page and page.startswith("<!doctype html>") and table in page
