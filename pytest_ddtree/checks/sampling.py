"""Sampling above temperature 0: request seeds, and whether the server honors them.

At a temperature above 0 every timed request carries a seed derived from
``--ddtree-sweep-seed``, the prompt and the round, never from the budget: the
same (prompt, round) is sampled with the same seed at every budget, so budgets
are compared on the same sampling, and each round samples anew.

Before the first timing at a temperature, :func:`check_sampling` asks a few
short questions to learn whether the server honors ``temperature`` and
``seed`` at all (a server that ignores either would have its timings averaged
into a table that claims what it did not measure). It never blames the server
for the client's trouble: when a probe request fails, the check draws no verdict.
No pytest here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pytest_ddtree.core.settings import temperature_label
from pytest_ddtree.core.violation import Violation
from pytest_ddtree.wire.completion import Completion

#: distinct seeds asked at the temperature (the first is asked again at the end)
PROBE_SEEDS = 4
#: tokens per probe answer: enough for sampled answers to part, short enough to be cheap
PROBE_TOKENS = 32
#: where a near-greedy temperature is asked again, to tell a peaked model from a deaf server
ESCALATION_TEMPERATURE = 1.0

#: Send one probe request: ``(seed or None, temperature) -> Completion``.
ProbeSend = Callable[[int | None, float], Completion]


def request_seed(base: int, prompt_id: str | None, round_no: int | str) -> int:
    """The seed of one request above temperature 0: the same for the same prompt and round
    at every budget, different from round to round (31 bits: every server takes it)."""
    text = f"ddtree-seed:{base}:{prompt_id or ''}:{round_no}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=4).digest(), "big") & 0x7FFFFFFF


@dataclass(frozen=True)
class SamplingCheck:
    """What the probe at one temperature found.

    ``temperature_honored``/``seed_honored`` are None when the probe could not tell
    (a request failed: ``problem`` says why; or the temperature was ignored, so the
    seed could not be judged).
    """

    temperature: float
    temperature_honored: bool | None
    seed_honored: bool | None
    detail: str = ""
    problem: str = ""

    def violations(self, skip: Sequence[str] = ()) -> list[Violation]:
        """``temperature-ignored`` or ``seed-ignored`` (none when honored, unknown or skipped)."""
        t = temperature_label(self.temperature)
        evidence = {"probe": self.detail} if self.detail else {}
        if self.temperature_honored is False and "temperature-ignored" not in skip:
            return [
                Violation(
                    "temperature-ignored",
                    f"the server ignores temperature: at temperature {t} requests with "
                    "distinct seeds all gave one answer, the temperature-0 one; timings "
                    f"at {t} would be greedy decoding's, so none is taken",
                    evidence,
                )
            ]
        if self.seed_honored is False and "seed-ignored" not in skip:
            return [
                Violation(
                    "seed-ignored",
                    f"the server ignores seed: at temperature {t} {self.detail_short}; "
                    "budgets would not be compared on the same sampling, so none is timed",
                    evidence,
                )
            ]
        return []

    @property
    def detail_short(self) -> str:
        """The seed finding in a few words (for the message)."""
        return self.detail.split(";", 1)[0]

    def line(self) -> str:
        """One line for the terminal and the report's notes."""
        t = temperature_label(self.temperature)
        if self.problem:
            return f"sampling check at temperature {t}: no verdict ({self.problem})"
        found = self.violations()
        if found:
            return f"temperature {t}: [{found[0].code}] {found[0].message}"
        return f"temperature {t}: the server honors temperature and seed ({self.detail})"


def _texts(answers: Sequence[Completion]) -> list[str] | str:
    """The answers' texts, or why there is no verdict (the first failed request)."""
    for c in answers:
        if c.error is not None:
            return f"a probe request failed: {c.error}"
    return [c.text for c in answers]


def check_sampling(send: ProbeSend, temperature: float, base_seed: int) -> SamplingCheck:
    """Probe the server at ``temperature`` (at most 11 short requests).

    ``PROBE_SEEDS`` distinct seeds, then the first seed again. Distinct seeds that
    part ways and a repeated seed that gives its answer again: both honored. A
    repeated seed with another answer is asked a third time: when that answer too
    is new, the seed is ignored. Distinct seeds with one answer: a low temperature
    can be that peaked on a healthy model, so below ``ESCALATION_TEMPERATURE`` the
    seeds are asked again there; still one answer, it is compared with the
    temperature-0 answer: the same, the temperature is ignored; another, the server
    samples with a seed of its own (the request's is ignored).
    """
    seeds = [request_seed(base_seed, "sampling-check", i) for i in range(PROBE_SEEDS)]
    first = _texts([send(s, temperature) for s in seeds])
    if isinstance(first, str):
        return SamplingCheck(temperature, None, None, problem=first)
    again = _texts([send(seeds[0], temperature)])
    if isinstance(again, str):
        return SamplingCheck(temperature, None, None, problem=again)
    same_seed = again[0] == first[0]
    seed_note = f"seed {seeds[0]} asked twice gave the same answer"
    if not same_seed:
        # numerics that part one repeat (a cached prefix, another kernel) are rare: a third
        # ask agrees with one of the two; a seed that never reaches the sampler agrees with none
        third = _texts([send(seeds[0], temperature)])
        if isinstance(third, str):
            return SamplingCheck(temperature, None, None, problem=third)
        same_seed = third[0] in (first[0], again[0])
        seed_note = (
            f"seed {seeds[0]} asked three times gave "
            f"{'two answers' if same_seed else 'three answers'}"
        )
    distinct = len(set(first))
    if distinct > 1:
        detail = f"{seed_note}; {distinct} answers to {PROBE_SEEDS} distinct seeds"
        return SamplingCheck(temperature, True, same_seed, detail)
    if temperature < ESCALATION_TEMPERATURE:
        # a low temperature can be that peaked on a healthy model: ask where it cannot be
        hot = _texts([send(s, ESCALATION_TEMPERATURE) for s in seeds])
        if isinstance(hot, str):
            return SamplingCheck(temperature, None, None, problem=hot)
        if len(set(hot)) > 1:
            detail = (
                f"{seed_note}; {PROBE_SEEDS} distinct seeds gave one answer at "
                f"{temperature_label(temperature)} but {len(set(hot))} answers at "
                f"{ESCALATION_TEMPERATURE:g}: a peaked model, not a deaf server"
            )
            return SamplingCheck(temperature, True, same_seed, detail)
    greedy = _texts([send(None, 0.0)])
    if isinstance(greedy, str):
        return SamplingCheck(temperature, None, None, problem=greedy)
    if greedy[0] != first[0]:
        # one answer whatever the seed, yet not the greedy one: sampled with a seed of its own
        detail = f"{PROBE_SEEDS} distinct seeds gave one answer, not the temperature-0 one"
        return SamplingCheck(temperature, True, False, detail)
    detail = f"{PROBE_SEEDS} distinct seeds all gave the temperature-0 answer"
    if temperature < ESCALATION_TEMPERATURE:
        detail += f", at {ESCALATION_TEMPERATURE:g} too"
    return SamplingCheck(temperature, False, None, detail)
