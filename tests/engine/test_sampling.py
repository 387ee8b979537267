"""Sampling in the graph and on the host, on the real model (issue 10 §1).

The in-graph path is llama.cpp's backend sampling; on the CPU backend it runs the very graph
code a GPU runs, so these tests cover it here. At temperature 0 both paths give the same
tokens; with a fixed seed each path gives the same text run after run, also when a slot's
installed chain is reused by the next job.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import llama_cpp as llama
import numpy as np
import pytest

from infertui.core.engine import BUNDLED_SAMPLING
from infertui.core.engine.llama import recommended, step_sampler
from infertui.core.engine.llama.fast_rows import FAST_ROWS
from infertui.core.engine.llama.native import Batch, LlamaContext, LlamaModel
from infertui.core.engine.llama.sampler import SamplerChain
from infertui.core.engine.llama.step_sampler import (
    StepSampler,
    _row_candidates,
    _top_k_candidates,
)
from infertui.core.protocol.common import SamplingParams
from infertui.core.protocol.events import TokenText

from ..jobs import submit

pytestmark = pytest.mark.model

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "The three primary colors are",
]
GREEDY = SamplingParams(temperature=0.0, max_tokens=24)
# A top-k row is sampled in C where the install built fast_rows.c, else through numpy: the
# tests that draw rows take both ways.
ROW_WAYS = [
    pytest.param(
        "compiled",
        marks=pytest.mark.skipif(FAST_ROWS is None, reason="fast_rows.c is not built here"),
    ),
    "numpy",
]


@pytest.fixture
def row_way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    way: str = request.param
    if way == "numpy":
        monkeypatch.setattr(step_sampler, "FAST_ROWS", None)
    return way


SEEDED = SamplingParams(temperature=0.9, top_k=40, top_p=0.95, seed=4242, max_tokens=24)
PENALISED = SEEDED.model_copy(update={"repeat_penalty": 1.3, "presence_penalty": 0.5})


async def texts(pool, params: SamplingParams, prompts: list[str] = PROMPTS) -> list[str]:
    jobs = [submit(pool, prompt=p, params=params) for p in prompts]
    return [text for text, _ in await asyncio.gather(*(job.text() for job in jobs))]


async def test_greedy_tokens_are_the_same_in_the_graph_and_on_the_host(make_pool) -> None:
    """Deterministic prefill: batched prefill makes logits depend on how the prompts of one
    step fell into ubatches, which depends on when each arrived; this compares samplers."""
    host = await make_pool(parallel=4, backend_sampling=False, deterministic=True, engine_id="host")
    on_host = await texts(host, GREEDY)
    await host.close()
    graph = await make_pool(
        parallel=4, backend_sampling=True, deterministic=True, engine_id="graph"
    )
    assert graph.engine is not None and graph.engine.options.backend_sampling
    assert await texts(graph, GREEDY) == on_host


async def one_by_one(pool, params: SamplingParams) -> list[str]:
    return [(await submit(pool, prompt=p, params=params).text())[0] for p in PROMPTS]


@pytest.mark.parametrize("backend", [False, True], ids=["host", "graph"])
async def test_a_fixed_seed_gives_the_same_text_run_after_run(make_pool, backend: bool) -> None:
    pool = await make_pool(parallel=2, backend_sampling=backend)
    first = await one_by_one(pool, SEEDED)
    second = await one_by_one(pool, SEEDED)  # in the graph: one installed chain, reset each time
    assert first == second
    assert await one_by_one(pool, SEEDED.model_copy(update={"seed": 7})) != first


@pytest.mark.parametrize("backend", [False, True], ids=["host", "graph"])
async def test_deterministic_mode_keeps_seeded_jobs_reproducible_under_load(
    make_pool, backend: bool
) -> None:
    """Without --deterministic a sampled job's text may depend on what it was batched with (as
    in every batching server); with it, concurrent seeded jobs repeat exactly."""
    pool = await make_pool(parallel=2, backend_sampling=backend, deterministic=True)
    assert await texts(pool, SEEDED) == await texts(pool, SEEDED)


@pytest.mark.parametrize("backend", [False, True], ids=["host", "graph"])
async def test_penalties_and_mixed_chains_share_a_step(make_pool, backend: bool) -> None:
    """Greedy, seeded and penalised jobs decode side by side; the penalised one is still
    reproducible, and a job without a seed after them on the same slot is fine."""
    pool = await make_pool(parallel=3, backend_sampling=backend, deterministic=True)
    kinds = [GREEDY, SEEDED, PENALISED]
    runs = []
    for _ in range(2):
        jobs = [submit(pool, prompt=PROMPTS[1], params=p) for p in kinds]
        runs.append([text for text, _ in await asyncio.gather(*(j.text() for j in jobs))])
    assert runs[0] == runs[1]
    unseeded = SEEDED.model_copy(update={"seed": None})
    text, end = await submit(pool, prompt=PROMPTS[2], params=unseeded).text()
    assert end.finish_reason in ("stop", "length") and text


@pytest.mark.parametrize("row_way", ROW_WAYS, indirect=True)
def test_the_host_samplers_draw_what_the_full_chain_draws(model_path, row_way: str) -> None:
    """StepSampler's fast paths (one argmax for greedy rows, a top-k prefilter for sampled ones)
    against each chain sampling the whole vocabulary, on one real decode step, with the rows'
    kinds interleaved so that runs break."""
    model = LlamaModel(str(model_path), 0, 0)
    ctx = LlamaContext(model, 64, 8, 64, 2)
    batch = Batch(64)
    for seq, prompt in enumerate(PROMPTS * 2):
        tokens = model.tokenize(prompt, add_bos=True, parse_special=False)
        for pos, token in enumerate(tokens):
            batch.add(token, pos, seq, pos == len(tokens) - 1)
    assert ctx.decode(batch) == 0
    rows = [i for i in range(batch.n) if batch.logits[i]]
    typical = SEEDED.model_copy(update={"typical_p": 0.5})  # still on the top-k prefilter
    biased = GREEDY.model_copy(update={"logit_bias": ((1000, 4.0), (107, -100.0))})
    # penalties that only push tokens down take the prefilter (wider by repeat_last_n), one
    # that lifts them (a negative presence penalty) the whole vocabulary
    greedy_penalised = GREEDY.model_copy(update={"repeat_penalty": 1.3, "frequency_penalty": 0.4})
    lifted = SEEDED.model_copy(update={"presence_penalty": -0.5})
    kinds = [GREEDY, SEEDED, PENALISED, typical, biased, SEEDED.model_copy(update={"top_k": 5})]
    kinds = [*kinds, greedy_penalised, lifted] * 2
    params = [kinds[i].model_copy(update={"seed": 100 + i}) for i in range(len(rows))]
    expected = [
        SamplerChain(p, model.n_vocab).sample(ctx.ptr, r) for p, r in zip(params, rows, strict=True)
    ]
    sampler = StepSampler(model.n_vocab, threads=2)
    for ranks in (None, list(range(len(rows)))):  # logits found by asking, or by arithmetic
        chains = [SamplerChain(p, model.n_vocab) for p in params]
        assert sampler.sample(ctx.ptr, list(zip(rows, chains, strict=True)), ranks) == expected
    sampler.close()
    ctx.free()
    model.free()


@pytest.mark.parametrize("row_way", ROW_WAYS, indirect=True)
@pytest.mark.parametrize(
    "params",
    [SEEDED, PENALISED, GREEDY.model_copy(update={"repeat_penalty": 1.5})],
    ids=["seeded", "penalised", "greedy-penalised"],
)
def test_one_streams_row_draws_what_the_full_chain_draws_step_after_step(
    model_path, row_way: str, params: SamplingParams
) -> None:
    """One row alone takes its own path (its top-k candidates and the chain over them in one C
    call, or a view of its logits kept by address and calls that keep the GIL): the same
    draws as the chain over the whole vocabulary, decode after decode on one sequence, the
    view read anew each time."""
    model = LlamaModel(str(model_path), 0, 0)
    ctx = LlamaContext(model, 64, 1, 64, 2)
    batch = Batch(64)
    tokens = model.tokenize(PROMPTS[0], add_bos=True, parse_special=False)
    batch.fill(tokens, list(range(len(tokens))), [0] * len(tokens), [0] * (len(tokens) - 1) + [1])
    sampler = StepSampler(model.n_vocab, threads=1)
    fast, full = SamplerChain(params, model.n_vocab), SamplerChain(params, model.n_vocab)
    for chain in (fast, full):  # the penalties' history: the prompt, then every draw
        chain.accept_prompt(tokens)
    assert sampler._kind(fast) == "top_k"  # (penalties that push down keep the prefilter)
    drawn = []
    for pos in range(len(tokens), len(tokens) + 12):
        assert ctx.decode(batch) == 0
        row = batch.n - 1
        expected = full.sample(ctx.ptr, row)
        assert sampler.sample(ctx.ptr, [(row, fast)]) == [expected]
        drawn.append(expected)
        batch.fill([expected], [pos], [0], [1])
    assert len(set(drawn)) > 1  # (a draw or a penalty, not one token over and over)
    sampler.close()
    ctx.free()
    model.free()


def test_a_chain_installed_in_the_graph_samples_there(model_path) -> None:
    """Only token ids come back: the chain's row has no host-side logits to read."""
    model = LlamaModel(str(model_path), 0, 0)
    ctx = LlamaContext(model, 64, 2, 64, 2)
    chain = SamplerChain(GREEDY, model.n_vocab)
    assert ctx.set_sampler(0, chain) and chain.on_backend
    batch = Batch(64)
    tokens = model.tokenize(PROMPTS[0], add_bos=True, parse_special=False)
    for pos, token in enumerate(tokens):
        batch.add(token, pos, 0, pos == len(tokens) - 1)
    assert ctx.decode(batch) == 0
    sampled = llama.llama_get_sampled_token_ith(ctx.ptr, batch.n - 1)
    assert sampled >= 0
    assert StepSampler(model.n_vocab, 1).sample(ctx.ptr, [(batch.n - 1, chain)]) == [sampled]
    ctx.set_sampler(0, None)
    chain.free()
    ctx.free()
    model.free()


@pytest.mark.parametrize("backend", [False, True], ids=["host", "graph"])
async def test_making_text_during_the_next_decode_changes_nothing(make_pool, backend: bool) -> None:
    """The GPU overlap (text of step k made while step k+1 decodes), forced on the CPU: the
    same texts, stop strings included, though a stop string is seen one step late."""
    plain = await make_pool(parallel=4, deterministic=True, overlap=False, engine_id="plain")
    expected = await texts(plain, GREEDY)
    stop = expected[1].split()[3]
    with_stop = GREEDY.model_copy(update={"stop": (stop,)})
    expected_stopped = await texts(plain, with_stop)
    await plain.close()
    pool = await make_pool(parallel=4, deterministic=True, overlap=True, backend_sampling=backend)
    assert await texts(pool, GREEDY) == expected
    assert await texts(pool, with_stop) == expected_stopped
    assert pool.metrics_snapshot().completed == 2 * len(PROMPTS)


@pytest.mark.parametrize("backend", [False, True], ids=["host", "graph"])
async def test_a_job_ended_while_prompt_bodies_decode_is_not_decoded_again(
    make_pool, backend: bool
) -> None:
    """Overlap mode, as on a GPU, with prompts whose last tokens are decoded apart from their
    bodies (step_plan.last_tokens_apart): the text made during the bodies' decode can end a
    job (a stop string, or a cancel landing then). The step's second decode took the slots
    from before it: the ended job was decoded again, and a filler put on its freed sequence
    gave that sequence two tokens, so llama_decode failed every job of the step (on a GPU
    with host sampling, one output too many aborts the process)."""
    pool = await make_pool(parallel=8, overlap=True, backend_sampling=backend)
    step = pool.engine._loop._stepper  # the mechanism under test: when the cancel lands
    long = SamplingParams(temperature=0, max_tokens=160, ignore_eos=True)
    first, ended, third = (submit(pool, prompt=p, params=long) for p in PROMPTS[:3])
    async for event in first.events():  # all three decode (sequences 0, 1, 2)
        if isinstance(event, TokenText) and event.n_tokens >= 4:
            break
    landing = {"armed": True, "in_bodies": False}
    make_text, bodies = step._make_text, step._prefill_bodies

    def prefill_bodies(decoding, chunks, events):  # it decodes only when it splits the step
        landing["in_bodies"] = True
        try:
            return bodies(decoding, chunks, events)
        finally:
            landing["in_bodies"] = False

    def cancel_lands_during_the_bodies(events) -> None:
        if landing["armed"] and landing["in_bodies"]:
            landing["armed"] = False
            ended.request.cancelled = True  # as Job.cancel sets it, from the event loop
        make_text(events)

    step._prefill_bodies = prefill_bodies
    step._make_text = cancel_lands_during_the_bodies
    short = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    newcomers = [  # prompts of unequal length ending in one step: bodies apart (sequences 3, 4)
        submit(pool, prompt=PROMPTS[3], params=short),
        submit(pool, prompt=" ".join(PROMPTS * 3), params=short),
    ]
    for job in newcomers:
        _, end = await job.text()
        assert end.error is None and end.timings.tokens_out == 8
    assert not landing["armed"], "the bodies were decoded apart, with text made meanwhile"
    await ended.wait_released()
    assert ended.result is not None and ended.result.finish_reason == "abort"
    first.cancel()
    _, end = await third.text()
    assert end.error is None and end.timings.tokens_out == 160


async def test_chains_left_idle_in_the_graph_are_taken_out_and_new_ones_put_in(make_pool) -> None:
    """A slot's chain outlives its job for reuse; after IDLE_STEPS steps without one it
    is removed from the graph, and a later job installs a fresh chain. Each install and
    removal re-plans the graph: the texts must not change, nor the process abort. They are
    compared with a fresh pool's, deterministic and sampling in the graph as this one: the
    same prefill and sampler, so that only the chains' comings and goings differ."""
    reference = await make_pool(
        parallel=2, backend_sampling=True, deterministic=True, engine_id="reference"
    )
    want = (await submit(reference, prompt=PROMPTS[0], params=GREEDY).text())[0]
    await reference.close()
    pool = await make_pool(parallel=2, backend_sampling=True, deterministic=True)
    long = SEEDED.model_copy(update={"max_tokens": 100, "ignore_eos": True})
    short_job = submit(pool, prompt=PROMPTS[0], params=GREEDY)  # slot 0, done quickly
    long_job = submit(pool, prompt=PROMPTS[1], params=long)  # slot 1, 100 steps more
    assert (await short_job.text())[0] == want
    assert (await long_job.text())[1].timings.tokens_out == 100
    graph = pool.engine._loop._seqs.graph  # the mechanism under test
    assert graph.installed(0) is None, "slot 0's chain sat idle and was taken out"
    assert graph.installed(1) is not None, "slot 1's is fresh, kept for the next job"
    assert (await submit(pool, prompt=PROMPTS[0], params=GREEDY).text())[0] == want


@pytest.mark.parametrize("backend", [False, True], ids=["host", "graph"])
async def test_a_json_schema_job_shares_steps_with_free_ones(make_pool, backend: bool) -> None:
    """Issue 14 §1: a schema job samples on the host under its grammar, also beside jobs that
    sample in the graph (its slot's installed chain comes out); its JSON validates, a fixed
    seed repeats it, and the free jobs beside it are unchanged."""
    import json

    import jsonschema

    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}, "rank": {"type": "integer"}},
        "required": ["city", "rank"],
        "additionalProperties": False,
    }
    shaped = SEEDED.model_copy(update={"json_schema": json.dumps(schema), "max_tokens": 64})
    pool = await make_pool(parallel=3, backend_sampling=backend, deterministic=True)
    free_alone = await texts(pool, GREEDY, PROMPTS[:2])
    runs = []
    for _ in range(2):
        jobs = [submit(pool, prompt=PROMPTS[0], params=shaped)] + [
            submit(pool, prompt=p, params=GREEDY) for p in PROMPTS[:2]
        ]
        runs.append([text for text, _ in await asyncio.gather(*(j.text() for j in jobs))])
    assert runs[0] == runs[1]
    jsonschema.validate(json.loads(runs[0][0]), schema)
    assert runs[0][1:] == free_alone


@pytest.mark.parametrize("params", [GREEDY, SEEDED], ids=["greedy", "seeded"])
async def test_a_grammar_picks_the_same_from_the_best_tokens_as_from_all(
    make_pool, monkeypatch, params: SamplingParams
) -> None:
    """The grammar's picks look at the best 1,024 tokens only where a chain keeps at most
    k of them; that must give the very tokens the whole vocabulary gives."""
    import json

    from infertui.core.engine.llama import sampler

    schema = {"type": "object", "properties": {"story": {"type": "string"}}, "required": ["story"]}
    shaped = params.model_copy(update={"json_schema": json.dumps(schema), "max_tokens": 40})
    pool = await make_pool(parallel=1, deterministic=True)
    narrow = (await submit(pool, prompt=PROMPTS[1], params=shaped).text())[0]
    monkeypatch.setattr(sampler, "_NARROW", 10**9)  # every pick over the whole vocabulary
    whole = (await submit(pool, prompt=PROMPTS[1], params=shaped).text())[0]
    assert narrow == whole and narrow.startswith("{")


@pytest.mark.parametrize("backend", [False, True], ids=["host", "graph"])
async def test_llama_servers_other_knobs_shape_the_draw(
    make_pool, cut_model_path: Path, backend: bool
) -> None:
    """typical_p, Mirostat and logit_bias, as llama-server, Ollama and OpenAI take them, each
    seen in what it does to the text, in the graph (where a chain starts there) and on the
    host. Each claim compares one pool's own draws, so the cut model (cut_model_path) does:
    28 replies of 24 tokens, a quarter of the suite's sampling time on the whole one."""
    pool = await make_pool(parallel=2, backend_sampling=backend, path=cut_model_path)
    greedy = await one_by_one(pool, GREEDY)
    # typical_p this small keeps one token a step: the seed no longer matters
    typical = [SEEDED.model_copy(update={"typical_p": 1e-6, "seed": s}) for s in (1, 2)]
    assert await one_by_one(pool, typical[0]) == await one_by_one(pool, typical[1])
    # Mirostat 2 with a target surprise of 0 keeps only the likeliest token: greedy text
    sure = SEEDED.model_copy(update={"mirostat": 2, "mirostat_tau": 0.0})
    assert await one_by_one(pool, sure) == greedy
    # Mirostat 1 learns from each draw; a fixed seed still repeats it
    v1 = SEEDED.model_copy(update={"mirostat": 1, "mirostat_tau": 3.0})
    assert await one_by_one(pool, v1) == await one_by_one(pool, v1)
    # a bias of +100 makes a token the only greedy pick; -100 takes the greedy one away
    model = pool.engine.model
    banana = model.tokenize(" banana", add_bos=False, parse_special=False)[0]
    forced = GREEDY.model_copy(update={"logit_bias": ((banana, 100.0),), "max_tokens": 3})
    text, _ = await submit(pool, prompt=PROMPTS[0], params=forced).text()
    assert text == model.detokenize([banana] * 3)
    first = model.tokenize(greedy[0], add_bos=False, parse_special=False)[0]
    banned = GREEDY.model_copy(update={"logit_bias": ((first, -100.0),)})
    text, _ = await submit(pool, prompt=PROMPTS[0], params=banned).text()
    assert text and text != greedy[0]


async def test_a_bias_on_a_token_outside_the_vocabulary_is_refused_by_name(make_pool) -> None:
    from infertui.core.protocol.errors import ErrorKind

    pool = await make_pool(parallel=1)
    n_vocab = pool.engine.model.n_vocab
    outside = GREEDY.model_copy(update={"logit_bias": ((n_vocab, 5.0),)})
    _, end = await submit(pool, prompt=PROMPTS[0], params=outside).text()
    assert end.finish_reason == "error" and end.error is not None
    assert end.error.kind is ErrorKind.INVALID_PARAMS and end.error.param == "logit_bias"
    assert str(n_vocab) in end.error.message
    assert (await submit(pool, prompt=PROMPTS[0], params=GREEDY).text())[0]  # still serving


def test_recommended_sampling_reads_the_ggufs_keys_under_the_specs_choices() -> None:
    """Issue 34 §2: a GGUF's `general.sampling.*` keys are its recommendation; the spec's own
    choices (the bundled model's card) win over them; a key that is no number is passed over."""
    keys = {
        "general.sampling.temp": "0.6",
        "general.sampling.top_k": "20",
        "general.sampling.penalty_repeat": "not a number",
    }
    assert recommended.from_gguf(keys.get) == {"temperature": 0.6, "top_k": 20}
    chosen = recommended.recommended(keys.get, {"temperature": 0.2})
    assert chosen == {"temperature": 0.2, "top_k": 20}
    # out of SamplingParams' range: passed over at load, rather than failing every job
    assert recommended.recommended({"general.sampling.temp": "7"}.get, {}) == {}


def test_a_requests_own_fields_stay_and_only_unset_ones_take_the_models() -> None:
    """Issue 34 §2: defaults fill what the request left out, even where the request set a
    field to llama.cpp's default value."""
    asked = SamplingParams.model_validate({"temperature": 0.8, "max_tokens": 5})
    filled = asked.with_defaults({"temperature": 0.2, "top_p": 0.9})
    assert (filled.temperature, filled.top_p, filled.max_tokens) == (0.8, 0.9, 5)
    assert asked.with_defaults({}) is asked


async def test_the_bundled_model_samples_as_its_card_recommends(make_pool) -> None:
    """Issue 34 §2: a job on the bundled model that names no sampling gets the model's own
    (temperature 0.2, top-p 0.9, repeat penalty 1.1); a job that names them keeps its own."""
    pool = await make_pool(parallel=1, sampling=BUNDLED_SAMPLING)
    plain = submit(pool, prompt="Hi", params=SamplingParams.model_validate({"max_tokens": 2}))
    own = submit(pool, prompt="Hi", params=SamplingParams(temperature=0.0, max_tokens=2))
    assert dict(BUNDLED_SAMPLING) == {
        name: getattr(plain.request.params, name) for name, _ in BUNDLED_SAMPLING
    }
    assert own.request.params.temperature == 0.0
    assert own.request.params.repeat_penalty == 1.1  # left unset: the model's
    for job in (plain, own):
        assert [e async for e in job.events()]


@pytest.mark.parametrize("n_vocab", [8192, 32000, 49152, 128256])
def test_the_top_k_prefilter_keeps_every_token_top_k_can_pick(n_vocab: int) -> None:
    """Both prefilters (one row alone, many rows in one pass) return, for every k the fast path
    takes, in ascending order, every token above the k-th highest logit and enough at it to
    make k (which of tied tokens top-k keeps is the sort's choice, as on the full vocabulary);
    the vocabulary's tail past the last whole group is held to the same floor."""
    rng = np.random.default_rng(n_vocab)
    block = rng.standard_normal((6, n_vocab)).astype(np.float32)
    block[0, -3:] = 50.0  # the best tokens in the tail
    block[1, :] = np.round(block[1, :])  # ties everywhere
    sampler = StepSampler(n_vocab, threads=1)
    for top_k in (1, 2, 40, 63, 256):
        chain = SamplerChain(SEEDED.model_copy(update={"top_k": top_k}), n_vocab)
        if sampler._kind(chain) != "top_k":
            assert top_k >= n_vocab // 128  # too large for groups: the native chain
            continue
        candidates, bounds = _top_k_candidates(block, top_k)
        for r, row in enumerate(block):
            kth = np.sort(row)[-top_k]
            above = np.flatnonzero(row > kth)
            for ids in (candidates["id"][bounds[r] : bounds[r + 1]],
                        _row_candidates(row, top_k)["id"]):  # fmt: skip
                assert np.all(np.diff(ids) > 0)
                assert set(above.tolist()) <= set(ids.tolist())
                assert np.count_nonzero(row[ids] >= kth) >= top_k
        chain.free()
    sampler.close()


@pytest.mark.skipif(FAST_ROWS is None, reason="fast_rows.c is not built here")
@pytest.mark.parametrize("n_vocab", [8192, 32000, 32001, 49152, 128256, 262144])
def test_the_compiled_prefilter_picks_numpys_candidates(n_vocab: int) -> None:
    """fast_rows.c's candidates are `_row_candidates`' own, in the same order: the chain then
    draws the same token from either (values compared, none computed: exact on any CPU)."""
    assert FAST_ROWS is not None
    rng = np.random.default_rng(n_vocab)
    for t in range(40):
        row = (rng.standard_normal(n_vocab) * rng.uniform(0.1, 5.0)).astype(np.float32)
        if t % 4 == 0:
            row[rng.integers(0, n_vocab, 100)] = row.max()  # ties at the top
        if t % 5 == 0:
            row[: n_vocab // 2] = -np.inf  # half the vocabulary banned
        if t % 6 == 0:
            row[-3:] = 50.0  # the best tokens in the tail past the last whole group
        if t == 39:
            row[:] = 1.0  # every token ties: every one is a candidate
        for top_k in (1, 40, 63):
            ours, numpys = FAST_ROWS.candidates(row, top_k), _row_candidates(row, top_k)
            assert np.array_equal(ours["id"], numpys["id"])
            assert np.array_equal(ours["logit"], numpys["logit"])
