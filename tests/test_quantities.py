"""Human-written numbers: vLLM's rule in commands, 1,024 per k in a person's sentence."""

from __future__ import annotations

import pytest

from service.quantities import HumanNumberError, command_int, count_word, memory_gib, sentence_tokens


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


@pytest.mark.parametrize(
    ("text", "si_letters", "bare", "gib"),
    [
        ("6g", False, 1, 6.0),  # docker -m, compose mem_limit
        ("16G", False, 1, 16.0),  # systemd MemoryMax
        ("6gb", False, 1, 6.0),
        ("12Gi", True, 1, 12.0),  # Kubernetes' binary suffix
        ("8G", True, 1, 8e9 / 2**30),  # Kubernetes' decimal letter
        ("512Mi", True, 1, 0.5),
        ("32768", False, 2**20, 32.0),  # SLURM --mem counts MiB
        ("8388608", False, 2**10, 8.0),  # ulimit -v counts KiB
    ],
)
def test_a_memory_limit_is_read_in_its_tools_units(
    text: str, si_letters: bool, bare: int, gib: float
) -> None:
    assert memory_gib(text, si_letters=si_letters, bare=bare) == pytest.approx(gib)


def test_what_is_no_memory_size_reads_as_none() -> None:
    assert memory_gib("infinity") is None
    assert memory_gib("50%") is None
