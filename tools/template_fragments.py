"""Write `rules/fragments/templates.json` from the template inventories (`rules/inventory/*.yaml`).

The classifier knows a vLLM message cut or retold without its opening words by the runs of three
and four words of its template (see service/packs/fragments.py). Rerun this after
`tools/vllm_templates.py` or after a rule starts or stops matching a template.

    python tools/template_fragments.py            # rewrite the table
    python tools/template_fragments.py --check    # exit 1 when the committed table is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.packs import load_packs  # noqa: E402
from service.packs.fragments import FRAGMENTS_FILE, build_fragments, dump_fragments  # noqa: E402
from service.packs.inventory import load_inventories  # noqa: E402


def fresh_table(rules_dir: Path) -> str:
    """The table's text as built from the inventories and rules under `rules_dir`."""
    packs = load_packs(rules_dir)
    # vLLM's and the allocators' wordings only: the plugins' (plugins.yaml) are matched by their rules
    # whole; their runs of words ("KV cache", "max_model_len") put prose about a PR or a question into
    # the KV-capacity phase (gh9-39976, gh11-pr44594 when they were included)
    inventories = [inv for name, inv in load_inventories(rules_dir).items() if name != "plugins.yaml"]
    return dump_fragments(build_fragments(inventories, packs.signatures.by_id))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rules", type=Path, default=ROOT / "rules")
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed table is stale")
    args = parser.parse_args(argv)
    path = args.rules / FRAGMENTS_FILE
    text = fresh_table(args.rules)
    if args.check:
        current = path.read_text(encoding="utf-8") if path.is_file() else ""
        if current != text:
            print(f"{path} is stale: rerun python tools/template_fragments.py", file=sys.stderr)
            return 1
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
