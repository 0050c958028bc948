"""The public threads the real-world corpus rounds already used, so a new held-out round avoids them.

A held-out round (tests/corpus/REALWORLD.md) must come from threads none of the earlier rounds read.
This collects every thread named anywhere the rounds left a trace: the `source:` and `note:` keys of
tests/corpus/*.yaml and tests/diagnosis/healthy_excerpts/*.yaml, the `url`/`note` of
tests/budget/realworld_numbers.yaml, the threads REALWORLD.md names (also the ones it skipped), and
the vLLM thread number in an excerpt's file name (`gh2-10517-…`, `gh4-pr13596-…`: the healthy
excerpts of the early rounds have no sidecar naming their source; `gh3-miaai47-…` names another
repository by an alias of its owner or name, matched by number and alias).
A thread is `owner/repo#number`; issues, pull requests and discussions share GitHub's number space
per repository, so the kind is not part of the key. A bare `#N` means vllm-project/vllm, the way the
rounds write it.

    python tools/corpus_threads.py                          # every used thread, one a line
    python tools/corpus_threads.py --check vllm-project/vllm#12345 https://github.com/a/b/issues/7
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Iterator, Set
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_REPO = "vllm-project/vllm"

_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]*"
_URL = re.compile(rf"github\.com/({_NAME})/({_NAME})/(?:issues|pull|discussions)/(\d+)")
_SPELLED = re.compile(
    rf"\b({_NAME})/({_NAME})(?:\s+(?:issue|pull request|PR|discussion|pull))?\s*#(\d+)", re.IGNORECASE
)
_BARE = re.compile(r"(?<![\w/])#(\d{2,6})\b")
_STEM = re.compile(r"^gh\d*-(?:pr)?(\d+)-")
_ALIASED_STEM = re.compile(r"^gh\d*-([a-z][a-z0-9]*?)(\d+)-")


def threads_in(text: str, *, bare_default: bool = False) -> set[str]:
    """The `owner/repo#N` keys a text names by URL or spelled out (and bare `#N`, when asked)."""
    found = {f"{o}/{r.removesuffix('.git')}#{n}".lower() for o, r, n in _URL.findall(text)}
    found |= {f"{o}/{r}#{n}".lower() for o, r, n in _SPELLED.findall(text)}
    if bare_default:
        spelled = {m.start(3) - 1 for m in _SPELLED.finditer(text)}
        found |= {f"{DEFAULT_REPO}#{m.group(1)}" for m in _BARE.finditer(text) if m.start() not in spelled}
    return found


def _sources(root: Path) -> Iterator[tuple[Path, bool]]:
    """Each file that records used threads, and whether its bare `#N` means a vLLM thread."""
    for folder in (root / "tests" / "corpus", root / "tests" / "diagnosis" / "healthy_excerpts"):
        for path in sorted(folder.glob("*.yaml")):
            yield path, False
    yield root / "tests" / "budget" / "realworld_numbers.yaml", False
    yield root / "tests" / "corpus" / "REALWORLD.md", True


def _keyed_text(path: Path) -> str:
    """Only the keys that name a thread: `source`, `note`, `url` (a log excerpt may cite anything)."""
    keep = re.compile(
        r"^\s*-?\s*(?:source|note|url):.*(?:\n(?=[ \t]+\S)(?![ \t]*-?\s*\w+:).*)*", re.MULTILINE
    )
    return "\n".join(m.group(0) for m in keep.finditer(path.read_text(encoding="utf-8")))


def used_threads(root: Path = REPO) -> set[str]:
    """Every thread the committed rounds name (lower-case `owner/repo#N`)."""
    used: set[str] = set()
    for path, bare in _sources(root):
        if path.exists():
            text = path.read_text(encoding="utf-8") if path.suffix == ".md" else _keyed_text(path)
            used |= threads_in(text, bare_default=bare)
    for folder in (root / "tests" / "corpus", root / "tests" / "diagnosis" / "healthy_excerpts"):
        used |= {f"{DEFAULT_REPO}#{m.group(1)}" for p in folder.glob("*.log") if (m := _STEM.match(p.name))}
    return used


def aliased_stems(root: Path = REPO) -> set[tuple[str, str]]:
    """`(alias, number)` of excerpt names such as `gh3-miaai47-…`: a sidecar-less excerpt of another
    repository, named by a short alias of it (the alias is part of the owner or repository name)."""
    found: set[tuple[str, str]] = set()
    for folder in (root / "tests" / "corpus", root / "tests" / "diagnosis" / "healthy_excerpts"):
        found |= {
            (m.group(1), m.group(2)) for p in folder.glob("*.log") if (m := _ALIASED_STEM.match(p.name))
        }
    return found


def _alias_hit(key: str, aliases: Set[tuple[str, str]]) -> bool:
    name, number = key.split("#")
    compact = re.sub(r"[^a-z0-9]", "", name)
    return any(n == number and alias in compact for alias, n in aliases)


def check(
    candidates: Iterable[str], used: Set[str], aliases: Set[tuple[str, str]] = frozenset()
) -> list[tuple[str, bool]]:
    """For each candidate (URL or `owner/repo#N`), whether an earlier round already used it."""
    out: list[tuple[str, bool]] = []
    for candidate in candidates:
        keys = threads_in(candidate)
        if not keys:
            raise SystemExit(f"not a thread reference: {candidate!r}")
        out.append((candidate, bool(keys & used) or any(_alias_hit(k, aliases) for k in keys)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", nargs="+", metavar="THREAD", help="say whether these threads were used")
    args = parser.parse_args(argv)
    used = used_threads()
    if args.check:
        results = check(args.check, used, aliased_stems())
        for candidate, seen in results:
            print(f"{'USED' if seen else 'new '}  {candidate}")
        return 1 if any(seen for _, seen in results) else 0
    for key in sorted(used):
        print(key)
    print(f"{len(used)} threads", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
