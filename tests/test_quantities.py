"""Human-written numbers: vLLM's rule in commands, 1,024 per k in a person's sentence."""

from __future__ import annotations

import pytest

from service.quantities import HumanNumberError, command_int, count_word, sentence_tokens


@pytest.mark.parametrize(
    ("text", "value"),
    [("32k", 32_000), ("32K", 32_768), ("25.6k", 25_600), ("1m", 10**6), ("16M", 16 * 2**20), ("8192", 8192)],
)
def test_commands_follow_vllms_human_readable_int(text: str, value: int) -> None:
    assert command_int(text) == value


@pytest.mark.parametrize("text", ["1.5K", "lots", "auto", "-1", ""])
def test_what_vllm_rejects_is_an_error(text: str) -> None:
    with pytest.raises(HumanNumberError):
        command_int(text)


@pytest.mark.parametrize(("text", "value"), [("32k", 32_768), ("32K", 32_768), ("8192", 8192), ("1m", 2**20)])
def test_a_persons_32k_context_is_32768_tokens(text: str, value: int) -> None:
    assert sentence_tokens(text) == value


def test_a_sentence_without_a_number_has_no_token_count() -> None:
    assert sentence_tokens("long") is None


@pytest.mark.parametrize(
    ("text", "count"), [("8", 8), ("two", 2), ("Four", 4), ("两", 2), ("八", 8), ("dual", 2), ("many", None)]
)
def test_a_count_in_a_persons_words(text: str, count: int | None) -> None:
    assert count_word(text) == count
