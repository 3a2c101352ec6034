"""``sweep.html``: one self-contained page with the sweep's charts and tables.

The page has no external resource and no script: charts are inline SVG
built here, styles are inline CSS (light and dark), tooltips are SVG
``<title>`` elements. It opens offline, from a CI artifact, or attached to
an e-mail, and looks the same everywhere.

Budgets sit on a log2 axis (the sweep doubles the budget each step). Each
request is a dot coloured by prompt; the median (or mean) of a budget is the
dark mark with its bootstrap interval (at ``CONFIDENCE``); invalid requests are drawn apart,
in a red strip under the plot, with their violation codes, because they
measured nothing and must not blend in with the timings.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_ddtree.core import __version__
from pytest_ddtree.core.budget import budget_order
from pytest_ddtree.core.wording import percent
from pytest_ddtree.measure.sweep import (
    DiagnosisRecord,
    RunMetadata,
    Sample,
    SweepRun,
    SweepSummary,
    budget_label,
)
from pytest_ddtree.measure.sweep.bootstrap import ci_name, confidence_text
from pytest_ddtree.measure.sweep.temperature import (
    Summaries,
    heading,
    only_summary,
    sampling_problems,
    summaries_of,
    zero_only,
)
from pytest_ddtree.report._atomic import write_text_atomic
from pytest_ddtree.report.arm_text import speculation_warnings
from pytest_ddtree.report.charts import PALETTE
from pytest_ddtree.report.columns import html_table, sweep_columns, sweep_rows
from pytest_ddtree.report.counters_html import server_counters_section
from pytest_ddtree.report.decision_text import drift_line, drift_rule_text, sweep_answer
from pytest_ddtree.report.depth_chart import depth_section
from pytest_ddtree.report.html_style import CSS
from pytest_ddtree.report.sweep_charts import budget_charts
from pytest_ddtree.report.terminal import race_log, unraced_note

if TYPE_CHECKING:
    from pytest_ddtree.measure.breakeven import BreakEvenMap
    from pytest_ddtree.measure.load import LoadTestResult


# --------------------------------------------------------------------------- page


def _legend(colors: dict[str, str]) -> str:
    items = [
        f'<span class="lg"><svg width="12" height="12"><circle cx="6" cy="6" r="4" '
        f'fill="{c}"/></svg>{escape(p)}</span>'
        for p, c in colors.items()
    ]
    glyphs = (
        '<span class="lg"><svg width="14" height="14"><circle class="center" cx="7" cy="7" '
        'r="5"/></svg>median (acceptance: mean)</span>'
        '<span class="lg"><svg width="14" height="14"><line class="ci" x1="7" x2="7" y1="1" '
        f'y2="13"/></svg>{confidence_text()} bootstrap CI</span>'
        '<span class="lg"><svg width="14" height="14"><rect class="iqr" x="2" y="3" width="10" '
        'height="8"/></svg>interquartile range</span>'
        '<span class="lg"><svg width="14" height="14"><path class="extra" d="M2,3 L12,3 L7,11 Z"/>'
        "</svg>TTFT p90</span>"
        '<span class="lg"><svg width="14" height="14"><path class="cross" d="M2,2 L12,12 M2,12 '
        'L12,2"/></svg>invalid request (not timed)</span>'
    )
    return (
        f'<div class="legend"><span class="lg-title">prompts</span>{"".join(items)}</div>'
        f'<div class="legend">{glyphs}</div>'
    )


def _stats_table(summary: SweepSummary) -> str:
    rows = sweep_rows(summary.budgets, summary.race)
    return html_table(
        # an interval, a slowdown or a verdict is read as one: never broken over two lines
        sweep_columns(),
        rows,
        classes="stats one-line",
        row_class=lambda r: "" if r.st.all_valid else "row-bad",
    )


def _race_section(summary: SweepSummary, meta: RunMetadata) -> str:
    """The rule, and for an adaptive sweep who left the race when and why."""
    race = summary.race
    if race is None:
        return ""
    rule = race.judgement.rule
    items = "".join(f"<li>{escape(line)}</li>" for line in race_log(race))
    unraced = unraced_note(meta)  # the terminal's note, from the same metadata
    how = (
        f"An adaptive sweep: every budget got {rule.min_n} requests at least, then a round "
        "at a time only the budgets still in contention got more."
        if race.mode == "adaptive"
        else f"{unraced}."
        if unraced
        else "An exhaustive sweep: every budget got every round, judged once."
    )
    return (
        '<section class="card"><h2>Race</h2>'
        f"<p>{escape(how)} Margin {percent(rule.equivalence)}: a budget whose whole interval of "
        "the slowdown against the leader lies within it is as fast, and the smallest of "
        "those is recommended; a budget clearly slower by more than the margin leaves; "
        f"no claim below n={rule.min_n}. {percent(rule.confidence)} confidence over all "
        f"looks.</p><ul>{items}</ul></section>"
    )


def _drift_section(summary: SweepSummary) -> str:
    """The drift check: the first budget measured again at the end ("" without one)."""
    if not summary.drift:
        return ""
    danger = " danger" if any(c.drifting for c in summary.drift) else ""
    items = "".join(f"<li>{escape(drift_line(c))}</li>" for c in summary.drift)
    return (
        f'<section class="card{danger}"><h2>Drift</h2><ul>{items}</ul>'
        '<p class="muted">The first budget of the sweep is measured in a block right after '
        "the warm-up and in the same block again after the last round; each request of the "
        "end block is paired with the same prompt's request in the start block. The sweep is "
        f"drifting when {drift_rule_text()}; the blocks are not counted in the budget's "
        "statistics.</p></section>"
    )


def _machine_section(run: SweepRun) -> str:
    """The ``--ddtree-probe`` output before and after, and the server's own description
    (a card of its own when no probe ran: the Machine state card is the probe's)."""
    meta = run.metadata
    parts: list[str] = []
    for probe in meta.probes:
        when = escape(str(probe.get("when", "")))
        problem = probe.get("problem")
        note = f' <span class="pill bad">{escape(str(problem))}</span>' if problem else ""
        parts.append(
            f"<h3>{when} the session: <code>{escape(str(probe.get('command', '')))}</code>"
            f"{note}</h3><pre>{escape(str(probe.get('output', '')))}</pre>"
        )
    for path, answer in (meta.server_info or {}).items():
        text = json.dumps(answer, indent=2, sort_keys=True)
        parts.append(f"<h3>server <code>{escape(path)}</code></h3><pre>{escape(text)}</pre>")
    if not parts:
        return ""
    if not meta.probes:
        return (
            '<section class="card"><h2>Server</h2><p class="muted">What the server says about '
            f"itself (keys masked).</p>{''.join(parts)}</section>"
        )
    return (
        '<section class="card"><h2>Machine state</h2><p class="muted">What --ddtree-probe '
        "printed before and after the session, and what the server says about itself "
        f"(keys masked).</p>{''.join(parts)}</section>"
    )


def _invalid_table(samples: Sequence[Sample]) -> str:
    bad = [s for s in samples if not s.valid]
    if not bad:
        return ""
    rows = []
    for s in bad[:200]:
        codes = "".join(f'<span class="code">{escape(c)}</span>' for c in s.codes)
        msgs = "<br>".join(escape(m) for m in s.messages) or "&nbsp;"
        rows.append(
            f"<tr><td>{escape(budget_label(s.tree_budget))}</td><td>{escape(s.prompt_id)}</td>"
            f"<td>{s.round + 1 if s.round >= 0 else 'before timing'}</td><td>{codes}</td>"
            f"<td class='msg'>{msgs}</td></tr>"
        )
    more = f"<p class='muted'>… and {len(bad) - 200} more.</p>" if len(bad) > 200 else ""
    return (
        '<section class="card danger"><h2>Invalid requests</h2>'
        "<p>These responses broke output-quality invariants. Nothing they measured was "
        "timed or used in the statistics above.</p>"
        '<table class="stats invalid-table"><thead><tr><th>tree_budget</th><th>prompt</th>'
        f"<th>round</th><th>codes</th><th>message</th></tr></thead><tbody>{''.join(rows)}"
        f"</tbody></table>{more}</section>"
    )


def _diagnoses(diagnoses: Sequence[DiagnosisRecord]) -> str:
    if not diagnoses:
        return ""
    rows = []
    for d in diagnoses[:200]:
        cls = {"template": "tmpl", "speculation": "spec"}.get(d.blame, "none")
        codes = "".join(f'<span class="code">{escape(c)}</span>' for c in d.codes)
        title = escape(d.title or d.blame)
        detail = " ".join(escape(text) for text in (d.reason, d.advice) if text)
        budget = "-" if d.tree_budget is None else budget_label(d.tree_budget)
        rows.append(
            f"<tr><td>{escape(d.nodeid)}</td><td>{escape(budget)}</td>"
            f"<td>{codes}</td><td><span class='pill {cls}'>{title}</span></td>"
            f"<td class='msg'>{detail}</td></tr>"
        )
    return (
        '<section class="card"><h2>Diagnosis</h2><p class="muted">Each failing request was '
        "replayed on the target-only baseline: a baseline that fails the same way points at the "
        "prompt, chat template or model; at temperature 0, a baseline that passes points at "
        "speculative decoding, unless the answer left the baseline's at a numerical near-tie "
        "(the margin is in the reason). A sampled answer's replay is not evidence.</p>"
        '<table class="stats invalid-table"><thead><tr><th>test</th><th>tree_budget</th>'
        "<th>codes</th><th>layer at fault</th><th>why, and what to do</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></section>"
    )


def _meta_value(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return ", ".join(str(x) for x in v)
    if isinstance(v, dict):
        return ", ".join(f"{k}={x}" for k, x in v.items())
    return str(v)


def _counts_table(counts: Mapping[str, Any]) -> str:
    """``{client: {counter: n}}`` (the transport counts) as a table, one row per client."""
    columns = list(dict.fromkeys(k for row in counts.values() for k in row))
    head = "".join(f"<th>{escape(c.replace('_', ' '))}</th>" for c in columns)
    rows = "".join(
        f"<tr><td>{escape(str(name))}</td>"
        + "".join(f"<td>{escape(str(row.get(c, '-')))}</td>" for c in columns)
        + "</tr>"
        for name, row in counts.items()
    )
    return (
        f'<table class="stats"><thead><tr><th>client</th>{head}</tr></thead>'
        f"<tbody>{rows}</tbody></table>"
    )


def _metadata(run: SweepRun) -> str:
    meta = run.metadata.to_json()
    meta.setdefault("seed", run.seed)
    meta["requests"] = f"{len(run.samples)} ({sum(s.valid for s in run.samples)} valid)"
    rows = []
    for k, v in meta.items():
        if v in (None, "", [], {}) or k in ("notes", "probes", "server_info", "server_counters"):
            continue
        if isinstance(v, Mapping) and v and all(isinstance(x, Mapping) for x in v.values()):
            value = _counts_table(v)  # a table per client, not a Python dict
        else:
            value = escape(_meta_value(v))
        rows.append(f"<dt>{escape(str(k))}</dt><dd>{value}</dd>")
    return f'<dl class="meta">{"".join(rows)}</dl>'


def card_state(summary: SweepSummary) -> tuple[str, str]:
    """The recommendation card's class and badge: decided, equivalent within the margin,
    one budget, undecided, partial run, server drifted, or no recommendation."""
    rec = summary.recommendation
    if rec.budget_ignored:
        return "none", "budget ignored"
    if rec.decode_median is None:
        return "none", "no recommendation"
    if rec.drifting:
        return "drifting", "server drifted"
    if not rec.decided:
        return ("tied", "either one") if rec.either else ("tied", "undecided")
    if rec.partial:
        return "tied", "partial run"
    if rec.tied:
        return "decisive", f"equivalent within {percent(rec.equivalence)}"
    if sum(1 for st in summary.budgets if st.decode_median is not None) == 1:
        return "decisive", "one budget"
    return "decisive", "decided"


def _cards(run: SweepRun, summary: SweepSummary) -> str:
    rec = summary.recommendation
    rec_cls, badge = card_state(summary)
    if rec.budget_ignored:
        big, sub = "—", "the server does not use the tree budget (budget-ignored)"
    elif rec.decode_median is None:
        big, sub = "—", "no valid timings" if run.samples else "nothing was timed"
    elif rec.either:
        # no single winner, but the answer is known: the budgets that cannot be told apart
        big = escape(" or ".join(budget_label(b) for b in sorted(rec.either, key=budget_order)))
        sub = f"either one; tree_budget {budget_label(rec.leader)} led (n={rec.n})"
    elif not rec.decided:
        # no forced winner: the leader is named as such, with its n
        big = "—"
        sub = f"undecided; tree_budget {budget_label(rec.leader)} leads (n={rec.n})"
    else:
        big = escape(budget_label(rec.tree_budget))
        sub = f"{rec.decode_median:,.0f} tok/s median decode"
        if rec.decode_ci:
            sub += f" ({ci_name()} [{rec.decode_ci[0]:,.0f}, {rec.decode_ci[1]:,.0f}], n={rec.n})"
    total = len(run.samples)
    n_valid = sum(s.valid for s in run.samples)
    bad_budgets = [st for st in summary.budgets if not st.all_valid]
    valid_sub = (
        "nothing was timed"
        if not total
        else "every timed request passed the invariants"
        if not bad_budgets
        else "invalid at tree_budget " + ", ".join(budget_label(b.tree_budget) for b in bad_budgets)
    )
    acc = [st for st in summary.budgets if st.mean_acceptance_length is not None]
    if acc:
        top = max(acc, key=lambda st: st.mean_acceptance_length or 0.0)
        acc_big = f"{top.mean_acceptance_length:.2f}"
        # budgets equal at the shown precision are named together: a tie is a tie
        tied = [st for st in acc if f"{st.mean_acceptance_length:.2f}" == acc_big]
        where = " and ".join(budget_label(st.tree_budget) for st in tied)
        acc_sub = (
            f"at tree_budget {where}{' (tied)' if len(tied) > 1 else ''} (tokens per decode round)"
        )
    else:
        acc_big = "—"
        acc_sub = (
            "the server reports no speculation statistics"
            if any(st.valid for st in summary.budgets)
            else "no valid request to take it from"
        )
    tests = run.metadata.tests or {}
    failed = int(tests.get("failed", 0))
    if failed:
        # the card counts what the terminal counts: a failing test is never hidden by the
        # timed requests that passed
        ran = failed + int(tests.get("passed", 0))
        valid_sub += f"; {failed} of {ran} tests failed (see Diagnosis and the run's output)"
    valid_cls = "good" if not bad_budgets and total and not failed else "bad"
    return (
        '<section class="cards">'
        f'<div class="card rec {rec_cls}"><div class="label">Recommended tree_budget '
        f'<span class="badge">{badge}</span></div><div class="big">{big}</div>'
        f'<div class="sub">{escape(sub)}</div>'
        f'<p class="rec-msg">{escape(sweep_answer(summary))}</p></div>'
        f'<div class="card {valid_cls}"><div class="label">Valid requests</div>'
        f'<div class="big">{n_valid}<span class="of">/{total}</span></div>'
        f'<div class="sub">{escape(valid_sub)}</div></div>'
        f'<div class="card"><div class="label">Highest mean acceptance length</div>'
        f'<div class="big">{acc_big}</div><div class="sub">{escape(acc_sub)}</div></div>'
        "</section>"
    )


def render_html(
    run: SweepRun,
    summaries: Summaries | None = None,
    *,
    load: Sequence[LoadTestResult] = (),
    breakeven: Sequence[tuple[str, BreakEvenMap]] = (),
) -> str:
    """The complete ``sweep.html`` document as a string (one card per load test in ``load``;
    one set of cards, charts and tables per temperature in ``summaries`` above 0, computed
    if not given; a single summary for a run at temperature 0)."""
    summaries = summaries_of(run.samples, summaries, seed=run.seed)
    load_cards = ""
    if load:
        from pytest_ddtree.report.load_html import render_load_section

        load_cards = render_load_section(load)
    meta = run.metadata
    prompts = sorted({s.prompt_id for s in run.samples})
    colors = {p: PALETTE[i % len(PALETTE)] for i, p in enumerate(prompts)}
    model = meta.model or "unknown model"
    endpoint = meta.endpoint or ""
    dialect = meta.dialect or ""
    created = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    line = " · ".join(
        x
        for x in (
            endpoint,
            f"dialect {dialect}" if dialect else "",
            f"{len(run.samples)} requests",
            created,
        )
        if x
    )
    notices: list[str] = []
    if any(s.concurrent for s in run.samples):
        notices.append(
            "Timings were taken concurrently (several pytest-xdist workers sending requests "
            "at once). Compare budgets within this run only; for absolute figures run serially."
        )
    notices.extend(meta.notes)
    # each temperature's budgets warn once, in the order of the temperatures
    notices.extend(
        dict.fromkeys(w for s in summaries.values() for w in speculation_warnings(s.budgets))
    )
    maps = ""
    if breakeven:
        from pytest_ddtree.report.breakeven_html import render_breakeven_section

        maps = render_breakeven_section(breakeven)
    if (load_cards or maps) and not run.samples:  # no sweep: no empty sweep sections
        what = "break-even" if maps and not load_cards else "load"
        return _page(
            model,
            [
                f'<header><div class="eyebrow">pytest-ddtree · {what}</div>',
                f"<h1>{escape(model)}</h1>",
                f'<div class="meta-line">{escape(endpoint)}</div></header>',
                *(f'<div class="notice">{escape(n)}</div>' for n in notices),
                maps,
                load_cards,
                server_counters_section(meta.extra.get("server_counters")),
                f'<section class="card"><h2>Run</h2>{_metadata(run)}</section>',
            ],
        )
    body: list[str] = [
        '<header><div class="eyebrow">pytest-ddtree · tree-budget sweep</div>',
        f"<h1>{escape(model)}</h1>",
        f'<div class="meta-line">{escape(line)}</div></header>',
    ]
    if zero_only(summaries):
        summary = only_summary(summaries, seed=run.seed)
        body.append(_cards(run, summary))
        body.extend(f'<div class="notice">{escape(n)}</div>' for n in notices)
        body.extend(_sweep_sections(run, summary, budget_charts(run, summary, colors), colors))
    else:
        body.extend(f'<div class="notice">{escape(n)}</div>' for n in notices)
        for t, part in summaries.items():
            sub = replace(run, samples=[x for x in run.samples if x.temperature == t])
            body.append(f'<h2 class="temperature">Sampling {escape(heading(t))}</h2>')
            body.append(_cards(sub, part))
            body.extend(
                f'<div class="notice">{escape(p)}</div>' for p in sampling_problems(sub.samples)
            )
            body.extend(_sweep_sections(sub, part, budget_charts(sub, part, colors), colors))
    body.append(_invalid_table(run.samples))
    body.append(server_counters_section(meta.extra.get("server_counters"), _timed(summaries)))
    body.append(_diagnoses(run.diagnoses))
    body.append(load_cards)
    body.append(maps)
    body.append(_machine_section(run))
    body.append(f'<section class="card"><h2>Run</h2>{_metadata(run)}</section>')
    return _page(model, body)


def _timed(summaries: Mapping[float, SweepSummary]) -> dict[int | None, int]:
    """Each budget's requests in the per-budget statistics, every temperature together (as
    the server's counters are read)."""
    timed: dict[int | None, int] = {}
    for summary in summaries.values():
        for st in summary.budgets:
            timed[st.tree_budget] = timed.get(st.tree_budget, 0) + st.requests
    return timed


def _sweep_sections(
    run: SweepRun, summary: SweepSummary, charts: list[str], colors: dict[str, str]
) -> list[str]:
    """The charts, the per-budget table and the drift check of one temperature's sweep."""
    body: list[str] = []
    if charts:
        body.append(
            '<section class="card"><h2>Decode throughput</h2>'
            '<p class="muted">Client-measured decode tokens/s of every valid request '
            "(tokens after the first over the time after the first), by tree budget.</p>"
            f"{charts[0]}{_legend(colors)}</section>"
        )
        body.append(
            '<div class="pair"><section class="card"><h2>Acceptance length</h2>'
            '<p class="muted">Tokens committed per decode round (bonus token included). '
            "It keeps rising with the budget while throughput peaks: bigger trees cost "
            f"more to verify.</p>{charts[1]}</section>"
            '<section class="card"><h2>Time to first token</h2>'
            f'<p class="muted">Median with {ci_name()}; the triangle is p90.</p>'
            f"{charts[2]}</section></div>"
        )
    body.append(depth_section(summary))
    body.append(f'<section class="card"><h2>Per-budget statistics</h2>{_stats_table(summary)}')
    body.append(
        '<p class="muted">Statistics use valid requests only. A budget with any invalid '
        "request is never recommended. Budgets are compared by measured throughput, by the "
        "rule of the Race card; acceptance rate is not used because it falls arithmetically "
        "as the budget grows.</p></section>"
    )
    body.append(_race_section(summary, run.metadata))
    body.append(_drift_section(summary))
    return body


def _page(model: str, body: list[str]) -> str:
    footer = (
        f"<footer>Generated by pytest-ddtree {escape(__version__)}. Raw samples: "
        "sweep.json (schema_version 1). Hover a point for its request.</footer>"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>DDTree sweep · {escape(model)}</title><style>{CSS}</style></head>"
        f"<body><main>{''.join(body)}{footer}</main></body></html>\n"
    )


def write_sweep_html(
    run: SweepRun,
    path: str | os.PathLike[str],
    summaries: Summaries | None = None,
    *,
    load: Sequence[LoadTestResult] = (),
    breakeven: Sequence[tuple[str, BreakEvenMap]] = (),
) -> Path:
    """Write ``sweep.html`` atomically."""
    return write_text_atomic(path, render_html(run, summaries, load=load, breakeven=breakeven))
