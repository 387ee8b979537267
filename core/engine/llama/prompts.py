"""ModelTokenizer: how a local model reads prompts (the Tokenizer an engine offers): a chat
through its template, a plain prompt, and text both ways as /tokenize shows it. It reads only
the model's vocabulary, so any thread may call it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...protocol.common import ChatMessage
from ...protocol.errors import ErrorKind, InferError
from .. import chat_format
from ..chat_format import ChatFormat
from .native import LlamaModel


class ModelTokenizer:
    def __init__(self, model: LlamaModel, chat: ChatFormat) -> None:
        self.model = model
        self.chat = chat
        self.stop_tokens = chat_format.turn_stop_tokens(model)

    def chat_prompt(
        self, messages: Sequence[ChatMessage], tools: Sequence[dict[str, Any]] | None = None
    ) -> list[int]:
        return self._prompt(chat_format.render(self.model, self.chat, messages, tools))

    def text_prompt(self, prompt: str) -> list[int]:
        """A plain completion prompt, no template. Control tokens written out in it are read
        as such, as llama-server, llama-cpp-python and Ollama's raw mode read them: a prompt
        in the model's own turn format is what its template would have made."""
        return self._prompt(prompt)

    def _prompt(self, text: str) -> list[int]:
        """Text as prompt tokens, control tokens read, with the model's BOS unless the text
        begins with it already (a template that writes it out, a hand-made prompt)."""
        add_bos = self.model.add_bos and not text.startswith(self.model.token_text(self.model.bos))
        return self.model.tokenize(text, add_bos=add_bos, parse_special=True)

    def tokenize(self, text: str, *, add_special: bool) -> list[int]:
        """Control tokens written out (`<start_of_turn>`) are read as such, as llama-server's
        /tokenize does; `add_special` adds the model's BOS where it has one."""
        return self.model.tokenize(
            text, add_bos=add_special and self.model.add_bos, parse_special=True
        )

    def detokenize(self, tokens: Sequence[int]) -> str:
        n_vocab = self.model.n_vocab
        if bad := [t for t in tokens if not 0 <= t < n_vocab]:
            raise InferError(
                ErrorKind.INVALID_PARAMS,
                f"token {bad[0]} is not in the model's vocabulary (0 to {n_vocab - 1})",
                param="tokens",
            )
        return self.model.detokenize(tokens)
