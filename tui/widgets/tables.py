"""What the dashboards' tables need on each refresh: rows refilled with columns that fit them."""

from __future__ import annotations

from rich.cells import cell_len, set_cell_size
from textual.widgets import DataTable


def cleared(table: DataTable[object]) -> DataTable[object]:
    """The table without its rows, each column as narrow as its label again. DataTable only
    ever widens a column, so one long cell (an engine since removed, a line of CJK text)
    kept it wide for good and pushed the columns after it out of sight."""
    table.clear()
    for column in table.columns.values():
        if column.auto_width:
            column.content_width = column.label.cell_len
    return table


def tail_cells(text: str, cells: int) -> str:
    """The end of `text` that fits in `cells` terminal cells (a CJK character takes two)."""
    width = 0
    for start in range(len(text) - 1, -1, -1):
        width += cell_len(text[start])
        if width > cells:
            return text[start + 1 :]
    return text


def head_cells(text: str, cells: int) -> str:
    """`text` in `cells` terminal cells, its end cut to "…" where it does not fit."""
    return text if cell_len(text) <= cells else set_cell_size(text, cells - 1) + "…"


def said_size(n: int) -> str:
    """Bytes as a table shows them: "94 MB", "1.3 GB"."""
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"
