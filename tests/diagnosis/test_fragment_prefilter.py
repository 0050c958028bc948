"""The text the fragment prefilter reads: lower-cased, separators as spaces, UTF-8, made in one C pass
per table, and the same bytes the character-by-character definition gives."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from service.packs.fragments import SEPARATORS, separated

# ASCII, the full-width punctuation the table names, letters that change length or leave ASCII when
# lower-cased (dotted capital I, the Kelvin sign), Chinese, and a lone surrogate (which UTF-8 cannot write)
_ALPHABET = st.sampled_from(
    list("aZ_9 \n\t:;()[]\"'`-./")
    + list("：，。（）「」“”‘’")
    + ["\u0130", "\u212a", "\u03a3", "\u00c9"]
    + list("显存不足")
    + ["\ud800"]
)


def _definition(text: str) -> bytes:
    return text.translate(SEPARATORS).lower().encode("utf-8", errors="replace")


@given(st.text(_ALPHABET, max_size=60))
def test_separated_text_is_the_translated_lower_cased_utf8(text: str) -> None:
    assert separated(text) == _definition(text)


def test_full_width_punctuation_between_words_becomes_a_space() -> None:
    assert separated("CUDA：out（of）memory。") == b"cuda out of memory "


def test_an_ascii_text_keeps_its_line_breaks_and_length() -> None:
    text = 'KV cache="3.5 GiB"\nENGINE core: failed'
    assert separated(text) == b"kv cache  3 5 gib \nengine core  failed"
