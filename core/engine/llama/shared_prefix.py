"""Prompts that begin alike: a job copies the cells of a running sequence whose prompt starts
as its own does, instead of decoding that part again.

The `n` choices of one request share their whole prompt; a team's chats with one system
prompt, or an agent's calls with one list of tools, share a long head. A copy (a KV stream
copy in llama.cpp, then a trim) costs a memory copy where decoding costs a pass over the
model per token.

The recipient keeps at least its last prompt token to decode itself, so that it has a logits
row of its own. A source still reading its prompt is waited for until its cells hold the
shared head. `window_intact` (prompt_cache.py) decides whether a source's cells still hold all
that the recipient's first token attends to.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .prompt_cache import MIN_REUSE, window_intact
from .slot import Slot


def common_prefix(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    """How many leading tokens `a` and `b` share, at most `limit`."""
    n = min(len(a), len(b), limit)
    if list(a[:n]) == list(b[:n]):  # one comparison in C for the common case, a whole match
        return n
    k = 0
    while a[k] == b[k]:
        k += 1
    return k


def best_source(
    prompt: Sequence[int], slots: Iterable[Slot | None], have: int, n_swa: int
) -> tuple[Slot, int] | None:
    """The running slot whose prompt shares the longest head with `prompt`, and the length to
    copy: more than the `have` tokens the job holds already, all of `prompt` but its last token
    at most, and MIN_REUSE at least unless that is all of it but its last token."""
    want = len(prompt) - 1
    head = list(prompt[: min(MIN_REUSE, want)])  # fewer shared than this rules a slot out
    best: tuple[Slot, int] | None = None
    for slot in slots:
        if slot is None or slot.copies_from is not None:
            continue  # a slot waiting for a source has no cells to give yet
        theirs = slot.request.prompt_tokens
        if list(theirs[: len(head)]) != head:  # most slots: one comparison in C
            continue
        n = common_prefix(theirs, prompt, want)
        if n <= have or (n < MIN_REUSE and n < want) or (best is not None and n <= best[1]):
            continue
        if slot.prompt_pos >= n and not window_intact(n_swa, slot.n_past - 1, n):
            continue  # its sliding-window cells have moved past the head
        best = (slot, n)
    return best
