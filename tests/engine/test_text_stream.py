"""Incremental detokenization: split UTF-8 is held whole; stop strings never leak."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from infertui.core.engine.llama.text import StopMatcher, Utf8Stream


def test_a_character_split_across_tokens_is_never_emitted_broken() -> None:
    stream = Utf8Stream()
    emoji = "🍕".encode()
    assert stream.feed(emoji[:1]) == ""
    assert stream.feed(emoji[1:3]) == ""
    assert stream.feed(emoji[3:] + "日".encode()[:2]) == "🍕"
    assert stream.feed("日".encode()[2:]) == "日"
    assert stream.flush() == ""


@given(st.text(), st.lists(st.integers(min_value=1, max_value=5), max_size=50))
def test_any_split_of_valid_utf8_round_trips(text: str, cuts: list[int]) -> None:
    data, stream, out, pos = text.encode(), Utf8Stream(), [], 0
    for cut in cuts:
        out.append(stream.feed(data[pos : pos + cut]))
        pos += cut
    out.append(stream.feed(data[pos:]))
    out.append(stream.flush())
    assert "".join(out) == text
    assert all("\ufffd" not in part for part in out if "\ufffd" not in text)


def test_stop_string_is_cut_and_its_prefix_held_back() -> None:
    matcher = StopMatcher(["</answer>"])
    assert matcher.feed("The result is 4") == ("The result is 4", False)
    assert matcher.feed(" </ans") == (" ", False)
    assert matcher.feed("wer> trailing") == ("", True)


def test_a_held_prefix_that_turns_out_harmless_is_released() -> None:
    matcher = StopMatcher(["STOP"])
    assert matcher.feed("go ST") == ("go ", False)
    assert matcher.feed("ART") == ("START", False)
    assert matcher.feed("ST") == ("", False)
    assert matcher.flush() == "ST"


@given(
    st.text(min_size=1), st.text(alphabet="ab", min_size=1, max_size=4), st.lists(st.integers(1, 4))
)
def test_emitted_text_never_contains_any_part_of_a_hit_stop(
    text: str, stop: str, cuts: list[int]
) -> None:
    matcher, emitted, pos, hit = StopMatcher([stop]), [], 0, False
    for cut in [*cuts, len(text)]:
        safe, hit = matcher.feed(text[pos : pos + cut])
        emitted.append(safe)
        pos += cut
        if hit:
            break
    if not hit:
        emitted.append(matcher.flush())
    out = "".join(emitted)
    if stop in text:
        assert hit
        assert out == text[: text.index(stop)]
    else:
        assert out == text
