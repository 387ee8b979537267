"""Flash attention: llama.cpp's own choice unless `--flash-attn on|off` says otherwise, for the
engine and its draft model alike. Off, the CPU decodes long contexts faster
(bench/flash_attention.py) and reads prompts in graphs of 256 tokens; on, a row's numbers do
not depend on the graph it is in (bench/batch_invariance.py), which speculative decoding's
same greedy text needs."""

from __future__ import annotations

import pytest

from infertui.app.cli import build_parser
from infertui.app.flags import engine_flags
from infertui.core.config import HostSettings
from infertui.core.engine.llama.engine import flash_attention
from infertui.core.engine.llama.native import PLAIN_UBATCH
from infertui.core.host.specs import engine_spec
from infertui.core.protocol.common import SamplingParams

from ..jobs import submit

LLAMA_AUTO, OFF, ON = -1, 0, 1  # llama.cpp's flash_attn_type


def test_llamas_choice_stands_unless_asked() -> None:
    assert flash_attention(None) == LLAMA_AUTO
    assert flash_attention(True) == ON
    assert flash_attention(False) == OFF


@pytest.mark.parametrize(("value", "asked"), [("auto", None), ("on", True), ("off", False)])
def test_the_flag_reaches_the_engines_spec(value: str, asked: bool | None) -> None:
    assert "--flash-attn" in {flag.names[0] for flag in engine_flags()}
    args = build_parser().parse_args(["host", "--flash-attn", value])
    assert args.flash_attn == value
    settings = HostSettings.model_validate({"engine": {"flash_attn": value}})
    assert engine_spec("x", "/models/x.gguf", settings).flash_attn is asked


@pytest.mark.model
@pytest.mark.parametrize(
    ("asked", "runs"), [(None, LLAMA_AUTO), (False, OFF)], ids=["default", "off"]
)
async def test_an_engine_on_the_cpu_decodes_with_the_attention_asked(
    make_pool, asked: bool | None, runs: int
) -> None:
    pool = await make_pool(parallel=1, flash_attn=asked, n_gpu_layers=0, batch=512)
    ctx = pool.ready_engine()._ctx
    assert ctx.flash_attn == runs
    # without it, a prompt is read in graphs of PLAIN_UBATCH tokens, where it reads faster
    assert ctx.n_ubatch == (PLAIN_UBATCH if runs == OFF else 512)
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    text, end = await submit(pool, prompt="The history of tea", params=params).text()
    assert end.timings.tokens_out == 12 and text
