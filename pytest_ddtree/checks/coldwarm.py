"""The same answer cold, warm and batched: a prefix cache or a batch must change nothing.

At temperature 0 one fresh prompt is sent three ways:

- **cold**: with a unique first line (``with_nonce``: a session line the server's prefix
  cache has never seen; it does not change what is asked), so the server prefills it all;
- **warm**: the very same request again, which a prefix cache serves from its blocks;
- **batched**: the same request once more, sent while ``C - 1`` other requests (other
  prompts, longer answers) are streaming, so the server decodes it in a batch
  (``send_batched``: the others have begun streaming before it is sent, and are cut once
  its answer is complete; the evidence says how many were streaming throughout).

The three answers must be equal. A difference is classified as losslessness is: the
first divergence (``lossless.first_divergence``), the target's margin there
(``lossless.with_margins``; read from the side the probe follows, whichever answer that
is), and the ``--ddtree-lossless`` mode (a near-tie is numerics, a warning in ``near-tie``
mode). Only answers that arrived whole are compared; a difference that lies only past the
end of an answer cut by ``max_tokens``, or a batched answer no other request was decoded
beside, is ``not-comparable`` with the reason, never a verdict.

No pytest here.
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_ddtree.checks.blame import NOT_WHOLE_ADVICE, Diagnosis
from pytest_ddtree.checks.comparable import (
    NOT_COMPARABLE,
    kind_name,
    not_whole_advice,
    why_not_whole,
)
from pytest_ddtree.checks.lossless import (
    Divergence,
    LosslessResult,
    Unjudged,
    compare_lossless,
    margin_reason,
    not_comparable_diagnosis,
    with_margins,
)
from pytest_ddtree.checks.margin import probe_fields
from pytest_ddtree.core.settings import Lossless, Timeout
from pytest_ddtree.core.violation import Violation
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.completion import Completion, ErrorKind, summarize_text
from pytest_ddtree.wire.protocol import Messages, classify_transport
from pytest_ddtree.wire.tokens import TokenCounter

#: The stable violation code of a real difference between the three answers.
COLD_WARM_BATCHED = "cold-warm-batched"

#: The answers compared with the cold one, keyed as ``LosslessResult`` keys its outputs.
WARM, BATCHED = 1, 2
LABELS: dict[int | None, str] = {WARM: "warm", BATCHED: "batched"}

#: What the other requests of the batch ask (long answers, so they outlast the measured one).
OTHER_PROMPTS: tuple[str, ...] = (
    "Write a long essay about rivers and the valleys they shape.",
    "Explain in detail how a computer network handles a request.",
    "Write a detailed article about bees and their hives.",
    "Describe at length how bread is baked in a small kitchen.",
    "Write a long story about a train crossing the mountains.",
    "Explain in detail how the weather changes along the coast.",
)

#: Seconds to wait for the other requests to begin streaming before the measured one goes.
START_WAIT = 60.0

NOT_BATCHED_ADVICE = (
    "no other request was decoded beside the batched one, so it says nothing about batching: "
    "give the server room for the concurrency (llama.cpp: --parallel at least C; vLLM: "
    "--max-num-seqs) or lower it (concurrency=...), then run again"
)
BATCH_FAILED_ADVICE = (
    "other requests of the batch failed ({first}): the server fails requests under "
    "concurrency; its log says why, and a batch can be compared once they succeed"
)
CUT_ADVICE = (
    "an answer cut by max_tokens says nothing about the text past its end: raise max_tokens "
    "so the answers end by themselves, or compare a prompt with a shorter answer"
)
SPECULATION_CWB_ADVICE = (
    "the target-only baseline gives one answer cold, warm and batched: the speculative-"
    "decoding layer (its drafter's cache after a cold prefill, or verification in a batch) "
    "is at fault"
)
SERVER_CWB_ADVICE = (
    "the target-only baseline also changes its answer cold, warm or batched: the serving "
    "stack (prefix caching, batched kernels) is at fault; speculation is not the cause"
)
NO_BASELINE_CWB_ADVICE = (
    "the server's answer depends on its cache or its batch where the target was sure: look "
    "at prefix caching and at decoding in a batch (with and without speculation); give "
    "--ddtree-baseline-endpoint to tell which layer"
)
NEAR_TIE_CWB_ADVICE = (
    "every difference is at a numerical near-tie of the target (its top two tokens within "
    "{margin:g} nats): a cached prefill or a batch computes the logits in another order and "
    "can flip such a tie, which engines do not promise to avoid (batch invariance); "
    "--ddtree-lossless near-tie tolerates it"
)


def with_nonce(messages: Messages, nonce: str) -> Messages:
    """``messages`` opened by a line naming ``nonce``, which does not change what is asked.

    A plain prompt gains a first line; chat messages gain it at the start of their system
    message, or a system message holding only it.
    """
    line = f"Session {nonce}."
    if isinstance(messages, str):
        return f"{line}\n\n{messages}"
    msgs = [dict(m) for m in messages]
    if msgs and msgs[0].get("role") == "system":
        content = msgs[0].get("content")
        if isinstance(content, str):
            msgs[0]["content"] = f"{line}\n\n{content}"
        elif isinstance(content, list):
            msgs[0]["content"] = [{"type": "text", "text": f"{line}\n\n"}, *content]
        else:
            msgs[0]["content"] = line
        return msgs
    return [{"role": "system", "content": line}, *msgs]


def new_nonce() -> str:
    """A session line's nonce no cache has seen (48 random bits)."""
    return secrets.token_hex(6)


@dataclass
class _Other:
    """One other request of the batch: when it began streaming and when its stream ended
    (finished, failed, or cut once the measured answer was complete)."""

    label: str
    started: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    streaming_at: float | None = None
    #: when each event arrived (stamped before the stop is read: the events after the
    #: measured answer are left out by their time, not by the stop's)
    event_times: list[float] = field(default_factory=list)
    ended_at: float | None = None
    error: str | None = None
    #: it timed out on the client's limit before any event: it waited in the server's queue
    #: (a one-slot server decodes the others first), which is no failure of the server; one
    #: that the server had started (an event came) and then left silent is a failure
    waited: bool = False

    def run(
        self,
        http: Any,
        url: str,
        body: Mapping[str, Any],
        headers: Mapping[str, str],
        timeout: Timeout,
    ) -> None:
        try:
            with http.stream("POST", url, json=dict(body), headers=dict(headers)) as resp:
                if not 200 <= resp.status_code < 300:
                    self.error = f"HTTP {resp.status_code}"
                    return
                events = 0
                for line in resp.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    if line[5:].strip() == "[DONE]":
                        return
                    events += 1
                    self.event_times.append(time.perf_counter())
                    # the first event may carry the role alone: the second is decoded text
                    if events == 2:
                        self.streaming_at = time.perf_counter()
                        self.started.set()
                    if self.stop.is_set():
                        return  # leaving the block closes the stream: the server aborts it
        except Exception as exc:  # the others are load, not judged: their trouble is noted
            # no total deadline bounds these streams: only the read timeout can have ended one
            message, kind = classify_transport(exc, replace(timeout, total=math.inf))
            self.waited = kind == ErrorKind.READ_TIMEOUT and not self.event_times
            self.error = summarize_text(message, 100)
        finally:
            self.ended_at = time.perf_counter()
            self.started.set()


@dataclass(frozen=True)
class Batch:
    """What the other requests did around the batched one.

    ``streaming_before``: they had begun streaming before it was sent; ``throughout``: of
    those, still streaming when its answer was complete (decoded beside it all along);
    ``served_late``: of those, still streaming when its answer ended and with an event in
    the last quarter of its wait (at least the last half second) before then: the server went on
    decoding them up to the moment the client gave up on it. ``waited``: others that timed
    out in the server's queue before any event (not among ``errors``).
    """

    others: int
    streaming_before: int
    throughout: int
    errors: tuple[str, ...] = ()
    served_late: int = 0
    waited: int = 0

    @property
    def batched(self) -> bool:
        """True when at least one other request was decoded beside it all along."""
        return self.throughout > 0

    def describe(self) -> str:
        """One line for the evidence."""
        errors = f"; {len(self.errors)} failed ({self.errors[0]})" if self.errors else ""
        waited = (
            f"; {self.waited} queued past the client's read timeout before any event"
            if self.waited
            else ""
        )
        return (
            f"{self.others} other request(s): {self.streaming_before} streaming before it was "
            f"sent, {self.throughout} still streaming when its answer was complete{waited}{errors}"
        )


#: batched attempts before a batched answer no other request overlapped is not comparable
BATCH_ATTEMPTS = 3


def served_late(event_times: Sequence[float], sent: float, done: float) -> bool:
    """Whether an other request was served up to the end of the measured one's wait (sent at
    ``sent``, complete or given up at ``done``): an event in the last quarter of the wait, or
    its last half second when that is longer, both ends included; none is counted past its
    end (the others are cut only after it)."""
    recent = done - max(0.5, (done - sent) / 4)
    return any(recent <= t <= done for t in event_times)


def send_batched(
    client: DDTreeClient,
    prompt: Messages,
    others: Sequence[Messages],
    *,
    other_max_tokens: int,
    tree_budget: int | None = None,
    wait: float = START_WAIT,
    **kw: Any,
) -> tuple[Completion, Batch]:
    """Send ``prompt`` (``kw``: the request's fields) while ``others`` stream beside it.

    The others (temperature 0, ``other_max_tokens`` each) are started first; once each has
    begun streaming (or ``wait`` seconds passed) the measured request is sent, and once its
    answer is complete the others are cut.
    """
    threads: list[tuple[_Other, threading.Thread]] = []
    for i, other in enumerate(others):
        spec = client.config.request(
            other,
            api=client.api,
            max_tokens=other_max_tokens,
            tree_budget=tree_budget,
            stream=True,
        )
        item = _Other(f"other {i + 1}")
        thread = threading.Thread(
            target=item.run,
            args=(client.http, spec.url, spec.body, spec.headers, client.config.timeout),
            name=f"ddtree-batch-{i + 1}",
            daemon=True,
        )
        thread.start()
        threads.append((item, thread))
    deadline = time.perf_counter() + wait
    for item, _ in threads:
        item.started.wait(max(0.0, deadline - time.perf_counter()))
    try:
        measured = client.request(prompt, tree_budget=tree_budget, **kw)
    finally:
        for item, _ in threads:
            item.stop.set()
        for _, thread in threads:
            thread.join(timeout=wait)
    sent, done = measured.timings.sent, measured.timings.done
    before = [o for o, _ in threads if o.streaming_at is not None and o.streaming_at <= sent]
    throughout = [o for o in before if o.ended_at is None or o.ended_at >= done]
    late = [o for o in throughout if served_late(o.event_times, sent, done)]
    # an other that timed out in the server's queue before its first token is no failure
    errors = tuple(f"{o.label}: {o.error}" for o, _ in threads if o.error and not o.waited)
    waited = sum(1 for o, _ in threads if o.waited)
    batch = Batch(len(threads), len(before), len(throughout), errors, len(late), waited)
    return measured, batch


@dataclass(frozen=True)
class ColdWarmBatched:
    """The three answers and their comparison.

    ``comparison`` holds the warm (``WARM``) and batched (``BATCHED``) answers compared with
    the cold one (its ``reference``); its ``divergences`` are the real differences, its
    ``near_ties`` the ones ``near-tie`` mode tolerates and its ``not_comparable`` the
    answers set aside (with the cold answer's own trouble under the key of each).
    """

    nonce: str
    cold: Completion
    warm: Completion
    batched: Completion
    batch: Batch
    comparison: LosslessResult

    @property
    def ok(self) -> bool:
        """True when all three were compared and agree (within the mode)."""
        return self.comparison.ok

    @property
    def queued(self) -> bool:
        """True when the batched request waited in the server's queue until the client gave
        up (see ``_queued``): it has no answer to check, only a reason it was not compared."""
        return _queued(self.batched, self.batch)

    def not_batched(self) -> str | None:
        """Why the batched answer was not compared, when that is all that was left out: no
        other request was decoded beside it (a one-slot server, a short concurrency) and the
        warm answer was compared. Nothing is wrong with any answer then; the batch was not
        made. None otherwise."""
        result = self.comparison
        unjudged = result.not_comparable.get(BATCHED)
        if result.divergences or set(result.not_comparable) != {BATCHED} or unjudged is None:
            return None
        if self.batch.errors:
            # the others failed beside it: a server that breaks under concurrency is what
            # the test is for, so that stays a failure
            return None
        return unjudged.reason if unjudged.advice == NOT_BATCHED_ADVICE else None

    def answer(self, key: int) -> Completion:
        """The warm or the batched answer."""
        return self.warm if key == WARM else self.batched


def _cut_short(reference: Completion, answer: Completion, label: str) -> Unjudged | None:
    """Why a difference past the end of an answer cut by ``max_tokens`` is not judged."""
    a, b = reference.text, answer.text
    if a == b:
        return None
    shorter, name = (a, "cold") if len(a) < len(b) else (b, label)
    cut = reference if shorter is a else answer
    longer = b if shorter is a else a
    if cut.finish_reason == "length" and longer.startswith(shorter):
        tokens = cut.completion_tokens
        at = f" at {tokens} tokens" if tokens is not None else ""
        return Unjudged(
            f"the {name} answer was cut by max_tokens{at} where the other goes on: the two "
            "agree up to its end, and nothing past it can be compared",
            CUT_ADVICE,
        )
    return None


def _batch_advice(batch: Batch) -> str:
    """What to do when the batch was not made: room for it, or, when other requests of it
    failed, the server's failures under concurrency first."""
    if batch.errors:
        return BATCH_FAILED_ADVICE.format(first=batch.errors[0])
    return NOT_BATCHED_ADVICE


def _queued(answer: Completion, batch: Batch) -> bool:
    """True when the batched request waited in the server's queue until the client gave up:
    it timed out before any event of its own while another request was still being decoded
    up to then (a server with fewer slots than C serves the others first). Its answer was
    never decoded beside them. A server that froze when it came, or left it waiting once the
    others had ended, served nothing near the end of the wait, and is no such case."""
    waited = answer.error_kind in (ErrorKind.READ_TIMEOUT, ErrorKind.DEADLINE)
    silent = answer.stream is None or answer.stream.events == 0  # no role, text or tool call
    return waited and silent and batch.served_late > 0


def _unjudged(cold: Completion, answer: Completion, label: str, batch: Batch) -> Unjudged | None:
    """Why ``answer`` (warm or batched) cannot be compared with the cold one, or None."""
    why = why_not_whole(cold)
    if why is not None:
        advice = not_whole_advice(cold, default=NOT_WHOLE_ADVICE)
        return Unjudged(f"the cold answer did not arrive whole ({why})", advice)
    if label == LABELS[BATCHED] and _queued(answer, batch):
        return Unjudged(
            f"the server queued the batched request: no event of it came before the client's "
            f"{kind_name(answer.error_kind)} while {batch.served_late} other request(s) went on "
            f"streaming ({batch.describe()})",
            _batch_advice(batch),
        )
    why = why_not_whole(answer)
    if why is not None:
        advice = not_whole_advice(answer, default=NOT_WHOLE_ADVICE)
        return Unjudged(f"the {label} answer did not arrive whole ({why})", advice)
    if label == LABELS[BATCHED] and not batch.batched:
        return Unjudged(
            f"no other request was decoded beside the batched one ({batch.describe()})",
            _batch_advice(batch),
        )
    return _cut_short(cold, answer, label)


def judge_cold_warm_batched(
    nonce: str,
    cold: Completion,
    warm: Completion,
    batched: Completion,
    batch: Batch,
    mode: Lossless,
    *,
    counter: TokenCounter | None = None,
    probe: Callable[[], Completion] | Sequence[Callable[[], Completion]] | None = None,
) -> ColdWarmBatched:
    """Compare the warm and the batched answer with the cold one (see the module).

    ``probe`` asks for the answer once more with log-probabilities (the target-only
    baseline's, or the server's own) to read the target's margin at a divergence; it is
    called at most once, and only when an answer differs.
    """
    answers: dict[int | None, Completion] = {WARM: warm, BATCHED: batched}
    unjudged: dict[int | None, Unjudged] = {}
    for key, comp in answers.items():
        why = _unjudged(cold, comp, LABELS[key], batch)
        if why is not None:
            unjudged[key] = why
    compared: dict[int | None, Completion] = {k: c for k, c in answers.items() if k not in unjudged}
    result = compare_lossless(cold, compared, mode, counter=counter, reference_label="cold answer")
    result = replace(result, outputs=dict(answers), not_comparable=unjudged)
    if result.divergences and probe is not None:
        probes = [_once(p) for p in ([probe] if callable(probe) else probe)]
        if probes:
            result = _with_margins(result, _usable(probes, result), mode, counter)
    return ColdWarmBatched(nonce, cold, warm, batched, batch, result)


def _once(probe: Callable[[], Completion]) -> Callable[[], Completion]:
    """``probe``, asked at most once (a failure is raised again on each call)."""
    box: list[Completion] = []

    def call() -> Completion:
        if not box:
            box.append(probe())
        return box[0]

    return call


def _usable(
    probes: Sequence[Callable[[], Completion]], result: LosslessResult
) -> Callable[[], Completion]:
    """The first probe whose answer follows, through every divergence, one of the two
    answers compared there (else the first: its margin is unknown, with the reason)."""
    for probe in probes:
        try:
            probed = probe()
        except Exception:
            continue
        if all(
            _follows(probed, result.reference.text, div)
            or _follows(probed, result.outputs[key].text, div)
            for key, div in result.divergences.items()
        ):
            return probe
    return probes[0]


def _follows(probed: Completion, text: str, div: Divergence) -> bool:
    """True when the probe's answer spells ``text`` through the divergence."""
    end = div.char_offset + 1
    return probed.text[:end] == text[:end]


def _with_margins(
    result: LosslessResult, probe: Callable[[], Completion], mode: Lossless, counter: Any
) -> LosslessResult:
    """``result`` with the target's margin at each divergence, read on the side the probe
    follows: the margin sits on the answer the target itself would give."""
    marked = with_margins(result, probe)
    try:
        probed: Completion | None = probe()
    except Exception:
        probed = None
    divergences = dict(marked.divergences)
    near = dict(marked.near_ties)
    for key, div in marked.divergences.items():
        answer = result.outputs[key]
        if probed is None or div.margin is None or div.margin.kind != "unknown":
            continue
        if not _follows(probed, answer.text, div) or _follows(probed, result.reference.text, div):
            continue
        # the probe follows this answer, not the cold one: read the margin from its side
        swapped = compare_lossless(
            answer, {key: result.reference}, mode, counter=counter, reference_label="cold answer"
        )
        if key not in swapped.divergences:
            continue
        other = with_margins(swapped, probe)
        found = other.divergences.get(key) or other.near_ties.get(key)
        if found is None:
            continue
        del divergences[key]
        if key in other.near_ties:
            near[key] = replace(div, margin=found.margin)
        else:
            divergences[key] = replace(div, margin=found.margin)
    return replace(marked, divergences=divergences, near_ties=near)


def run_cold_warm_batched(
    client: DDTreeClient,
    prompt: Messages,
    mode: Lossless,
    *,
    concurrency: int,
    max_tokens: int,
    counter: TokenCounter | None = None,
    probe_client: DDTreeClient | None = None,
    others: Sequence[Messages] = OTHER_PROMPTS,
    tree_budget: int | None = None,
    prompt_id: str | None = None,
    nonce: str | None = None,
    **extra: Any,
) -> ColdWarmBatched:
    """Send ``prompt`` cold, warm and batched at temperature 0 and compare the answers.

    ``concurrency`` C: the batched request goes while C - 1 of ``others`` (cycled) stream,
    each asking four times ``max_tokens``. ``probe_client`` (the target-only baseline, when
    there is one) answers the probe for the margin; the server itself does when it has none,
    or when the baseline's own answer parts from both answers before their divergence.
    """
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 2:
        raise ValueError(f"concurrency {concurrency!r}: must be an integer >= 2")
    if not others:
        raise ValueError("others: no other prompt to batch the request with")
    nonce = nonce or new_nonce()
    fresh = with_nonce(prompt, nonce)
    kw: dict[str, Any] = {
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "prompt_id": prompt_id,
        **extra,
    }
    cold = client.request(fresh, tree_budget=tree_budget, **kw)
    warm = client.request(fresh, tree_budget=tree_budget, **kw)
    rest = [others[i % len(others)] for i in range(concurrency - 1)]
    # a fast server can finish the others before the measured answer: that attempt says
    # nothing about batching (the client's timing, not the server's fault), so it is sent
    # again, a bounded number of times, before the batched answer is called not comparable
    for _ in range(BATCH_ATTEMPTS):
        batched, batch = send_batched(
            client, fresh, rest, other_max_tokens=4 * max_tokens, tree_budget=tree_budget, **kw
        )
        if batch.batched:
            break
    fields = {**kw, **probe_fields(client.api), "stream": False}

    def own() -> Completion:
        return client.request(fresh, tree_budget=tree_budget, **fields)

    probes: list[Callable[[], Completion]] = [own]
    if probe_client is not None and probe_client is not client:
        baseline = probe_client

        def target() -> Completion:
            return baseline.request(fresh, **fields)

        probes.insert(0, target)
    return judge_cold_warm_batched(
        nonce, cold, warm, batched, batch, mode, counter=counter, probe=probes
    )


# ---------------------------------------------------------------- the report


def _where(div: Divergence) -> str:
    return div.where()


def cold_warm_batched_violations(found: ColdWarmBatched) -> list[Violation]:
    """``not-comparable`` per answer set aside, ``cold-warm-batched`` per real difference."""
    out: list[Violation] = []
    result = found.comparison
    for key, why in result.not_comparable.items():
        assert key is not None
        out.append(
            Violation(
                NOT_COMPARABLE,
                f"the {LABELS[key]} answer not compared with the cold one: {why.reason}",
                {"session line": found.nonce},
                found.answer(key).request.describe(),
            )
        )
    for key, div in result.divergences.items():
        assert key is not None
        margin = f": {div.margin.sentence(position=False)}" if div.margin is not None else ""
        evidence: dict[str, Any] = {
            "cold": div.reference_excerpt,
            LABELS[key]: div.actual_excerpt,
            **(div.margin.evidence() if div.margin is not None else {}),
            "session line": found.nonce,
            "lossless mode": str(result.mode),
        }
        if key == BATCHED:
            evidence["batch"] = found.batch.describe()
        out.append(
            Violation(
                COLD_WARM_BATCHED,
                f"the {LABELS[key]} answer differs from the cold answer at {_where(div)}{margin}",
                evidence,
                found.answer(key).request.describe(),
            )
        )
    return out


def near_tie_warnings(found: ColdWarmBatched) -> list[str]:
    """One warning per difference ``near-tie`` mode tolerates."""
    return [
        f"pytest-ddtree: the {LABELS[key]} answer differs from the cold answer at "
        f"{div.where()}: {div.margin.sentence(position=False) if div.margin else ''}; "
        f"tolerated by --ddtree-lossless {found.comparison.mode} "
        f"(cold {div.reference_excerpt}, {LABELS[key]} {div.actual_excerpt})"
        for key, div in found.comparison.near_ties.items()
        if key is not None
    ]


def cold_warm_batched_header(found: ColdWarmBatched) -> str:
    """The first line of a failed cold/warm/batched test."""
    result = found.comparison
    if not result.divergences:
        names = " and ".join(LABELS[k] for k in result.not_comparable if k is not None)
        return (
            f"not comparable: the {names} answer(s) could not be compared with the cold one; "
            "no verdict on cold, warm and batched answers"
        )
    lead = "not the same answer cold, warm and batched at temperature 0"
    if len(result.divergences) == 2 and found.warm.text == found.batched.text:
        return f"{lead}: the cold answer differs from the warm and the batched one (which agree)"
    names = " and ".join(LABELS[k] for k in result.divergences if k is not None)
    return f"{lead}: the {names} answer differs from the cold one"


def is_near_tie_only(found: ColdWarmBatched) -> bool:
    """True when every difference lies at a numerical near-tie (``exact`` mode fails them)."""
    margins = [d.margin for d in found.comparison.divergences.values()]
    return bool(margins) and all(m is not None and m.kind == "near-tie" for m in margins)


def diagnose_cold_warm_batched(
    found: ColdWarmBatched, baseline: ColdWarmBatched | None
) -> Diagnosis:
    """Which layer changes the answer: the baseline's own cold/warm/batched run decides."""
    result = found.comparison
    if not result.divergences:
        named = [
            Unjudged(f"the {LABELS[k]} answer: {why.reason}", why.advice)
            for k, why in result.not_comparable.items()
            if k is not None
        ]
        return not_comparable_diagnosis(named)
    key = next(iter(result.divergences))
    reason = margin_reason(result, key).replace(
        "the output differs", f"the {LABELS[key]} answer differs", 1
    )
    if is_near_tie_only(found):
        advice = NEAR_TIE_CWB_ADVICE.format(margin=result.mode.near_tie)
        return Diagnosis("undetermined", f"numerical near-tie: {reason}", advice)
    if baseline is None:
        return Diagnosis("undetermined", reason, NO_BASELINE_CWB_ADVICE)
    theirs = baseline.comparison
    if theirs.divergences:
        what = ", ".join(LABELS[k] for k in theirs.divergences if k is not None)
        return Diagnosis(
            "server",
            f"{reason}; the target-only baseline's {what} answer differs too",
            SERVER_CWB_ADVICE,
        )
    if theirs.not_comparable:
        first = next(iter(theirs.not_comparable.values()))
        return Diagnosis(
            "undetermined",
            f"{reason}; the target-only baseline's run could not be compared ({first.reason})",
            first.advice,
        )
    return Diagnosis(
        "speculation",
        f"{reason}; the target-only baseline gives one answer cold, warm and batched",
        SPECULATION_CWB_ADVICE,
    )
