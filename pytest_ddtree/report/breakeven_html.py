"""The break-even map in the HTML report: a heat-map of depth by load point.

Each cell's colour is its speedup over the target alone (green above 1, red below, the
deeper the further from 1; grey where no speedup was measured); its text the answer, budget
or off, with the speedup and its interval, as the terminal's map says it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from pytest_ddtree.measure.breakeven import BreakEvenMap, Cell
from pytest_ddtree.report.breakeven_text import breakeven_answer, cell_text, map_lines

__all__ = ["render_breakeven_section", "speedup_colour"]

#: the speedup at which a cell's colour is at its deepest (2x faster, or 2x slower)
SATURATION = 2.0


def speedup_colour(ratio: float | None) -> str:
    """A cell's background: green for faster than the target alone, red for slower."""
    if ratio is None or not math.isfinite(ratio) or ratio <= 0:
        return "#e5e7eb"
    depth = min(1.0, abs(math.log(ratio)) / math.log(SATURATION))
    light = round(92 - 42 * depth)
    hue = 140 if ratio >= 1 else 0
    return f"hsl({hue}, 65%, {light}%)"


def _ratio(c: Cell) -> float | None:
    r = c.speedups.get(c.answer) if c.answered and not c.off else c.speedup
    return None if r is None else r.estimate


def _table(m: BreakEvenMap) -> str:
    head = "".join(f"<th>{escape(p.label)}</th>" for p in m.points)
    rows = []
    for d in m.depths:
        cells = []
        for p in m.points:
            c = m.cell(d, p)
            colour = speedup_colour(_ratio(c))
            cells.append(
                f'<td class="heat" style="background:{colour}">{escape(cell_text(c))}</td>'
            )
        rows.append(f"<tr><th>{d}</th>{''.join(cells)}</tr>")
    return (
        '<div class="table-scroll"><table class="stats breakeven"><thead><tr>'
        f"<th>prompt tokens</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def render_breakeven_section(maps: Sequence[tuple[str, BreakEvenMap]]) -> str:
    """One card per map: the answer, the heat-map and the lines under the terminal's map."""
    out = []
    for nodeid, m in maps:
        notes = map_lines(m)[len(m.depths) + 1 : -1]
        listed = "".join(f"<li>{escape(n)}</li>" for n in notes)
        out.append(
            f'<section class="card"><h2>Is speculation worth it? {escape(nodeid)}</h2>'
            f'<p class="rec-msg">{escape(breakeven_answer(m))}</p>{_table(m)}'
            f'<ul class="notes">{listed}</ul></section>'
        )
    return "".join(out)
