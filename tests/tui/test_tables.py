"""The dashboards' tables: refilled each refresh, their columns fit what they hold now."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets import DataTable

from infertui.tui.widgets.tables import cleared, tail_cells


def test_the_tail_of_a_text_is_cut_by_terminal_cells() -> None:
    assert tail_cells("hello world", 5) == "world"
    assert tail_cells("短い文章です", 5) == "です"  # 4 cells: a third would take 6
    assert tail_cells("ab短", 4) == "ab短" and tail_cells("", 3) == ""


class OneTable(App[None]):
    def compose(self) -> ComposeResult:
        yield DataTable()


async def test_a_refilled_table_narrows_columns_a_long_cell_had_widened() -> None:
    """A removed engine's long name, a line of CJK text: the column stayed that wide and
    pushed the next ones out of sight."""
    app = OneTable()
    async with app.run_test(size=(80, 10)) as pilot:
        table = app.query_one(DataTable)
        first, _ = table.add_columns("engine", "state")
        table.add_row("an-engine-with-a-very-long-name", "ready")
        await pilot.pause()
        assert table.columns[first].content_width == len("an-engine-with-a-very-long-name")
        cleared(table).add_row("g2", "ready")
        await pilot.pause()
        assert table.columns[first].content_width == len("engine")
