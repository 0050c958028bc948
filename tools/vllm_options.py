"""Every long option `vllm serve` / the OpenAI server accepts, per release, from vLLM's sources.

vLLM's parsers (argparse.ArgumentParser, later FlexibleArgumentParser) never pass
`allow_abbrev=False` in any release read (0.2.0-0.34.0), so argparse accepts any unambiguous prefix
of a long option (`--gpu-memory-util=0.9` is `--gpu-memory-utilization`). Whether a prefix is
unambiguous depends on every option of that release, not only the ones `rules/fixes/flags.yaml`
lists, so this script writes them all to `rules/fixes/options.json`: the `"--…"` literals of
`vllm/engine/arg_utils.py` and `vllm/entrypoints/`, and the fields of the frontend argument
dataclasses (`FrontendArgs`, whose options are generated from field names from 0.10 on). The list
is a superset (a literal that is not an option only makes more prefixes ambiguous, so fewer are
read), which is the safe side for reading a person's command.

    python tools/vllm_options.py            # rewrite rules/fixes/options.json
    python tools/vllm_options.py --check    # exit 1 when the committed table is stale
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from vllm_sources import cache_dir  # noqa: E402
from vllm_templates import ranges  # noqa: E402

from service.packs.inventory import version_key  # noqa: E402

OUTPUT = ROOT / "rules" / "fixes" / "options.json"
_LITERAL = re.compile(r"""["'](--[a-z][a-z0-9-]*)["']""")
_FRONTEND_CLASS = re.compile(r"^class (\w*FrontendArgs\w*)\b.*:$")
_FIELD = re.compile(r"^    ([a-z_][a-z0-9_]*)\s*:")


def options_of(base: Path) -> set[str]:
    """The long options one release's sources can define (a superset, see the module docstring)."""
    files = [
        base / "vllm" / "engine" / "arg_utils.py",
        *sorted((base / "vllm" / "entrypoints").rglob("*.py")),
    ]
    found: set[str] = set()
    for path in files:
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        found.update(_LITERAL.findall(text))
        inside = False
        for line in text.splitlines():
            if _FRONTEND_CLASS.match(line):
                inside = True
                continue
            if inside and line and not line[0].isspace():
                inside = False
            field = _FIELD.match(line) if inside else None
            if field is not None:
                found.add("--" + field.group(1).replace("_", "-"))
    return found


def build(cache: Path) -> dict[str, object]:
    order = sorted((p.name for p in cache.iterdir() if (p / "vllm").is_dir()), key=version_key)
    where: dict[str, list[str]] = {}
    for version in order:
        for option in options_of(cache / version):
            where.setdefault(option, []).append(version)
    return {
        "source": "vLLM wheels (tools/vllm_sources.py), long options by tools/vllm_options.py",
        "releases": order,
        "options": [[option, ranges(versions, order)] for option, versions in sorted(where.items())],
    }


def dump(table: dict[str, object]) -> str:
    rows = ",\n".join(json.dumps(row) for row in table["options"])  # type: ignore[attr-defined]
    head = json.dumps({k: v for k, v in table.items() if k != "options"})[:-1]
    return f'{head}, "options": [\n{rows}\n]}}\n'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    cache = cache_dir()
    if not cache.is_dir():
        print(
            f"no extracted vLLM releases under {cache}; run: python tools/vllm_sources.py fetch",
            file=sys.stderr,
        )
        return 2
    text = dump(build(cache))
    if args.check:
        stale = not args.output.is_file() or args.output.read_text(encoding="utf-8") != text
        print("stale" if stale else "up to date")
        return 1 if stale else 0
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
