"""Healthy probes from vLLM's own help text: what `vllm serve --help` printed about memory, per release.

People paste a stretch of `--help` output or of the engine-argument docs to ask which flag to turn;
the text says "OOM", "out of memory", "KV cache", "CUDA graph" and "preemption" on every page, and
none of it is a failure. This script renders, for a few releases across the eras, the options whose
help mentions memory the way argparse prints them (the help strings of `vllm/engine/arg_utils.py` up
to 0.6, the config dataclasses' field docstrings from 0.7 on, where vLLM generates the help from
them) and writes one probe per release and stretch under tests/diagnosis/shown_pastes/healthy/.
The probes are committed; tests/diagnosis/test_shown_pastes.py classifies them without the cache.

    python tools/help_probes.py            # rewrite the help-*.txt probes
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from vllm_sources import cache_dir  # noqa: E402

OUTPUT = ROOT / "tests" / "diagnosis" / "shown_pastes" / "healthy"
RELEASES = ("0.4.3", "0.6.3", "0.8.5.post1", "0.10.2", "0.20.2", "0.33.0")
_MEMORY = re.compile(r"\bOOM\b|out of memory|memory|KV cache|preempt|swap|offload|CUDA graph|cudagraph", re.I)
_STRETCH = 12  # options per probe: what a person pastes of a long help page


def _argparse_helps(base: Path) -> list[tuple[str, str]]:
    """(flag, help) of every `add_argument("--flag", …, help="…")` with a literal help."""
    path = base / "vllm" / "engine" / "arg_utils.py"
    out: list[tuple[str, str]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"):
            continue
        flags = [a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
        for keyword in node.keywords:
            if keyword.arg == "help" and flags:
                try:
                    text = ast.literal_eval(keyword.value)
                except ValueError:
                    continue
                if isinstance(text, str):
                    out.append((flags[0], text))
    return out


def _field_docs(base: Path) -> list[tuple[str, str]]:
    """(flag, docstring) of every config dataclass field with a docstring below it."""
    folder = base / "vllm" / "config"
    files = sorted(folder.glob("*.py")) if folder.is_dir() else [base / "vllm" / "config.py"]
    out: list[tuple[str, str]] = []
    for path in files:
        if not path.is_file():
            continue
        for cls in (n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef)):
            for field, doc in zip(cls.body, cls.body[1:], strict=False):
                if (
                    isinstance(field, ast.AnnAssign)
                    and isinstance(field.target, ast.Name)
                    and isinstance(doc, ast.Expr)
                    and isinstance(doc.value, ast.Constant)
                    and isinstance(doc.value.value, str)
                ):
                    flag = "--" + field.target.id.replace("_", "-")
                    out.append((flag, " ".join(doc.value.value.split()).replace("%", "%%")))
    return out


def help_pages(release: str) -> list[str]:
    """`vllm serve --help` stretches of `release` about memory, as argparse prints them at 80 columns."""
    base = cache_dir() / release
    helps = {flag: text for flag, text in [*_field_docs(base), *_argparse_helps(base)]}
    chosen = [(flag, text) for flag, text in helps.items() if _MEMORY.search(text)]
    pages: list[str] = []
    for start in range(0, len(chosen), _STRETCH):
        parser = argparse.ArgumentParser(
            prog="vllm serve", formatter_class=lambda prog: argparse.HelpFormatter(prog, width=80)
        )
        for flag, text in chosen[start : start + _STRETCH]:
            parser.add_argument(flag, help=text)
        pages.append(parser.format_help())
    return pages


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None).parse_args(argv)
    OUTPUT.mkdir(parents=True, exist_ok=True)
    for old in OUTPUT.glob("help-*.txt"):
        old.unlink()
    for release in RELEASES:
        for number, page in enumerate(help_pages(release), start=1):
            (OUTPUT / f"help-{release}-{number}.txt").write_text(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
