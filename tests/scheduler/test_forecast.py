"""The queue forecast behind predicted starts and Retry-After (issue 12 §9)."""

from __future__ import annotations

import pytest

from infertui.core.scheduler.forecast import Rates, start_times


def test_waiting_jobs_take_the_slot_that_frees_first() -> None:
    # Two slots busy for 3 s and 1 s; three jobs wait, holding a slot 2 s, 5 s and 1 s.
    assert start_times([3.0, 1.0], 0, [2.0, 5.0, 1.0]) == [1.0, 3.0, 3.0, 4.0]


def test_free_slots_start_jobs_at_once() -> None:
    assert start_times([], 2, [4.0, 4.0, 4.0]) == [0.0, 0.0, 4.0, 4.0]
    assert start_times([], 0, []) == [0.0]


def test_a_job_is_expected_to_run_to_its_budget_until_replies_say_otherwise() -> None:
    unknown = Rates(decode_tps=10.0, prefill_tps=None, typical_tokens_out=None)
    assert unknown.expected_tokens(400) == 400
    assert unknown.expected_tokens(400, generated=100) == 300
    known = Rates(decode_tps=10.0, prefill_tps=100.0, typical_tokens_out=50)
    assert known.expected_tokens(400) == 50
    assert known.expected_tokens(400, generated=30) == 20
    assert known.expected_tokens(400, generated=80) == 50  # past typical: as long again
    assert known.expected_tokens(60, generated=55) == 5  # never past its budget
    assert known.service_s(400, prompt_tokens=200) == pytest.approx(2.0 + 5.0)


def test_the_decode_rate_behind_the_forecast_ignores_lulls_and_first_tokens(monkeypatch) -> None:
    """A live host said "starts in ≈ 638 s" for a job that started in 6: the rate came from
    a few tokens spread over a window with idle time in it."""
    from infertui.core.scheduler import metrics as metrics_module

    clock = [100.0]
    monkeypatch.setattr(metrics_module.time, "monotonic", lambda: clock[0])
    recorder = metrics_module.MetricsRecorder("p")

    def step(at: float, tokens: int = 2) -> None:
        clock[0] = at
        recorder.record_tokens(tokens)

    step(100.0)
    step(100.1)
    assert recorder.active_decode_rate() is None  # two steps tell nothing yet
    for k in range(1, 31):  # then 3 s of steady decoding: 2 tokens every 0.1 s
        step(100.1 + k * 0.1)
    assert recorder.active_decode_rate() == pytest.approx(20.0)
    for k in range(1, 6):  # a 4 s lull, then a new run: only the new run counts
        step(107.2 + k * 0.05, tokens=1)
    assert recorder.active_decode_rate() is None  # too short a run to tell
    for k in range(6, 31):
        step(107.2 + k * 0.05, tokens=1)
    assert recorder.active_decode_rate() == pytest.approx(20.0)
    clock[0] = 109.0  # idle again: the last run's rate still says what a slot does
    assert recorder.active_decode_rate() == pytest.approx(20.0)


def test_the_lifetime_prompt_rate_counts_the_prompts_it_timed() -> None:
    """A job cancelled while it streams ends with the consumer's timings, which know no
    prefill: its prompt's tokens counted against no time, and a host whose replies were all
    stopped with Esc showed a lifetime prompt rate of 0 tokens/s."""
    from infertui.core.protocol.events import Finished
    from infertui.core.protocol.snapshots import TimingStats
    from infertui.core.scheduler.metrics import MetricsRecorder

    recorder = MetricsRecorder("p")
    recorder.record_prefill(200, 0.5)  # the first text: the prompt was read at 400 tokens/s
    aborted = TimingStats.measured(enqueued=0.0, end=3.0, first_token=0.6, tokens_in=200,
                                   tokens_out=60)  # fmt: skip
    recorder.record_finish(Finished("abort", aborted), prefill_recorded=True, ttft_recorded=True)
    snapshot = recorder.snapshot(queue_depth=0, queue_capacity=8, slots_busy=0, slots_total=1)
    assert snapshot.prefill_tps_lifetime == pytest.approx(400.0)
    assert snapshot.tokens_in_total == 200
    recorder.record_finish(Finished("stop", TimingStats.measured(  # an upstream's: at the end
        enqueued=0.0, end=2.0, first_token=1.0, tokens_in=100, tokens_out=5, admitted=0.0,
        prefill_done=1.0)))  # fmt: skip
    snapshot = recorder.snapshot(queue_depth=0, queue_capacity=8, slots_busy=0, slots_total=1)
    assert snapshot.prefill_tps_lifetime == pytest.approx(300 / 1.5)
