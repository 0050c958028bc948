"""Human-written numbers, read the one way each context means them.

In a command, vLLM's own rule (`human_readable_int` in vllm/engine/arg_utils.py, later
vllm/utils/argparse_utils.py): lower-case suffixes are decimal (`32k` = 32,000, `25.6k` = 25,600),
upper-case ones binary (`32K` = 32,768) and take whole numbers only. In a person's sentence
("Llama 70B at 32k context") a `k` of tokens means 1,024, as context sizes are counted. Whoever
answers shows the number it took, so a person sees which reading was used.
"""

from __future__ import annotations

import re

__all__ = ["COUNT_WORD", "HumanNumberError", "command_int", "count_word", "memory_gib", "sentence_tokens"]

_HUMAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtKMGT]?)\s*$")
_DECIMAL = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


class HumanNumberError(ValueError):
    """A number that vLLM's rule does not accept; the message says why."""


def command_int(text: str) -> int:
    """A flag value as `vllm serve` reads it: `32k` = 32,000, `32K` = 32,768, `25.6k` = 25,600."""
    match = _HUMAN.match(text)
    if match is None:
        raise HumanNumberError(f"{text!r} is not a number such as 2048, 32k or 16M")
    number, suffix = match.groups()
    if suffix in _BINARY:
        if "." in number:
            raise HumanNumberError(f"{text!r}: binary suffixes take whole numbers (use 16M, not 1.5M)")
        return int(number) * _BINARY[suffix]
    return int(float(number) * _DECIMAL[suffix])


def sentence_tokens(text: str) -> int | None:
    """A token count in a person's words: `32k` and `32K` = 32,768, `1m` = 1,048,576, `8192` = 8192."""
    match = _HUMAN.match(text)
    if match is None:
        return None
    number, suffix = match.groups()
    scale = {"": 1, "k": 2**10, "m": 2**20}.get(suffix.lower())
    return None if scale is None else int(float(number) * scale)


# A small count as a person writes it: digits, English number words, Chinese numerals (两 for two
# of something: 两块卡).
_COUNT_WORDS = {
    **{w: n for n, w in enumerate(("zero", "one", "two", "three", "four", "five", "six", "seven",
                                    "eight", "nine", "ten"))},
    "eleven": 11, "twelve": 12, "sixteen": 16, "a pair of": 2, "dual": 2, "quad": 4,
    **{w: n for n, w in enumerate("零一二三四五六七八九十")},
    "两": 2,
}  # fmt: skip
COUNT_WORD = r"\d{1,3}|" + "|".join(sorted(map(re.escape, _COUNT_WORDS), key=len, reverse=True))


def count_word(text: str) -> int | None:
    """A count in a person's words: `8` = 8, `two` = 2, `两` = 2, `八` = 8; None when it is none."""
    word = text.strip().lower()
    if word.isdigit():
        return int(word)
    return _COUNT_WORDS.get(word)


# A memory size as a limit states it. Docker and compose (`-m 6g`, `mem_limit: 6gb`), systemd
# (`MemoryMax=16G`), SLURM (`--mem=32G`) and people ("a 6GB container") count a letter in powers of
# 1024; Kubernetes' quantities count `G` in powers of 1000 and `Gi` in powers of 1024.
_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtKMGT]?)(i?)[bB]?\s*$")
_LETTER = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}


def memory_gib(text: str, *, si_letters: bool = False, bare: int = 1) -> float | None:
    """A memory size in GiB: `6g`, `6G`, `6GB`, `6Gi`, `512Mi`; `si_letters` reads a letter without
    `i` as a power of 1000 (Kubernetes); a bare number counts `bare` bytes (SLURM's MiB, ulimit's KiB)."""
    match = _MEMORY.match(text)
    if match is None:
        return None
    number, letter, binary = match.groups()
    power = _LETTER[letter.lower()]
    if not letter:
        size = float(number) * bare
    elif si_letters and not binary:
        size = float(number) * 1000**power
    else:
        size = float(number) * 1024**power
    return size / 2**30
