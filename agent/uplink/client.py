"""Typed HTTP client of the aggregator API, used by the agent (reports, permits) and the on-call CLI.

Every failure is one of our exceptions (:class:`AggregatorError` and its subclasses) with a one-line message;
``httpx`` errors never escape. Only idempotent calls are retried, and only on transport errors and 5xx
answers: reports (idempotent by node + seq) and permit requests (asking again returns the permit held).
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import structlog
from pydantic import BaseModel, ValidationError
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from core.aggregator_api import (
    AuditEntry,
    BreakerStatus,
    CentralDrain,
    DrainOrder,
    Event,
    FleetSummary,
    IncidentDetail,
    IncidentSummary,
    NodeDetail,
    NodeForgotten,
    NodeRequest,
    NodeSummary,
    PeerReport,
    Permit,
    PermitRequest,
    ReliabilityReport,
    Report,
    ReportAck,
)
from core.alerts_api import AlertView, Delivery, Silence, SilenceCreate
from core.findings import Action

log = structlog.get_logger(__name__)

MAX_PAGES = 10_000  # a paginated list longer than this is a server that never ends its pages

Model = TypeVar("Model", bound=BaseModel)


class AggregatorError(Exception):
    """Any failure talking to the aggregator."""


class AggregatorUnreachable(AggregatorError):
    """No answer: connection refused, DNS failure, timeout."""


class Unauthorized(AggregatorError):
    """The aggregator refused the token (401)."""


class Forbidden(Unauthorized):
    """The token is known but may not do this (403); the message names the aggregator's rule."""


class NotFound(AggregatorError):
    """The node, incident or permit does not exist (404)."""


class RequestRejected(AggregatorError):
    """The aggregator rejected the request as invalid (4xx other than 401/403/404/409)."""


class ServerError(AggregatorError):
    """The aggregator failed (5xx), e.g. its database is unavailable."""


class PermitRefused(AggregatorError):
    """The permit was refused; ``code`` is breaker_tripped, budget_exhausted, cooldown, unknown_node..."""

    def __init__(self, code: str, reason: str, retry_after_s: float | None = None) -> None:
        super().__init__(f"permit refused ({code}): {reason}")
        self.code = code
        self.reason = reason
        self.retry_after_s = retry_after_s


class PermitLapsed(AggregatorError):
    """The permit expired or was released; ask for a new one (409 on renew)."""


class SequenceNumbers:
    """Report sequence numbers that keep increasing across agent restarts without stored state.

    Milliseconds since the epoch, bumped by one when two reports fall in the same millisecond; the aggregator
    ignores a report whose seq is not above the last it accepted, so a restarted agent must not start at 0.
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._last = 0

    def next(self) -> int:
        """The next sequence number: above the previous one and not below the clock in ms."""
        self._last = max(self._last + 1, int(self._clock() * 1000))
        return self._last


class TokenFileAuth(httpx.Auth):
    """The bearer token of a file, read for every request: a projected ServiceAccount token (or a rotated
    Secret) is replaced on disk while the agent runs, and a read of a small file costs nothing next to the
    request (modification times are too coarse to tell two quick writes apart). An unreadable file keeps the
    last token."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._token: str | None = None

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        token = self.current()
        if token:
            request.headers["Authorization"] = f"Bearer {token}"
        yield request

    def current(self) -> str | None:
        """The file's token now."""
        with self._lock:
            try:
                self._token = self._path.read_text(encoding="utf-8").strip() or None
            except OSError:
                log.warning("token file unreadable; keeping the last token", path=str(self._path))
            return self._token


def tls_context(
    ca_file: Path | None = None, cert_file: Path | None = None, key_file: Path | None = None
) -> ssl.SSLContext:
    """How a client checks an ``https://`` aggregator: against ``ca_file`` (else the system's CAs), host name
    verified, TLS 1.2 or later; with ``cert_file`` (and ``key_file``, unless the key is in the same PEM) it
    presents a client certificate. Raises AggregatorError naming the file that cannot be loaded."""
    try:
        context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    except (OSError, ssl.SSLError) as exc:
        raise AggregatorError(f"cannot load the CA file {ca_file}: {_tls_reason(exc)}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_file is not None:
        try:
            context.load_cert_chain(cert_file, key_file)
        except (OSError, ssl.SSLError) as exc:
            raise AggregatorError(
                f"cannot load the client certificate {cert_file}: {_tls_reason(exc)}"
            ) from None
    elif key_file is not None:
        raise AggregatorError("a client key without a client certificate: give both")
    return context


def _tls_reason(exc: BaseException) -> str:
    """A TLS failure's reason in a few words (``certificate verify failed: self-signed certificate``)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError):
        return str(exc.reason or exc).lower().replace("_", " ")
    if isinstance(exc, OSError):
        return str(exc.strerror or exc)
    return str(exc)


def _tls_failure(exc: BaseException) -> ssl.SSLError | None:
    """The TLS error behind an httpx transport error, if that is what it was."""
    seen: BaseException | None = exc
    for _ in range(10):  # the cause chain is short; bounded all the same
        if seen is None:
            return None
        if isinstance(seen, ssl.SSLError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


class AggregatorClient:
    """One aggregator endpoint (``base_url``) with a bearer ``token``, or the token in ``token_file`` (read
    for every request). ``verify`` checks an ``https://`` aggregator (:func:`tls_context`; default: the
    system's CAs)."""

    def __init__(
        self,
        base_url: str,
        token: str | None,
        *,
        timeout_s: float = 10.0,
        retries: int = 3,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        token_file: Path | None = None,
        verify: ssl.SSLContext | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        headers["User-Agent"] = "gpuhealth"
        self.base_url = base_url.rstrip("/")
        auth = TokenFileAuth(token_file) if token_file is not None and not token else None
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=timeout_s,
            transport=transport,
            auth=auth,
            # Plain HTTP needs no certificates: httpx would otherwise load the system's CAs for nothing.
            verify=verify if verify is not None else self.base_url.startswith("https://"),
        )
        self._retries = max(1, retries)
        self._sleep = sleep

    def __enter__(self) -> AggregatorClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP connections."""
        self._http.close()

    # --- agent side -------------------------------------------------------------------------------------

    def report(self, report: Report) -> ReportAck:
        """Send one report (retried: idempotent by node + seq). ``accepted`` is False for a repeat."""
        body = report.model_dump(mode="json", by_alias=True)
        return self._call("POST", "/v1/reports", ReportAck, json=body, retry=True)

    def request_permit(
        self, node: str, action: Action, *, incident_id: str | None = None, ttl_s: float | None = None
    ) -> Permit:
        """Ask for a permit; raises :class:`PermitRefused` with the reason when refused."""
        body = PermitRequest(node=node, action=action, incident_id=incident_id, ttl_s=ttl_s)
        return self._call("POST", "/v1/permits", Permit, json=body.model_dump(mode="json"), retry=True)

    def renew_permit(self, permit_id: int, *, ttl_s: float | None = None) -> Permit:
        """Extend a permit; raises :class:`PermitLapsed` when it already expired or was released."""
        return self._call("POST", f"/v1/permits/{permit_id}/renew", Permit, json={"ttl_s": ttl_s}, retry=True)

    def release_permit(self, permit_id: int) -> Permit:
        """Give a permit back (idempotent)."""
        return self._call("POST", f"/v1/permits/{permit_id}/release", Permit, retry=True)

    def order_drain(self, permit_id: int, *, deadline_s: float) -> CentralDrain:
        """Ask the central remediator to drain the node of a granted permit (idempotent: a second order
        for the same permit returns the first)."""
        body = DrainOrder(deadline_s=deadline_s).model_dump(mode="json")
        return self._call("POST", f"/v1/permits/{permit_id}/drain", CentralDrain, json=body, retry=True)

    def drain_of(self, permit_id: int) -> CentralDrain:
        """Where the central drain of a permit stands; NotFound when none was ordered."""
        return self._call("GET", f"/v1/permits/{permit_id}/drain", CentralDrain, retry=True)

    def latest_drain(self, node: str) -> CentralDrain:
        """The node's most recent central drain; NotFound when none was ever ordered."""
        return self._call("GET", f"/v1/nodes/{_segment(node)}/drain", CentralDrain, retry=True)

    def pending_requests(self, node: str) -> list[NodeRequest]:
        """Quarantine / release requests for this node that its agent has not applied yet."""
        return self._call_list("GET", f"/v1/nodes/{_segment(node)}/requests", NodeRequest)

    def acknowledge_request(self, node: str, request_id: int) -> list[NodeRequest]:
        """Tell the aggregator a request was applied; returns what is still pending."""
        return self._call_list("POST", f"/v1/nodes/{_segment(node)}/requests/{request_id}/ack", NodeRequest)

    # --- on-call side -----------------------------------------------------------------------------------

    def summary(self) -> FleetSummary:
        """The fleet summary (``gpuhealth status``)."""
        return self._call("GET", "/v1/fleet", FleetSummary, retry=True)

    def reliability(self, *, since: str | None = None, by: str = "model") -> ReliabilityReport:
        """The reliability report (``gpuhealth report``)."""
        return self._call(
            "GET", "/v1/reliability", ReliabilityReport, retry=True, params=_params(since=since, by=by)
        )

    def peers(self) -> PeerReport:
        """GPUs far from their peers (``GET /v1/peers``)."""
        return self._call("GET", "/v1/peers", PeerReport, retry=True)

    def nodes(self, *, state: str | None = None, page_size: int | None = None) -> list[NodeSummary]:
        """Every node, optionally only those shown in ``state`` (``stale`` included), page after page."""
        params = _params(state=state, limit=page_size)
        return [node for page in self._pages("/v1/nodes", NodeSummary, params) for node in page]

    def node(self, name: str) -> NodeDetail:
        """One node's detail; raises NotFound for a node that never reported."""
        return self._call("GET", f"/v1/nodes/{_segment(name)}", NodeDetail, retry=True)

    def events(
        self,
        *,
        since: str | None = None,
        node: str | None = None,
        limit: int = 200,
        all_pages: bool = False,
        kind: str | None = None,
    ) -> list[Event]:
        """History, oldest first; ``since`` is a duration (``1h``) or an ISO time. The newest ``limit``
        events, or with ``all_pages`` every one (pages of ``limit``, newest first, joined oldest first);
        ``kind`` keeps one kind (``shadow``: the decisions of profiles in shadow mode)."""
        params = _params(since=since, node=node, limit=limit, kind=kind)
        if not all_pages:
            return self._call_list("GET", "/v1/events", Event, params=params)
        pages = list(self._pages("/v1/events", Event, params))
        return [event for page in reversed(pages) for event in page]

    def events_found(
        self, *, since: str | None = None, node: str | None = None, limit: int = 200, kind: str | None = None
    ) -> tuple[list[Event], bool, int | None]:
        """The newest ``limit`` events, oldest first, whether older ones exist (a next page), and how many
        match in all when the aggregator says (``X-Total-Count``; None from one that does not)."""
        params = _params(since=since, node=node, limit=limit, kind=kind)
        answer = self._request("GET", "/v1/events", retry=True, params=params)
        if not isinstance(answer.json, list):
            raise ServerError("unexpected answer from the aggregator for /v1/events: not a list")
        events = [_parse(Event, item, "/v1/events") for item in answer.json]
        total = int(answer.total) if answer.total and answer.total.isdigit() else None
        return events, _next_page(answer.link) is not None, total

    def incidents(
        self, *, node: str | None = None, open_only: bool = False, since: str | None = None
    ) -> list[IncidentSummary]:
        """Incidents, newest first."""
        params = _params(node=node, since=since, open="true" if open_only else None)
        return self._call_list("GET", "/v1/incidents", IncidentSummary, params=params)

    def incident(self, incident_id: str) -> IncidentDetail:
        """One incident with its timeline."""
        return self._call("GET", f"/v1/incidents/{incident_id}", IncidentDetail, retry=True)

    # ``requested_by`` below is accepted so older callers still work, and never sent: the aggregator records
    # the authenticated caller, whatever a body claims.

    def quarantine(self, node: str, *, reason: str, requested_by: str | None = None) -> NodeRequest:
        """Ask the node's agent to quarantine it (a human's request; not retried)."""
        del requested_by
        return self._call(
            "POST", f"/v1/nodes/{_segment(node)}/quarantine", NodeRequest, json={"reason": reason}
        )

    def release(self, node: str, *, reason: str, requested_by: str | None = None) -> NodeRequest:
        """Ask the node's agent to release it; lifts a manual or repeat-offender hold."""
        del requested_by
        return self._call("POST", f"/v1/nodes/{_segment(node)}/release", NodeRequest, json={"reason": reason})

    def diag(
        self, node: str, *, level: int, force: bool, reason: str, requested_by: str | None = None
    ) -> NodeRequest:
        """Ask the node's agent to run ``dcgmi diag -r LEVEL`` (a human's request; not retried)."""
        del requested_by
        body = {"level": level, "force": force, "reason": reason}
        return self._call("POST", f"/v1/nodes/{_segment(node)}/diag", NodeRequest, json=body)

    def forget_node(self, node: str) -> NodeForgotten:
        """Forget a node (admin): it leaves the fleet, the budget and the breaker; its history stays."""
        return self._call("DELETE", f"/v1/nodes/{_segment(node)}", NodeForgotten)

    def audit(
        self, *, since: str | None = None, actor: str | None = None, limit: int = 200
    ) -> list[AuditEntry]:
        """The audit log of mutating calls, oldest first (operator or admin)."""
        params = _params(since=since, actor=actor, limit=limit)
        return self._call_list("GET", "/v1/audit", AuditEntry, params=params)

    def permits(self, *, active_only: bool = True) -> list[Permit]:
        """Permits, newest first (only the active ones unless ``active_only`` is False)."""
        return self._call_list(
            "GET", "/v1/permits", Permit, params=_params(active=None if active_only else "false")
        )

    def breaker_status(self) -> BreakerStatus:
        """The fleet circuit breaker."""
        return self._call("GET", "/v1/breaker", BreakerStatus, retry=True)

    def breaker_reset(self, *, reason: str = "", requested_by: str | None = None) -> BreakerStatus:
        """Close the breaker (recorded with the authenticated caller and why)."""
        del requested_by
        return self._call("POST", "/v1/breaker/reset", BreakerStatus, json={"reason": reason})

    def alerts(self, *, failed: bool = False, limit: int = 100) -> list[AlertView]:
        """Alerts newest first with their deliveries; ``failed``: only those dead-lettered somewhere."""
        params = _params(failed="true" if failed else None, limit=limit)
        return self._call_list("GET", "/v1/alerts", AlertView, params=params)

    def retry_delivery(self, delivery_id: int, *, force: bool = False) -> Delivery:
        """Send a dead-lettered alert delivery again now; a delivered one only with ``force`` (else the
        aggregator refuses: :class:`PermitLapsed`, its 409)."""
        params = _params(force="true" if force else None)
        return self._call("POST", f"/v1/alerts/deliveries/{delivery_id}/retry", Delivery, params=params)

    def silences(self, *, active_only: bool = True) -> list[Silence]:
        """Silences, newest first."""
        params = _params(active=None if active_only else "false")
        return self._call_list("GET", "/v1/silences", Silence, params=params)

    def silence(self, body: SilenceCreate) -> Silence:
        """Mute alerts about a node or a label selector for a while (not retried)."""
        return self._call("POST", "/v1/silences", Silence, json=body.model_dump(mode="json"))

    def remove_silence(self, silence_id: int) -> Silence:
        """End a silence now (idempotent)."""
        return self._call("DELETE", f"/v1/silences/{silence_id}", Silence, retry=True)

    # --- plumbing ---------------------------------------------------------------------------------------

    def _call(
        self, method: str, path: str, model: type[Model], *, retry: bool = False, **kwargs: Any
    ) -> Model:
        return _parse(model, self._request(method, path, retry=retry, **kwargs).json, path)

    def _call_list(self, method: str, path: str, model: type[Model], **kwargs: Any) -> list[Model]:
        return self._list_page(method, path, model, **kwargs)[0]

    def _list_page(
        self, method: str, path: str, model: type[Model], **kwargs: Any
    ) -> tuple[list[Model], str | None]:
        """One answer that must be a list, and where its next page is (the ``Link`` header), if anywhere."""
        answer = self._request(method, path, retry=method == "GET", **kwargs)
        if not isinstance(answer.json, list):
            raise ServerError(f"unexpected answer from the aggregator for {path}: not a list")
        return [_parse(model, item, path) for item in answer.json], _next_page(answer.link)

    def _pages(self, path: str, model: type[Model], params: dict[str, Any]) -> Iterator[list[Model]]:
        """Every page of a paginated list, following the ``Link: <...>; rel="next"`` the aggregator sends
        after a full page (``MAX_PAGES`` at most, against a server that never ends)."""
        url: str | None = path
        query: dict[str, Any] | None = params
        for _ in range(MAX_PAGES):
            if url is None:
                return
            page, url = self._list_page("GET", url, model, params=query)
            query = None  # the next page's address carries its parameters
            yield page
        raise ServerError(f"the aggregator sent more than {MAX_PAGES} pages for {path}")

    def _request(self, method: str, path: str, *, retry: bool, **kwargs: Any) -> _Answer:
        attempts = self._retries if retry else 1
        retrying = Retrying(
            stop=stop_after_attempt(attempts),
            wait=wait_exponential(multiplier=0.2, max=2.0),
            retry=retry_if_exception_type((AggregatorUnreachable, ServerError)),
            sleep=self._sleep,
            reraise=True,
        )
        for attempt in retrying:
            with attempt:
                return self._once(method, path, **kwargs)
        raise AssertionError("unreachable: tenacity reraises the last error")  # pragma: no cover

    def _once(self, method: str, path: str, **kwargs: Any) -> _Answer:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TimeoutException as exc:
            raise AggregatorUnreachable(f"aggregator at {self.base_url} did not answer in time") from exc
        except httpx.TransportError as exc:
            tls = _tls_failure(exc)
            if tls is not None:
                raise AggregatorUnreachable(
                    f"TLS with the aggregator at {self.base_url} failed: {_tls_reason(tls)}{_tls_hint(tls)}"
                ) from exc
            if isinstance(exc, httpx.RemoteProtocolError) and self.base_url.startswith("https:"):
                # A TLS 1.3 server that requires a client certificate refuses it after the handshake, so
                # the client sees only a closed connection.
                raise AggregatorUnreachable(
                    f"the aggregator at {self.base_url} closed the connection without an answer "
                    "(does it require a client certificate?)"
                ) from exc
            raise AggregatorUnreachable(f"cannot reach the aggregator at {self.base_url}: {exc}") from exc
        _raise_for_status(response, self.base_url)
        try:
            return _Answer(
                response.json(), response.headers.get("link"), response.headers.get("x-total-count")
            )
        except ValueError as exc:
            raise ServerError(
                f"aggregator at {self.base_url} answered {path} with something not JSON"
            ) from exc


@dataclass(frozen=True)
class _Answer:
    """A successful answer's JSON body, and its ``Link`` header (pagination)."""

    json: Any
    link: str | None
    total: str | None = None


def _tls_hint(exc: ssl.SSLError) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return " (give the CA file that signed the aggregator's certificate)"
    if "CERTIFICATE_REQUIRED" in str(exc.reason or exc).upper():
        return " (the aggregator requires a client certificate)"
    return ""


def _next_page(link: str | None) -> str | None:
    """The ``rel="next"`` target of a ``Link`` header (a path on the same aggregator), or None."""
    for part in (link or "").split(","):
        target, _, rest = part.strip().partition(";")
        if 'rel="next"' in rest and target.startswith("<") and target.endswith(">"):
            return target[1:-1]
    return None


def _segment(value: str) -> str:
    """One path segment: percent-encoded whole, so a name with ``/`` or ``..`` cannot address another route
    (a bare ``.`` or ``..`` would be resolved away as a dot segment: its dots are encoded too)."""
    encoded = quote(value, safe="")
    return encoded.replace(".", "%2E") if encoded in {".", ".."} else encoded


def _params(**values: Any) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200] or response.reason_phrase
    if isinstance(body, dict) and isinstance(body.get("detail"), str):
        return str(body["detail"])
    if isinstance(body, dict) and isinstance(body.get("detail"), list) and body["detail"]:
        first = body["detail"][0]
        where = ".".join(str(part) for part in first.get("loc", []))
        return f"{where}: {first.get('msg', 'invalid')}"
    return str(body)[:200]


def _raise_for_status(response: httpx.Response, base_url: str) -> None:
    code = response.status_code
    if code < 400:
        return
    if code == 403:
        raise Forbidden(f"the aggregator refused (HTTP 403): {_detail(response)}")
    if code == 401:
        raise Unauthorized(
            f"the aggregator at {base_url} refused the token (HTTP {code}); check GPUHEALTH_TOKEN"
        )
    if code == 404:
        raise NotFound(_detail(response))
    if code == 409:
        body = _json_or_empty(response)
        if "code" in body:
            raise PermitRefused(
                str(body["code"]), str(body.get("reason", "")), _seconds(body.get("retry_after_s"))
            )
        raise PermitLapsed(_detail(response))
    if code >= 500:
        raise ServerError(f"aggregator at {base_url} failed (HTTP {code}): {_detail(response)}")
    raise RequestRejected(f"aggregator rejected the request (HTTP {code}): {_detail(response)}")


def _json_or_empty(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _parse(model: type[Model], data: Any, path: str) -> Model:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ServerError(
            f"unexpected answer from the aggregator for {path}: {exc.errors()[0]['msg']}"
        ) from exc


def _seconds(value: object) -> float | None:
    """A non-negative number of seconds from an answer's body, or None when absent or not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return float(value)
