"""A draft model for speculative decoding (`--draft FILE`, llama-server's `--model-draft`): a
small model with the target's vocabulary guesses each stream's next tokens greedily; the
target keeps those it picks itself (step.py `_check_guesses`, the same check as prompt
lookup's guesses).

The draft's context has one sequence per slot, as the target's. A sequence's cells follow its
stream: before guessing, the cells that no longer match the stream's text (guesses the target
dropped, or a finished job's text where the next job's differs) are cut off and the tokens it
has not read are decoded (the prompt too, at the stream's first guess, but for the head it
shares with the last job there); then one decode per guessed token, all streams together.
"""

from __future__ import annotations

from collections.abc import Sequence

import llama_cpp as llama

from ...protocol.errors import ErrorKind, InferError
from .native import Batch, LlamaContext, LlamaModel, address_of, floats_at

_SAME_TEXT_CHECKED = 256  # tokens whose text must match the target's (beyond the specials)


class DraftModel:
    """The draft's model and context, on the batch loop's thread."""

    def __init__(
        self, path: str, target: LlamaModel, ctx: LlamaContext, n_batch: int, n_gpu_layers: int
    ) -> None:
        self.model = LlamaModel(path, n_gpu_layers, None)
        try:
            _check_vocabulary(self.model, target)
            threads = int(llama.llama_n_threads(ctx.ptr))
            self.ctx = LlamaContext(
                self.model, ctx.n_ctx_seq, ctx.n_seq, n_batch, threads, ctx.flash_attn
            )
        except BaseException:
            self.model.free()
            raise
        self._batch = Batch(n_batch + ctx.n_seq)
        self._n_batch = n_batch
        self._cells: list[list[int]] = [[] for _ in range(ctx.n_seq)]  # what each holds

    def guess(self, streams: Sequence[tuple[int, Sequence[int], int]]) -> list[list[int]]:
        """For each (sequence, the stream's text, how many), the draft's greedy guesses."""
        texts = {seq: text for seq, text, _ in streams}
        for seq, text, _ in streams:
            self._follow(seq, text)
        self._catch_up(texts)
        wanted = {seq: n for seq, _, n in streams if n > 0}
        guesses: dict[int, list[int]] = {seq: [] for seq in wanted}
        feeding = {seq: texts[seq][-1] for seq in wanted}  # the stream's last, unread token
        while feeding:
            order = sorted(feeding)
            picks = self._decode_one(order, [feeding[s] for s in order])
            feeding = {}
            for seq, token in zip(order, picks, strict=True):
                guesses[seq].append(token)
                if len(guesses[seq]) < wanted[seq]:
                    feeding[seq] = token
        return [guesses.get(seq, []) for seq, _, _ in streams]

    def free(self) -> None:
        self._batch.free()
        self.ctx.free()
        self.model.free()

    def _follow(self, seq: int, text: Sequence[int]) -> None:
        """Cut the sequence's cells back to where they still match the text (but its last
        token, which the next decode reads)."""
        cells = self._cells[seq]
        same = 0
        for held, token in zip(cells, text[:-1], strict=False):
            if held != token:
                break
            same += 1
        if same < len(cells):
            if not self.ctx.trim_sequence(seq, same):
                same = 0
            del cells[same:]

    def _catch_up(self, texts: dict[int, Sequence[int]]) -> None:
        """Decode every token the draft has not read but each stream's last, in decodes of
        at most n_batch tokens, no logits."""
        pending = {seq: list(text[len(self._cells[seq]) : -1]) for seq, text in texts.items()}
        while any(pending.values()):
            tokens: list[int] = []
            positions: list[int] = []
            seqs: list[int] = []
            room = self._n_batch
            for seq in sorted(pending):
                take = pending[seq][:room]
                if not take:
                    continue
                start = len(self._cells[seq])
                tokens.extend(take)
                positions.extend(range(start, start + len(take)))
                seqs.extend([seq] * len(take))
                self._cells[seq].extend(take)
                del pending[seq][: len(take)]
                room -= len(take)
                if room <= 0:
                    break
            self._batch.fill(tokens, positions, seqs, [0] * len(tokens))
            self._check(self.ctx.decode(self._batch))

    def _decode_one(self, seqs: list[int], tokens: list[int]) -> list[int]:
        """One token for each sequence, and the draft's greedy pick after it."""
        positions = [len(self._cells[seq]) for seq in seqs]
        self._batch.fill(tokens, positions, seqs, [1] * len(seqs))
        self._check(self.ctx.decode(self._batch))
        for seq, token in zip(seqs, tokens, strict=True):
            self._cells[seq].append(token)
        n_vocab = self.model.n_vocab  # every token has a row, in batch order: one block
        rows = floats_at(address_of(llama.llama_get_logits(self.ctx.ptr)), len(seqs) * n_vocab)
        return [int(t) for t in rows.reshape(len(seqs), n_vocab).argmax(axis=1)]

    def _check(self, rc: int) -> None:
        if rc != 0:
            raise InferError(ErrorKind.GENERATION_FAILED, f"the draft's decode failed ({rc})")


def _check_vocabulary(draft: LlamaModel, target: LlamaModel) -> None:
    """The draft must speak the target's tokens: the same vocabulary size, specials and text
    (llama-server checks the same before it drafts)."""
    same = (
        draft.n_vocab == target.n_vocab
        and draft.bos == target.bos
        and draft.eos == target.eos
        and all(
            draft.piece(t) == target.piece(t)
            for t in range(0, draft.n_vocab, max(1, draft.n_vocab // _SAME_TEXT_CHECKED))
        )
    )
    if not same:
        raise InferError(
            ErrorKind.INVALID_PARAMS,
            f"the draft model {draft.path} does not share the model's vocabulary "
            f"({draft.n_vocab} tokens against {target.n_vocab})",
            param="draft",
        )
