"""Per-call state shared by the checks: the completion, the expectation, and
token counts computed at most once."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pytest_ddtree.core.dialects import stop_field_owner
from pytest_ddtree.core.expectation import (
    DEFAULT_MIN_TOKENS,
    DEFAULT_ROLE_MARKERS,
    DEFAULT_SPECIAL_TOKENS,
    Expectation,
)
from pytest_ddtree.core.violation import Violation, Withheld
from pytest_ddtree.wire.completion import MAX_CHARS_PER_TOKEN, Completion
from pytest_ddtree.wire.tokens import ApproxCounter, TokenCounter

_UNSET: Any = object()

#: ``stop_kind`` evidence values: what the stop that ended an answer was
STOP_TEMPLATE = "template-token"  # a chat-template or role token from the stop list
STOP_EOS = "end-of-sequence"  # the model's own end-of-sequence: it chose to stop
STOP_TOKEN = "stop-token"  # another stop token id
STOP_STRING = "stop-string"  # a stop string of the request


def flat(text: str) -> str:
    """``text`` on one line: newlines, carriage returns and tabs made visible."""
    return text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")


def excerpt(text: str, start: int, end: int, width: int = 40) -> str:
    """The match ``text[start:end]`` marked as »match« with ``width`` characters
    of context either side, on one line."""
    lo = max(0, start - width)
    hi = min(len(text), end + width)
    pre = "…" if lo > 0 else ""
    post = "…" if hi < len(text) else ""
    return f"{pre}{flat(text[lo:start])}»{flat(text[start:end])}«{flat(text[end:hi])}{post}"


def clip(text: str, limit: int = 160) -> str:
    """One-line excerpt of ``text``, at most ``limit`` characters."""
    one = flat(text)
    return one if len(one) <= limit else one[: limit - 1] + "…"


def as_int(value: object) -> int | None:
    """``value`` when it is a real integer (not a bool), else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def as_float(value: object) -> float | None:
    """``value`` as a finite float when it is a number (not a bool), else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        f = float(value)
        return f if math.isfinite(f) else None
    return None


#: The relative slack of an exact local count of a sampled answer (temperature above 0)
#: against the tokens the server generated (see :meth:`Context.drift`).
SAMPLED_DRIFT = 0.1


class Context:
    """One ``check`` call: inputs normalised so no check has to distrust types."""

    def __init__(
        self, completion: Completion, expectation: Expectation, counter: TokenCounter | None
    ) -> None:
        self.completion = completion
        self.expect = expectation
        self.counter = counter
        text = completion.text
        self.text: str = text if isinstance(text, str) else ""
        reasoning = completion.reasoning_text
        self.reasoning: str = reasoning if isinstance(reasoning, str) else ""
        finish = completion.finish_reason
        self.finish: str | None = finish if isinstance(finish, str) else None
        try:
            self.request = completion.request.describe()
        except Exception:  # a malformed request must not hide the other findings
            self.request = repr(completion.request)
        req_max = as_int(getattr(completion.request, "max_tokens", None))
        self.max_tokens: int | None = (
            expectation.max_tokens if expectation.max_tokens is not None else req_max
        )
        usage = completion.usage
        self.reported: int | None = as_int(usage.completion_tokens) if usage is not None else None
        #: the answer's tool calls: their tokens are not in the text, so no local count of
        #: the text stands for the answer (``local_total`` is None)
        self.tool_calls: tuple[Any, ...] = tuple(getattr(completion, "tool_calls", ()) or ())
        self._content_count: Any = _UNSET
        self._local_total: Any = _UNSET
        self._content_ids: Any = _UNSET
        #: checks not judged, and why (``withhold``)
        self.withheld: list[Withheld] = []

    def withhold(self, code: str, reason: str, *, client_stalled: bool = False) -> None:
        """Record that the check ``code`` was not judged, and why (never a verdict);
        ``client_stalled``: because the client itself stalled (see ``Withheld``)."""
        self.withheld.append(Withheld(code, flat(reason), client_stalled))

    def violation(self, code: str, message: str, **evidence: Any) -> Violation:
        """A Violation of ``code`` carrying this call's request description
        (evidence entries that are None are left out)."""
        kept = {k: v for k, v in evidence.items() if v is not None}
        return Violation(code=code, message=flat(message), evidence=kept, request=self.request)

    @property
    def offers_tools(self) -> bool:
        """Whether the request offered tools (a non-empty ``tools`` list in its body)."""
        body = getattr(self.completion.request, "body", None)
        tools = body.get("tools") if isinstance(body, Mapping) else None
        return isinstance(tools, list) and bool(tools)

    @property
    def count_exact(self) -> bool:
        """Whether local counts come from a real tokenizer (not an approximation).

        Without a counter the completion's ``local_count_source`` (the counter
        the client used) decides.
        """
        if self.counter is not None:
            return bool(self.counter.exact)
        source = getattr(self.completion, "local_count_source", "none")
        return isinstance(source, str) and (
            source.startswith("tokenizer") or source.startswith("server")
        )

    @property
    def count_source(self) -> str:
        """Where local counts come from, for evidence."""
        if self.counter is not None:
            return str(self.counter.source)
        return str(getattr(self.completion, "local_count_source", "none"))

    def _count(self, text: str) -> int | None:
        if self.counter is None:
            return None
        if not text:
            return 0
        if self.max_tokens is not None and len(text) > self.max_tokens * MAX_CHARS_PER_TOKEN:
            return None  # an overrun by length alone; not worth megabytes to a /tokenize
        try:
            n = self.counter.count(text)
        except Exception:  # an unreachable /tokenize must not turn into a test error
            return None
        return as_int(n)

    def exact_count(self, text: str) -> int | None:
        """Tokens of ``text`` by an exact counter, or None (none, or one that failed)."""
        return self._count(text) if self.counter is not None and self.counter.exact else None

    def count_text(self, text: str) -> int:
        """Tokens of a short ``text`` (a stop string): the counter's count, else its UTF-8
        bytes, which no byte-level tokenizer exceeds (an upper bound, never a false alarm)."""
        n = self.exact_count(text)
        return n if n is not None else len(text.encode("utf-8"))

    def content_ids(self) -> list[int] | None:
        """Token ids of the content from an exact counter, or None: no counter, one
        that only counts, one that failed, or text too long to be worth encoding."""
        if self._content_ids is _UNSET:
            ids: list[int] | None = None
            counter = self.counter
            text = self.text
            too_long = self.max_tokens is not None and len(text) > (
                self.max_tokens * MAX_CHARS_PER_TOKEN
            )
            if counter is not None and counter.exact and text and not too_long:
                try:
                    got = counter.encode(text)
                except Exception:  # an unreachable /tokenize: the checks fall back
                    got = None
                if isinstance(got, list) and got:  # token_loop rejects what is not ids
                    ids = got
            self._content_ids = ids
        result: list[int] | None = self._content_ids
        return result

    def local_total(self) -> int | None:
        """Local count of content plus reasoning text, or None when unavailable."""
        if self._local_total is _UNSET:
            total: int | None = None
            if self.tool_calls:
                self._local_total = None  # the calls' tokens are not in the text
                return None
            if self.counter is not None:
                a = self._count(self.text)
                b = self._count(self.reasoning)
                total = None if a is None or b is None else a + b
            if total is None:
                total = as_int(self.completion.local_completion_tokens)
            self._local_total = total
        result: int | None = self._local_total
        return result

    def content_count(self) -> tuple[int, str]:
        """Tokens in the content alone (no reasoning) and where the figure came from."""
        if self._content_count is _UNSET:
            n: int | None = self._count(self.text) if self.counter is not None else None
            source = self.count_source
            if n is None and not self.reasoning.strip():
                n = as_int(self.completion.local_completion_tokens)
                source = str(getattr(self.completion, "local_count_source", "none"))
                if n is None:
                    n, source = self.reported, "usage.completion_tokens"
            if n is None:
                approx = ApproxCounter()
                n, source = approx.count(self.text), approx.source
            self._content_count = (n, source)
        result: tuple[int, str] = self._content_count
        return result

    def drift(self, n: int) -> float:
        """How far an exact local count of the text may be from the tokens generated.

        Re-tokenizing the text gives back the generated tokens when they are the text's own
        tokenization, which a greedy answer almost always is: a few tokens of slack
        (``usage_tolerance_abs`` + ``usage_tolerance``). A sampled answer need not be: the
        sampler may pick a split the tokenizer would not make, or bytes that decode to a
        replacement character, and real servers' sampled answers of 96 tokens re-tokenize
        to 92 or 100. Above temperature 0 the relative slack is ``SAMPLED_DRIFT`` at least.
        """
        e = self.expect
        relative = max(e.usage_tolerance, SAMPLED_DRIFT) if self.sampled else e.usage_tolerance
        return e.usage_tolerance_abs + relative * n

    @property
    def sampled(self) -> bool:
        """Whether the answer was sampled (asked for above temperature 0)."""
        temperature = getattr(self.completion.request, "temperature", 0.0)
        return isinstance(temperature, (int, float)) and temperature > 0

    def tokens_for_limits(self) -> tuple[int | None, int]:
        """Completion tokens to compare with ``max_tokens`` and the slack to allow.

        The server's own count is exact (slack 0); a local exact count of decoded
        text may drift by a few tokens, and a sampled answer's by more (:meth:`drift`);
        an approximation is not used at all.
        """
        if self.reported is not None:
            return self.reported, 0
        if self.count_exact:
            return self.local_total(), self.local_slack()
        return None, 0

    def local_slack(self) -> int:
        """The slack of an exact local count against ``max_tokens``: a greedy answer's own
        tokens come back (a few tokens), a sampled one's may not (:meth:`drift`)."""
        limit = self.max_tokens
        if self.sampled and limit is not None:
            return int(self.drift(limit))
        return int(self.expect.usage_tolerance_abs)

    def stop_evidence(self, *, trust_null: bool = True) -> dict[str, Any]:
        """``stop`` (which stop ended the answer, by the server's own field, with the
        token's text when the counter can decode it) and ``stop_kind``; empty when
        the server does not say or the answer ended at its length limit.

        A null vLLM ``stop_reason`` means the model's own end-of-sequence, or the
        length limit: ``trust_null`` False (a finish reason in doubt) names the field
        without reading it as either."""
        c = self.completion
        stop = getattr(c, "stop_reason", None)
        where = getattr(c, "stop_field", None)
        if where is None or self.finish != "stop":
            return {}
        if isinstance(stop, str):
            return {"stop": f"stop string {stop[:60]!r} ({where})", "stop_kind": STOP_STRING}
        token = as_int(stop)
        if token is None:
            if not trust_null:
                return {"stop": f"none named ({where} is null)"}
            owner = stop_field_owner(where)
            if owner is not None and owner.null_stop_is_eos:  # vLLM: the model's own end
                return {
                    "stop": f"the model's own end-of-sequence ({where} is null)",
                    "stop_kind": STOP_EOS,
                }
            return {}
        text = self.decode_token(token)
        shown = f"token {token}" + (f" {text!r}" if text is not None else "")
        return {"stop": f"{shown} ({where})", "stop_kind": self._stop_kind(text, where)}

    def decode_token(self, token_id: int) -> str | None:
        """The text of ``token_id`` when the counter can decode one, else None."""
        decode = getattr(self.counter, "decode_token", None)
        if decode is None:
            return None
        try:
            text = decode(token_id)
        except Exception:  # a counter that cannot decode: the id is shown alone
            return None
        return text if isinstance(text, str) else None

    def _stop_kind(self, text: str | None, where: str) -> str:
        if text is None:
            return STOP_TOKEN
        # vLLM reports null for the model's own end, so its id came from the stop list;
        # SGLang names every stop token, the end-of-sequence included
        owner = stop_field_owner(where)
        if owner is not None and owner.stop_names_eos and text == self.expect.eos_token:
            return STOP_EOS
        template = (*DEFAULT_ROLE_MARKERS, *DEFAULT_SPECIAL_TOKENS, *self.expect.role_markers)
        if text in template or text == self.expect.eos_token:
            return STOP_TEMPLATE
        specials = getattr(self.counter, "special_tokens", ()) or ()
        return STOP_TEMPLATE if text in tuple(specials) else STOP_TOKEN

    def min_tokens(self) -> int:
        """The early-stop threshold in force."""
        if self.expect.min_tokens is not None:
            return self.expect.min_tokens
        if self.max_tokens is not None:
            return min(DEFAULT_MIN_TOKENS, self.max_tokens)
        return DEFAULT_MIN_TOKENS
