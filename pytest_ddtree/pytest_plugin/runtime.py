"""The per-session runtime: servers, clients, tokenizer and model, probed once.

``start_runtime`` turns resolved ``Settings`` into ready-to-use clients. It
starts the embedded reference server (and its target-only twin as baseline)
when no endpoint is configured, checks that the endpoint answers, that the
model exists and that the key is accepted, and fails with one
``EndpointError`` line otherwise. No pytest here.

``Settings`` stay what the user configured; what was discovered (the
endpoint actually served, the model, the baseline, the tokenizer, the
dialect) lives on the :class:`Runtime`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pytest_ddtree.core.settings import Settings
from pytest_ddtree.core.violation import Violation
from pytest_ddtree.wire.client import DDTreeClient, EndpointError, root_url
from pytest_ddtree.wire.protocol import EndpointConfig

if TYPE_CHECKING:
    from pytest_ddtree.checks.blame import Diagnosis
    from pytest_ddtree.checks.diagnose import Diagnoser
    from pytest_ddtree.wire import _net
    from pytest_ddtree.wire.completion import Completion
    from pytest_ddtree.wire.servermetrics import ServerMetricsLog
    from pytest_ddtree.wire.tokens import TokenCounter


@dataclass
class Runtime:
    """Everything a test needs to talk to the endpoint under test.

    ``settings`` is what the user configured (``endpoint`` None for the
    embedded server); ``endpoint``, ``baseline_endpoint``, ``embedded`` and
    ``model`` are what was found when the runtime started.
    """

    settings: Settings
    client: DDTreeClient
    model: str
    counter: TokenCounter
    endpoint: str
    baseline_endpoint: str | None = None
    embedded: bool = False
    baseline: DDTreeClient | None = None
    servers: list[Any] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    diagnoser: Diagnoser | None = None  # created on the first failure to diagnose
    #: the server's Prometheus counters (--ddtree-metrics-url), probed once at start
    server_metrics: ServerMetricsLog | None = None

    def diagnose(
        self,
        completion: Completion,
        violations: list[Violation],
        check: Callable[[Completion], list[Violation]],
    ) -> Diagnosis:
        """Replay a failing request on the baseline (bounded, cached): which layer is at fault."""
        if self.diagnoser is None:
            from pytest_ddtree.checks.diagnose import Diagnoser

            self.diagnoser = Diagnoser(
                self.baseline, near_tie=self.settings.lossless.near_tie, counter=self.counter
            )
        return self.diagnoser.diagnose(completion, violations, check)

    @property
    def tokenizer_source(self) -> str:
        """Where token counts come from, for the header and reports."""
        return self.counter.source

    @property
    def dialect(self) -> str:
        """The configured dialect, or the one detected from the first response."""
        return self.client.detected_dialect or self.settings.dialect

    def close(self) -> None:
        """Close the clients and stop any server this runtime started."""
        self.client.close()
        if self.baseline is not None:
            self.baseline.close()
        if self.server_metrics is not None:
            self.server_metrics.reader.close()
        for server in self.servers:
            # stopping must never mask the run's result
            with contextlib.suppress(Exception):
                server.stop()
        self.servers.clear()


def _make_client(
    settings: Settings, base_url: str, model: str | None, counter: Any
) -> DDTreeClient:
    return DDTreeClient(EndpointConfig.from_settings(settings, base_url, model), counter=counter)


def start_embedded(settings: Settings) -> tuple[Any, Any]:
    """Spawn the reference server and its target-only twin, in parallel."""
    from pytest_ddtree.reference import CostModel, spawn_reference_server

    common: dict[str, Any] = {
        "simulated_latency": settings.reference_latency,
        "cost": CostModel(slowdown=settings.reference_slowdown),
        "faults": tuple(settings.reference_faults),
    }
    main_only: dict[str, Any] = {"jitter": settings.reference_jitter}
    if settings.reference_slowdown_after is not None:
        main_only["slowdown_after"], main_only["slowdown_factor"] = (
            settings.reference_slowdown_after
        )
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        main = pool.submit(spawn_reference_server, **common, **main_only)
        twin = pool.submit(spawn_reference_server, target_only=True, **common)
        servers = []
        errors = []
        for fut in (main, twin):
            try:
                servers.append(fut.result())
            except Exception as exc:  # reported as one line below
                errors.append(exc)
    if errors:
        for server in servers:
            server.stop()
        raise EndpointError(f"the embedded reference server did not start: {errors[0]}")
    return servers[0], servers[1]


def _probe_scope(client: DDTreeClient) -> contextlib.AbstractContextManager[_net.Scope]:
    """The start-up probe bound: a /tokenize probe may not hang the run."""
    from pytest_ddtree.wire import _net

    t = client.timeout
    return _net.scope(min(t.total, t.connect + t.read))


def _load_counter(
    settings: Settings,
    base_url: str,
    client: DDTreeClient,
    model: str | None,
    notes: list[str],
    *,
    embedded: bool,
) -> TokenCounter:
    from pytest_ddtree.wire import tokens

    tokenizer = settings.tokenizer
    shape = "reference"
    if tokenizer in ("auto", "server") and not (tokenizer == "auto" and embedded):
        with _probe_scope(client):
            probe = tokens.detect_tokenize_shape(root_url(base_url), client.http, model=model)
        if probe.warning:
            notes.append(f"warning: {probe.warning}")
        if probe.stall is not None:  # a hung endpoint: its first stall, before any request
            client.guard.note(
                probe.stall, probe.warning, 0, where=urlsplit(base_url).netloc or None
            )
        if probe.shape is not None:
            shape, tokenizer = probe.shape, "server"
        elif tokenizer == "auto":
            tokenizer = "none"
            notes.append("no usable /tokenize (shapes tried: " + ", ".join(probe.tried) + ")")
    elif tokenizer == "auto":
        from pytest_ddtree.reference import tokenizer_path

        tokenizer = str(tokenizer_path())
    try:
        return tokens.load_counter(
            tokenizer, root_url=root_url(base_url), client=client.http, shape=shape, model=model
        )
    except ValueError as exc:
        raise EndpointError(f"{exc} (from {settings.source_of('tokenizer')})") from None


#: Requests in a row that failed on the server's side, before it ever answered, after which
#: the session stops sending to it (three: one bad gateway answer or refused connection can
#: be a restart in progress; three in a row, with no answer ever, is a server that is down).
DEAD_LIMIT = 3


def _where(settings: Settings, attr: str, option: str) -> str:
    """The setting to fix, as the user gave it: ``environment variable DDTREE_ENDPOINT``,
    ``ini key ddtree_endpoint``, ``option --ddtree-endpoint`` (the option when unset)."""
    source = settings.source_of(attr)
    return option if source == "default" else source


def start_runtime(settings: Settings) -> Runtime:
    """Start (if embedded) and probe the endpoint; ``EndpointError`` on any problem."""
    servers: list[Any] = []
    endpoint = settings.endpoint
    baseline_endpoint = settings.baseline_endpoint
    if endpoint is None:
        main, twin = start_embedded(settings)
        servers = [main, twin]
        endpoint = main.base_url
        baseline_endpoint = baseline_endpoint or twin.base_url
    try:
        probe = _make_client(settings, endpoint, None, None)
        try:
            models = probe.list_models(option=_where(settings, "endpoint", "--ddtree-endpoint"))
            for budget, url in sorted(settings.budget_endpoints.items()):
                other = probe.list_models(
                    url, option=_where(settings, "budget_endpoints", "--ddtree-budget-endpoint")
                )
                if settings.model and settings.model not in other:
                    raise EndpointError(
                        f"{url}/models (tree_budget {budget}) does not list model "
                        f"{settings.model!r}; it lists: {', '.join(other) or 'nothing'}"
                    )
            if baseline_endpoint and not servers:
                try:
                    listed = probe.list_models(
                        baseline_endpoint,
                        option=_where(settings, "baseline_endpoint", "--ddtree-baseline-endpoint"),
                    )
                except EndpointError as exc:
                    raise EndpointError(
                        f"baseline (from {settings.source_of('baseline_endpoint')}): {exc}"
                    ) from None
                wanted = settings.model or (models[0] if models else None)
                if wanted is not None and wanted not in listed:
                    raise EndpointError(
                        f"baseline {baseline_endpoint} (from "
                        f"{settings.source_of('baseline_endpoint')}) does not serve model "
                        f"{wanted!r}; it lists: {', '.join(listed) or 'nothing'}"
                    )
            if not models:
                raise EndpointError(f"{endpoint}/models lists no model; pass --ddtree-model")
            model = settings.model or models[0]
            if model not in models:
                raise EndpointError(
                    f"model {model!r} (from {settings.source_of('model')}) is not served by "
                    f"{endpoint}; it lists: {', '.join(models)}"
                )
        finally:
            probe.close()
        client = _make_client(settings, endpoint, model, None)
        # the session's client stops sending to an endpoint that has never answered, and
        # the run stops on a dead or stalled endpoint (the stall guard's own limit)
        client.guard.dead_limit = DEAD_LIMIT
        client.guard.stops_run = True
        client.timeout_source = _where(settings, "timeout", "--ddtree-timeout")
        notes: list[str] = []
        try:
            # the counter may query the server's /tokenize: give it the long-lived pool
            counter = client.watch_counter(
                _load_counter(settings, endpoint, client, model, notes, embedded=bool(servers))
            )
        except BaseException:
            client.close()
            raise
        client.counter = counter
        baseline = None
        if baseline_endpoint:
            baseline = _make_client(
                replace(settings, budget_mode="none"), baseline_endpoint, model, counter
            )
        runtime = Runtime(
            settings=settings,
            client=client,
            model=model,
            counter=counter,
            endpoint=endpoint,
            baseline_endpoint=baseline_endpoint,
            embedded=bool(servers),
            baseline=baseline,
            servers=servers,
            notes=notes,
        )
        _open_server_metrics(runtime)
        if not counter.exact:
            runtime.notes.append(
                "token counts are approximate (no tokenizer): usage checks use a wider tolerance"
            )
        return runtime
    except BaseException:
        for server in servers:
            server.stop()
        raise


def _open_server_metrics(runtime: Runtime) -> None:
    """Probe ``/metrics`` once; the header says where the counters come from, or why not."""
    from pytest_ddtree.wire.servermetrics import open_log

    settings = runtime.settings
    key = settings.api_key
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    log = open_log(settings.metrics_url, runtime.endpoint, headers=headers)
    runtime.server_metrics = log
    runtime.notes.append(f"server metrics: {log.reader.status}")


def expectation_kwargs(
    settings: Settings, expect: dict[str, Any], counter: TokenCounter | None = None
) -> dict[str, Any]:
    """Keyword arguments for ``invariants.check``: settings (and markers) first, then ``expect``.

    ``--ddtree-role-marker`` extends the role markers; ``--ddtree-allow-marker``
    removes a marker or special token from both lists.
    """
    from pytest_ddtree.checks.invariants import DEFAULT_ROLE_MARKERS, DEFAULT_SPECIAL_TOKENS

    out: dict[str, Any] = {"thinking": settings.enable_thinking}
    if settings.min_tokens is not None:
        out["min_tokens"] = settings.min_tokens
    skip = set(settings.skip_checks) | set(expect.pop("skip", ()))
    if skip:
        out["skip"] = frozenset(skip)
    if settings.role_markers or settings.allow_markers:
        allowed = set(settings.allow_markers)
        roles = [m for m in (*DEFAULT_ROLE_MARKERS, *settings.role_markers) if m not in allowed]
        specials = list(DEFAULT_SPECIAL_TOKENS)
        for tok in getattr(counter, "special_tokens", ()) or ():
            if tok not in specials and tok not in ("<think>", "</think>"):
                specials.append(tok)
        out["role_markers"] = tuple(dict.fromkeys(roles))
        out["special_tokens"] = tuple(t for t in specials if t not in allowed)
    out.update(expect)
    return out
