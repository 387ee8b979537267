"""`[host.engine]`: how each engine is loaded unless a request says otherwise."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field


class EngineDefaults(BaseModel):
    """How each engine is loaded unless a request says otherwise."""

    ctx: int = Field(
        4096, ge=128, description="context tokens per slot, the prompt and the output together"
    )
    gpu_layers: int | None = Field(
        None,
        description="layers offloaded to the GPU; unset: all when the build supports a GPU, else 0",
    )
    main_gpu: int | None = Field(
        None,
        ge=0,
        description="the one GPU that holds the model; unset: spread over all, as llama.cpp does",
    )
    threads: int | None = Field(
        None, ge=1, description="decode threads; unset: one per CPU, up to 8"
    )
    parallel: Annotated[int, Field(ge=1)] | Literal["auto"] = Field(
        4,
        description="slots: jobs decoded together; auto: as many as free (device) memory holds, "
        "within llama.cpp's 256 sequences",
    )
    batch: int = Field(
        512, ge=16, description="prompt tokens per decode step: how long a prefill may hold streams"
    )
    deterministic: bool = Field(
        False,
        description="prefill each prompt alone, so that batching never changes a job's output; "
        "off: prompts are prefilled in the same decode as running streams (faster under load)",
    )
    speculative: bool = Field(
        True,
        description="speculative decoding: each stream guesses tokens ahead from its own text "
        "(prompt lookup) and keeps those the model picks, as many as pay at the batch's size; "
        "the output is the same either way",
    )
    draft: str | None = Field(
        None,
        description="a small GGUF with the model's vocabulary that guesses ahead for "
        "speculative decoding, in place of prompt lookup (llama-server's --model-draft)",
    )
    backend_sampling: Literal["auto", "on", "off"] = Field(
        "auto",
        description="sample inside the graph, on the device; auto: when every layer is on a GPU",
    )
    flash_attn: Literal["auto", "on", "off"] = Field(
        "auto",
        description="flash attention; auto: llama.cpp's choice (on where the device has it); "
        "off decodes long contexts faster on the CPU (1.4x at 512 tokens), but greedy text "
        "with speculative guesses or a reused prompt may then part from the plain text at "
        "near ties",
    )
    extra_buffers: bool = Field(
        False,
        description="repacked CPU weight buffers (AMX etc.); off by default: they crash some "
        "sandboxes",
    )
    chat_template: str | None = Field(
        None,
        description="a Jinja chat template (as in a GGUF or a Hugging Face tokenizer_config) "
        "in place of the model's own; it also decides the tool-call format",
    )
    pooling: Literal["auto", "mean", "cls", "last"] = Field(
        "auto", description="how /v1/embeddings pools token vectors; auto: the GGUF's, else mean"
    )
