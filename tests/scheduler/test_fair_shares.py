"""Issue 37 §2-3, exact orderings: a free slot goes to interactive work first, then to the
identity with the least weighted service (start-time fair queueing over tokens), each
identity's jobs in arrival order; positions and forecasts follow that order. A held engine
(held_engine.py) makes the order the scheduler's alone; the real engine's end-to-end cases are
in tests/http/test_fair_sharing.py."""

from __future__ import annotations

from collections import Counter

from infertui.core.protocol.shares import Priority, UserLimits
from infertui.core.scheduler.shares import Policy, Shares

from .held_engine import ask, engine_of, held_pool, owners


async def test_a_newcomer_starts_before_another_identitys_backlog() -> None:
    pool = held_pool(slots=2)
    engine = engine_of(pool)
    backlog = [ask(pool, "alice") for _ in range(20)]
    bob = ask(pool, "bob")
    assert [job.queue_position for job in backlog[:3]] == [0, 0, 0]  # two started, one next
    assert bob.queue_position == 0 and pool.position(bob)[0] == 0
    assert pool.queue().waiting[0].job_id == bob.id and pool.queue().waiting[0].identity == "bob"
    engine.end_oldest()  # the next free slot is bob's, not alice's 3rd job
    assert engine.given[-1].job_id == bob.id
    await pool.close()


async def test_identities_take_turns_and_each_keeps_its_own_arrival_order() -> None:
    pool = held_pool(slots=1)
    engine = engine_of(pool)
    jobs = {}
    for who in ("alice", "bob", "carol"):
        for _ in range(4):
            job = ask(pool, who)
            jobs[job.id] = job
    predicted = [e.job_id for e in pool.queue().waiting]
    while engine.held:
        engine.end_oldest()
    order = owners(engine.given, jobs)
    assert order == ["alice", "bob", "carol"] * 4
    assert [r.job_id for r in engine.given[1:]] == predicted  # the queue said so beforehand
    for who in ("alice", "bob", "carol"):
        mine = [r.job_id for r in engine.given if jobs[r.job_id].identity == who]
        assert mine == [j.id for j in jobs.values() if j.identity == who]  # arrival order
    await pool.close()


async def test_weights_share_the_slots_in_proportion() -> None:
    shares = Shares({"alice": Policy(UserLimits(weight=2.0))})
    pool = held_pool(slots=1, shares=shares)
    engine = engine_of(pool)
    jobs = {}
    for _ in range(40):
        for who in ("alice", "bob"):
            job = ask(pool, who)
            jobs[job.id] = job
    for _ in range(30):
        engine.end_oldest()
    counts = Counter(owners(engine.given[:30], jobs))
    assert counts == {"alice": 20, "bob": 10}
    await pool.close()


async def test_one_identity_alone_gets_every_slot() -> None:
    pool = held_pool(slots=4)
    engine = engine_of(pool)
    for _ in range(10):
        ask(pool, "alice")
    assert len(engine.held) == 4 and len(pool.queue().waiting) == 6
    await pool.close()


async def test_an_identity_is_charged_what_its_jobs_really_cost() -> None:
    """Alice's jobs ask for 200 tokens and stop after 20; Bob's run to 200. Charged what
    they really cost, Alice gets about ten jobs for each of Bob's."""
    pool = held_pool(slots=1)
    engine = engine_of(pool)
    jobs = {}
    for _ in range(30):
        for who in ("alice", "bob"):
            job = ask(pool, who, tokens=200)
            jobs[job.id] = job
    for _ in range(33):
        request = engine.given[-1]
        engine.end(
            request.job_id, tokens_out=20 if jobs[request.job_id].identity == "alice" else 200
        )
    counts = Counter(owners(engine.given[:33], jobs))
    assert counts["alice"] >= 3 * counts["bob"]
    await pool.close()


async def test_interactive_work_takes_the_next_slot_before_batch_work() -> None:
    pool = held_pool(slots=2)
    engine = engine_of(pool)
    batch = [ask(pool, "alice", priority=Priority.BATCH) for _ in range(6)]
    chat = ask(pool, "alice")  # her own interactive job passes her own batch work
    later = ask(pool, "bob", priority=Priority.BATCH)  # bob's batch passes alice's backlog
    waiting = pool.queue().waiting
    assert [e.job_id for e in waiting] == [chat.id, later.id] + [j.id for j in batch[2:]]
    assert [e.priority for e in waiting[:2]] == ["interactive", "batch"]
    engine.end_oldest()
    assert engine.given[-1].job_id == chat.id
    engine.end_oldest()
    assert engine.given[-1].job_id == later.id
    await pool.close()


async def test_slots_kept_for_interactive_work_are_never_taken_by_batch_work() -> None:
    pool = held_pool(slots=3, shares=Shares(interactive_slots=1))
    engine = engine_of(pool)
    for _ in range(5):
        ask(pool, "alice", priority=Priority.BATCH)
    assert len(engine.held) == 2  # one slot kept
    chat = ask(pool, "bob")
    assert chat.queue_position == 0 and engine.given[-1].job_id == chat.id  # at once
    await pool.close()


async def test_an_identitys_usual_class_applies_when_a_request_names_none() -> None:
    shares = Shares({"nightly": Policy(priority=Priority.BATCH)})
    pool = held_pool(slots=1, shares=shares)
    engine = engine_of(pool)
    ask(pool, "nightly")
    queued = [ask(pool, "nightly") for _ in range(3)]
    chat = ask(pool, "alice")
    assert chat.queue_position == 0 and all(job.batch for job in queued) and not chat.batch
    engine.end_oldest()
    assert engine.given[-1].job_id == chat.id
    await pool.close()


async def test_a_running_cap_keeps_an_identitys_extra_jobs_waiting_not_refused() -> None:
    shares = Shares({"alice": Policy(UserLimits(running=1))})
    pool = held_pool(slots=4, shares=shares)
    engine = engine_of(pool)
    mine = [ask(pool, "alice") for _ in range(3)]
    assert len(engine.held) == 1 and [j.queue_position for j in mine[1:]] == [0, 1]
    ask(pool, "bob")
    assert len(engine.held) == 2  # bob takes a free slot alice may not
    engine.end(mine[0].id)
    assert engine.given[-1].job_id == mine[1].id
    assert [u.running for u in shares.users() if u.identity == "alice"] == [1]
    await pool.close()


async def test_positions_and_forecasts_follow_the_fair_order() -> None:
    pool = held_pool(slots=1)
    engine = engine_of(pool)
    for _ in range(6):
        ask(pool, "alice")
    bob = [ask(pool, "bob") for _ in range(2)]
    waiting = pool.queue().waiting
    # alice's 1st runs (tag 0); bob's start at the clock (0), each flow a job's cost apart,
    # and a tie goes to the job that came first
    assert [e.identity for e in waiting] == ["bob", "alice", "bob"] + ["alice"] * 4
    assert [e.position for e in waiting] == list(range(7))
    starts = [e.predicted_start_ms for e in waiting]
    assert starts == sorted(starts)
    assert pool.position(bob[1]) == (2, waiting[2].predicted_start_ms)
    while engine.held:
        engine.end_oldest()
    assert [r.job_id for r in engine.given[1:]] == [e.job_id for e in waiting]
    await pool.close()


async def test_a_cancelled_waiting_job_leaves_the_order_and_its_share() -> None:
    shares = Shares()
    pool = held_pool(slots=1, shares=shares)
    engine = engine_of(pool)
    ask(pool, "alice")
    waiting = [ask(pool, "alice") for _ in range(2)]
    waiting[0].cancel()
    assert [e.job_id for e in pool.queue().waiting] == [waiting[1].id]
    assert {u.identity: u.queued for u in shares.users()} == {"alice": 1}
    while engine.held:
        engine.end_oldest()
    assert {u.identity: (u.queued, u.running) for u in shares.users()} == {"alice": (0, 0)}
    await pool.close()
