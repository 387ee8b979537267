"""The metrics screen's history: how much of the time the device decodes, from two snapshots."""

from __future__ import annotations

from infertui.core.protocol import MetricsSnapshot
from infertui.tui.metrics_history import MetricsHistory, decoding_percent


def snapshot(pool: str, at: float, decoding: float | None) -> MetricsSnapshot:
    return MetricsSnapshot(pool_id=pool, timestamp=at, decode_seconds_total=decoding)


def test_decoding_percent_is_the_share_of_the_wall_clock_between_two_snapshots() -> None:
    assert decoding_percent(snapshot("a", 10.0, 4.0), snapshot("a", 12.0, 5.5)) == 75.0


def test_decoding_percent_is_unknown_without_a_before_or_for_an_upstream() -> None:
    assert decoding_percent(None, snapshot("a", 1.0, 0.5)) is None
    assert decoding_percent(snapshot("u", 1.0, None), snapshot("u", 2.0, None)) is None
    assert decoding_percent(snapshot("a", 2.0, 1.0), snapshot("a", 2.0, 1.0)) is None


def test_decoding_percent_stays_within_100_and_a_reload_is_unknown_not_idle() -> None:
    assert decoding_percent(snapshot("a", 0.0, 0.0), snapshot("a", 1.0, 1.002)) == 100.0  # rounding
    assert decoding_percent(snapshot("a", 0.0, 9.0), snapshot("a", 1.0, 0.1)) is None  # reloaded


def test_the_host_plot_shows_the_busiest_device_and_pools_are_matched_by_id() -> None:
    history = MetricsHistory()
    history.add([snapshot("a", 0.0, 0.0), snapshot("b", 0.0, 0.0), snapshot("up", 0.0, None)])
    assert list(history.series["decoding"]) == [0.0]  # nothing to compare with yet
    history.add([snapshot("b", 1.0, 0.9), snapshot("a", 1.0, 0.2), snapshot("up", 1.0, None)])
    assert history.decoding == {"b": 90.0, "a": 20.0, "up": None}
    assert list(history.series["decoding"]) == [0.0, 90.0]
    assert history.decoding_known()
    history.add([snapshot("c", 2.0, 1.0)])  # the others went, a new one came
    assert history.decoding == {"c": None} and not history.decoding_known()
    assert list(history.series["decoding"])[-1] == 0.0
