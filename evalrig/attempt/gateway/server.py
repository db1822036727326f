"""The gateway's server: one sandbox's listener served on the rig's loop, every call taken
through the steps of docs/gateway.md ("Each call") and recorded in the attempt's ledger.

HTTP: aiohttp, its low-level server on the listener the sandbox side bound (no routing
table: the three endpoints are matched here, on the raw request target) and its client,
with one connection pool per rig process, for the upstreams.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import re
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from evalrig.attempt.aioloop import LOOP
from evalrig.attempt.gateway.budget import Book, Reservation
from evalrig.attempt.gateway.ledger import CallLedger
from evalrig.attempt.gateway.replay import Replay
from evalrig.attempt.gateway.routes import (
    error_body,
    feature_problem,
    fetch_problem,
    max_output_tokens,
    parse_route,
    refusal,
    shape_of,
)
from evalrig.attempt.gateway.usage import StreamUsage, estimate, from_body
from evalrig.attempt.streams import scan_body_verdict
from evalrig.core.digest import sha256_bytes
from evalrig.models.base import format_ts
from evalrig.models.gateway import Api, Budget, CallApi, CallUsage, ModelCall, Refusal, Role

__all__ = ["BODY_LIMIT", "FORWARDED_HEADERS", "Gateway", "Grant", "Pricer", "Session", "UpstreamConn"]

BODY_LIMIT = 8 << 20
"""A request body over 8 MiB gets 413."""
SCAN_CPU_S = 5.0
"""The canary scan's CPU bound per request; a body it cannot finish is refused."""
FORWARDED_HEADERS = ("Content-Type", "Accept", "User-Agent", "anthropic-version", "anthropic-beta",
                     "OpenAI-Beta")
"""The only request headers passed to an upstream (and scanned); the rig adds the key."""
MAX_OPEN = 256
"""Connections one sandbox may hold open at once (an agent may well make a hundred calls at
once: they wait for one of its 4 slots); more are closed as they arrive."""
HELD_LIMIT = 64 << 20
"""Bytes of request bodies one sandbox's calls may hold before they are admitted (read but
not yet forwarded or refused: waiting for a slot, being checked); a call that would pass it
gets 503 and its connection closed (the SDKs retry a 503 later)."""
MAX_CONTAINERS = 100_000
"""JSON arrays and objects one request body may hold (an 8 MiB body of `[{},{},...]`
parses to ~200 MiB of Python objects); more get 413 before anything is parsed."""
MAX_VALUES = 200_000
"""Values one request body may list (commas outside strings): an 8 MiB body of
`["ab","ab",...]` holds three containers but parses to ~110 MiB; more get 413 likewise."""
_WALK_ON_LOOP = 256 << 10
"""Bodies up to this size are parsed and have their content parts checked on the loop;
larger, off it."""
_STRINGS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_END_MARKERS = (b"data: [DONE]", b"message_stop", b"response.completed", b"response.incomplete",
                b"response.failed")
"""What a stream's last event carries: it is held back until the call's line is written."""
_RETRY_HEADERS = ("retry-after", "retry-after-ms", "x-should-retry")
"""An upstream's advice on retrying, passed back with its error (the agent's SDK reads it)."""
_OPEN_TIMEOUT_S = 10.0
_CLOSE_GRACE_S = 1.0

Pricer = Callable[[str, str, CallUsage, datetime], float | None]
"""(qualified model, provider id, usage, as of) -> USD, None when unpriced."""


@dataclass(frozen=True)
class UpstreamConn:
    """One `[upstreams.NAME]` with its key resolved (never written anywhere)."""

    name: str
    api: Api
    base_url: str
    key: str | None = field(repr=False)
    max_concurrent: int = 16
    roles: tuple[Role, ...] = ("candidate",)
    price_provider: str = ""
    timeout_s: float = 600.0


@dataclass(frozen=True)
class Grant:
    """What one sandbox's calls may do."""

    role: Role
    allowed: frozenset[str]
    budget: Budget | None
    needles: tuple[bytes, ...]
    trial: tuple[str, int]


class Gateway:
    """One per rig process (per run, per Ray worker): the upstreams, their pools and limits."""

    def __init__(self, upstreams: Mapping[str, UpstreamConn], price: Pricer, *,
                 replay: Replay | None = None) -> None:
        self.upstreams = dict(upstreams)
        self.price = price
        self.replay = replay
        self.apis: dict[str, Api] = {n: u.api for n, u in self.upstreams.items()}
        self._limits: dict[str, asyncio.Semaphore] = {}
        self._client: aiohttp.ClientSession | None = None
        self._sessions: set[Session] = set()
        self._lock = threading.Lock()
        self.scan_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="evalrig-gateway-scan")
        self.write_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="evalrig-gateway-write")
        self.longest_s = max((u.timeout_s for u in self.upstreams.values()), default=60.0)

    def open(self, listener: Any, grant: Grant, ledger: CallLedger) -> Session:
        """Serve `listener` (already listening) for one sandbox; `Session.close()` ends it."""
        session = Session(self, grant, ledger)
        LOOP.call(session._serve(listener), _OPEN_TIMEOUT_S)
        with self._lock:
            self._sessions.add(session)
        return session

    def close(self) -> None:
        """End every session, then close the upstream connection pools."""
        with self._lock:
            sessions = list(self._sessions)
        for s in sessions:
            s.close()
        if self._client is not None:
            LOOP.call(self._client.close(), _OPEN_TIMEOUT_S)
            self._client = None
        self.scan_pool.shutdown(wait=False)
        self.write_pool.shutdown(wait=True)

    def _forget(self, session: Session) -> None:
        with self._lock:
            self._sessions.discard(session)

    def client(self) -> aiohttp.ClientSession:
        if self._client is None:
            self._client = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=30),
                skip_auto_headers=("User-Agent",))
        return self._client

    def limit(self, name: str) -> asyncio.Semaphore:
        sem = self._limits.get(name)
        if sem is None:
            sem = self._limits[name] = asyncio.Semaphore(self.upstreams[name].max_concurrent)
        return sem


@dataclass
class _Line:
    """A call's line, filled in as the call goes."""

    seq: int
    role: Role
    t_start: datetime
    t0: float
    t_end: float | None = None
    recorded: bool = False
    held: int = 0
    qualified: str = ""
    provider: str = ""
    reservation: Reservation | None = None
    forwarded: bool = False
    upstream: str | None = None
    model: str | None = None
    api: CallApi | None = None
    stream: bool = False
    status: int = 500
    request: bytes = b""
    request_sha256: str = sha256_bytes(b"")
    response: bytes = b""
    response_sha256: str | None = None
    sse: bool = False
    usage: CallUsage | None = None
    usage_raw: dict[str, Any] | None = None
    usage_source: str | None = None
    cost_usd: float = 0.0
    refused: Refusal | None = None
    upstream_fault: bool = False
    error: str | None = None
    bodies: str = "kept"
    shown: tuple[dict[str, str], dict[str, Any]] | None = None  # (headers, body) as forwarded

    def model_call(self) -> ModelCall:
        return ModelCall(
            seq=self.seq, role=self.role, upstream=self.upstream, model=self.model, api=self.api,
            stream=self.stream, status=self.status, t_start=format_ts(self.t_start),
            t_start_ms=int(self.t_start.timestamp() * 1000),
            t_ms=round(((self.t_end or time.perf_counter()) - self.t0) * 1000, 3),
            request_sha256=self.request_sha256, response_sha256=self.response_sha256,
            usage=self.usage, usage_raw=self.usage_raw,
            usage_source=self.usage_source,  # type: ignore[arg-type]
            cost_usd=self.cost_usd, refused=self.refused, upstream_fault=self.upstream_fault,
            error=self.error, bodies=self.bodies)  # type: ignore[arg-type]


class Session:
    """One sandbox's listener being served."""

    def __init__(self, gateway: Gateway, grant: Grant, ledger: CallLedger) -> None:
        self.gw = gateway
        self.grant = grant
        self.ledger = ledger
        self.book = Book(grant.budget)
        self._calls: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self._web: web.Server | None = None
        self._closed = False
        self._sealed = False
        self._held = 0
        self._queued: set[concurrent.futures.Future[Any]] = set()

    async def _serve(self, listener: Any) -> None:
        self._web = web.Server(self._handle, access_log=None)
        self._server = await asyncio.get_running_loop().create_server(self._protocol, sock=listener)

    def _protocol(self) -> asyncio.BaseProtocol:
        """A new connection's protocol: aiohttp's, or one that closes it when the sandbox
        already holds MAX_OPEN (the rig's descriptors are not the agent's to exhaust)."""
        assert self._web is not None
        if len(self._web.connections) >= MAX_OPEN:
            return _Closing()
        return self._web()

    def close(self) -> None:
        """End the sandbox's connections; a call still reading its upstream for usage is
        read to its end (bounded by the upstream's time-out) and recorded first."""
        if self._closed:
            return
        self._closed = True  # from now on no call not yet admitted goes on (see _off)
        LOOP.call(self._shutdown(), self.gw.longest_s + SCAN_CPU_S + 60)
        self.gw._forget(self)

    async def _shutdown(self) -> None:
        for f in list(self._queued):  # checks still queued off the loop never run
            f.cancel()
        if self._server is not None:
            self._server.close()
        if self._web is not None:
            await self._web.shutdown(_CLOSE_GRACE_S)
        # every call ends: one not admitted at its next step, one forwarded within its
        # upstream's time-out; after this the session writes no line (a late one is dropped)
        if self._calls:
            await asyncio.wait(list(self._calls), timeout=self.gw.longest_s + SCAN_CPU_S + 30)
        self._sealed = True

    async def _off(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` in the scan pool, for a call not yet forwarded: it stops (`_Ended`)
        when the session closed meanwhile, and its work is cancelled if still queued."""
        if self._closed:
            raise _Ended
        f = self.gw.scan_pool.submit(fn, *args)
        self._queued.add(f)
        try:
            result = await asyncio.wrap_future(f)
        except asyncio.CancelledError:
            if f.cancelled() and self._closed:
                raise _Ended from None
            raise
        finally:
            self._queued.discard(f)
        if self._closed:
            raise _Ended
        return result

    # -- one request ------------------------------------------------------------------------

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        responded: asyncio.Future[web.StreamResponse] = loop.create_future()
        task = loop.create_task(self._call(request, responded))
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)
        return await asyncio.shield(responded)

    async def _call(self, request: web.BaseRequest, responded: asyncio.Future[web.StreamResponse]) -> None:
        line = _Line(seq=self.ledger.next_seq(), role=self.grant.role, t_start=datetime.now(UTC),
                     t0=time.perf_counter())
        try:
            await self._steps(request, responded, line)
        except _Ended:
            line.error = "the attempt ended before the call was forwarded"
            if not responded.done():
                await self._answer(request, responded, line, 503, error_body(
                    "openai", "server_error", "evalrig gateway: the attempt ended"))
        except Exception as e:  # noqa: BLE001 - the call still gets an answer and a line
            line.error = line.error or f"gateway error: {type(e).__name__}"
            if not responded.done():
                await self._answer(request, responded, line, 500, error_body(
                    "openai", "server_error", "evalrig gateway: internal error"))
        finally:
            self._release(line)
            if not responded.done():
                responded.set_result(web.Response(status=500))
        await self._recorded(line)

    def _release(self, line: _Line) -> None:
        """The call's body no longer counts as held before admission."""
        self._held -= line.held
        line.held = 0

    async def _recorded(self, line: _Line) -> None:
        """Price and settle the call, then write its line (once), off the loop. Every answer
        is sent after this: a call's line is in the ledger before its caller has the end of
        its response (docs/models.md)."""
        if line.recorded:
            return
        line.recorded = True
        if line.usage is not None and line.usage_source not in (None, "replayed") and line.qualified:
            line.cost_usd = self._price(line.qualified, line.provider, line)
        if line.reservation is not None:
            self.book.settle(line.reservation, line.usage, line.cost_usd, line.forwarded)
        line.t_end = time.perf_counter()
        if self._sealed:
            self.ledger.drop_late()
            return
        try:
            await asyncio.get_running_loop().run_in_executor(self.gw.write_pool, self._record, line)
        except RuntimeError:  # the gateway closed its pools: too late for this line
            self.ledger.drop_late()

    async def _steps(self, request: web.BaseRequest, responded: asyncio.Future[web.StreamResponse],
                     line: _Line) -> None:
        gw, grant = self.gw, self.grant
        target = request.raw_path
        shape = shape_of(target, gw.apis)
        body, over = await self._read_body(request, line)
        line.request, line.request_sha256 = body, sha256_bytes(body)
        if over == "broken":
            line.status, line.bodies = 400, "digest-only"
            line.error = "the caller went away before its request body was whole"
            return
        if over == "held":
            line.bodies = "digest-only"
            line.error = (f"this sandbox's calls not yet admitted already hold {HELD_LIMIT} bytes of "
                          "request bodies: try again later")
            return await self._answer(request, responded, line, 503, error_body(
                shape, "overloaded_error" if shape == "anthropic" else "server_error",
                f"evalrig gateway: {line.error}"), close=True)
        if over == "size":
            line.bodies = "digest-only"
            return await self._refuse(request, responded, line, shape, "size",
                                      f"the request body is over {BODY_LIMIT} bytes", close=True)
        if self._closed:
            raise _Ended
        route = parse_route(request.method, target, gw.apis)
        if route is None:
            return await self._refuse(request, responded, line, shape, "route", (
                "only POST /NAME/v1/chat/completions, /NAME/v1/responses (openai upstreams) and "
                "/NAME/v1/messages (anthropic upstreams) are served"))
        line.upstream, line.api = route.upstream, route.call_api
        obj = _parse(body) if len(body) <= _WALK_ON_LOOP else await self._off(_parse, body)
        if obj is _TOO_MANY:
            return await self._refuse(request, responded, line, shape, "size",
                                      f"the request body holds more than {MAX_CONTAINERS} JSON arrays and objects "
                                      f"or {MAX_VALUES} values")
        if not isinstance(obj, dict):
            return await self._refuse(request, responded, line, shape, "invalid",
                                      "the body is not a JSON object")
        line.stream = obj.get("stream") is True
        model = obj.get("model")
        if not isinstance(model, str) or not 0 < len(model) <= 256 or not model.isprintable():
            return await self._refuse(request, responded, line, shape, "invalid",
                                      "'model' must be a model name")
        line.model = model
        qualified = f"{route.upstream}/{model}"
        if qualified not in grant.allowed:
            named = ", ".join(sorted(grant.allowed)) or "none (this build names no [models])"
            return await self._refuse(request, responded, line, shape, "model",
                                      f"model {qualified!r} is not allowed; allowed: {named}")
        up = gw.upstreams[route.upstream]
        if grant.role not in up.roles:
            return await self._refuse(request, responded, line, shape, "role",
                                      f"upstream {up.name!r} does not serve role {grant.role!r}")
        problem = feature_problem(obj, route.call_api)
        if problem is None:
            if len(body) > _WALK_ON_LOOP:  # a big body's parts are walked off the loop
                problem = await self._off(fetch_problem, obj)
            else:
                problem = fetch_problem(obj)
        if problem is not None:
            return await self._refuse(request, responded, line, shape, "feature", problem)
        provider = up.price_provider or up.api
        line.qualified, line.provider = qualified, provider
        async with self.book.slots:
            self._release(line)  # admitted: its body counts against the slot from now on
            if self._closed:  # the sandbox is gone: a call still waiting for a slot is not forwarded
                line.error = "the attempt ended before the call was forwarded"
                return await self._answer(request, responded, line, 503, error_body(
                    shape, "api_error" if shape == "anthropic" else "server_error",
                    "evalrig gateway: the attempt ended"))
            in_count = (len(body) + 3) // 4
            max_out = max_output_tokens(obj)
            reserve = CallUsage(input_tokens=in_count, output_tokens=max_out or 0)
            r = self.book.admit(in_count + (max_out or 0),
                                _priced(gw.price, qualified, provider, reserve, line.t_start) or 0.0)
            if isinstance(r, str):
                return await self._refuse(request, responded, line, shape, "budget",
                                          f"the budget is exhausted: {r}")
            line.reservation = r
            try:
                headers = {h: v for h in FORWARDED_HEADERS if (v := request.headers.get(h)) is not None}
                if grant.needles:
                    scanned = body + b"\n" + "\n".join(headers.values()).encode("utf-8", "replace")
                    verdict = await self._off(_scan, scanned, grant.needles)
                    if verdict != "clean":
                        line.bodies = "digest-only"
                        why = ("the request holds this attempt's canary: it is not forwarded"
                               if verdict == "found" else
                               "the request could not be scanned within its bound: it is not forwarded")
                        return await self._refuse(request, responded, line, shape,
                                                  "canary" if verdict == "found" else "scan", why)
                line.shown = (dict(headers), obj)  # for the scan across calls (ledger.Shown)
                if gw.replay is not None:
                    await self._replayed(request, responded, line, shape)
                    return
                # what goes upstream is the JSON the gateway checked, re-serialized: with keys
                # repeated, a provider reading the first would run what was never checked
                _upstream_fields(line, obj)
                data = _dumps(obj) if len(body) <= _WALK_ON_LOOP else await self._off(_dumps, obj)
                line.forwarded = True
                await self._forward(request, responded, line, shape, up, route.rest, obj, data, headers,
                                    max_out)
            finally:
                self.book.settle(r, line.usage, line.cost_usd, line.forwarded)
                if responded.done():
                    # written while the slot is held: a sandbox's unwritten lines (and the
                    # bodies they hold) never pile up faster than the disk takes them
                    await self._recorded(line)

    def _price(self, qualified: str, provider: str, line: _Line) -> float:
        assert line.usage is not None
        cost = _priced(self.gw.price, qualified, provider, line.usage, line.t_start)
        if cost is None:
            line.error = line.error or f"{qualified} is not priced (cost recorded as 0)"
            return 0.0
        return float(cost)

    async def _replayed(self, request: web.BaseRequest, responded: asyncio.Future[web.StreamResponse],
                        line: _Line, shape: Api) -> bool:
        assert self.gw.replay is not None
        rc = self.gw.replay.take(self.grant.trial, self.grant.role, line.request_sha256)
        if rc is None:
            await self._refuse(request, responded, line, shape, "replay", (
                "not_in_recording: the recording has no unserved call of this trial and role "
                "with this request's digest"))
            return False
        line.usage, line.usage_raw, line.cost_usd = rc.usage, rc.usage_raw, rc.cost_usd
        line.usage_source = "replayed"
        line.sse = rc.stream
        line.forwarded = True
        await self._answer(request, responded, line, rc.status, rc.response, rc.content_type)
        return True

    async def _forward(self, request: web.BaseRequest, responded: asyncio.Future[web.StreamResponse],
                       line: _Line, shape: Api, up: UpstreamConn, rest: str, obj: dict[str, Any],
                       data: bytes, headers: dict[str, str], max_out: int | None) -> None:
        body = line.request
        headers.setdefault("Content-Type", "application/json")
        if up.key:
            if up.api == "anthropic":
                headers["x-api-key"] = up.key
            else:
                headers["Authorization"] = f"Bearer {up.key}"
        url = f"{up.base_url}/{rest}"
        assert line.api is not None
        prepared: web.StreamResponse | None = None
        su: StreamUsage | None = None
        async with self.gw.limit(up.name):
            try:
                async with self.gw.client().post(
                        url, data=data, headers=headers, allow_redirects=False,
                        timeout=aiohttp.ClientTimeout(total=up.timeout_s)) as r:
                    ctype = r.headers.get("Content-Type", "application/json")
                    line.status = r.status
                    if r.status >= 400 or r.status < 200:
                        payload = _without_key(await r.read(), up.key)
                        line.upstream_fault = r.status in (401, 403, 429) or r.status >= 500
                        line.error = f"upstream {up.name} answered {r.status}"
                        if not _is_json_object(payload):
                            payload = error_body(shape, "api_error" if shape == "anthropic" else "server_error",
                                                 f"upstream {up.name} answered {r.status}")
                            ctype = "application/json"
                        passed = {h: v for h in _RETRY_HEADERS if (v := r.headers.get(h)) is not None}
                        return await self._answer(request, responded, line, r.status, payload, ctype,
                                                  extra=passed)
                    if "text/event-stream" in ctype:
                        su = StreamUsage(line.api)
                        stream_usage = su

                        async def metered() -> None:
                            line.usage, line.usage_raw = stream_usage.usage(), stream_usage.raw
                            await self._metered(line, body, max_out)

                        prepared = await self._stream(request, responded, line, r, ctype, su, metered)
                        line.usage, line.usage_raw = su.usage(), su.raw
                    else:
                        payload = _without_key(await r.read(), up.key)
                        line.usage, line.usage_raw = from_body(line.api, payload)
                        line.status, line.response = r.status, payload
                        await self._metered(line, body, max_out)
                        await self._answer(request, responded, line, r.status, payload, ctype)
            except TimeoutError:
                line.upstream_fault, line.error = True, f"upstream {up.name} timed out after {up.timeout_s} s"
                await self._broken(request, responded, line, prepared, shape, 504, "timeout_error" if
                                   shape == "anthropic" else "timeout", line.error)
            except (aiohttp.ClientError, OSError) as e:
                line.upstream_fault = True
                line.error = f"upstream {up.name} failed: {type(e).__name__}"
                await self._broken(request, responded, line, prepared, shape, 502, "api_error" if
                                   shape == "anthropic" else "server_error", line.error)
        if su is not None and line.usage is None:
            line.usage_raw = su.raw
        await self._metered(line, body, max_out)

    async def _metered(self, line: _Line, body: bytes, max_out: int | None) -> None:
        """The call's usage source, and an estimate when a 2xx answer reported no usage."""
        if line.usage_source is not None or line.recorded:
            return
        if line.usage is not None:
            line.usage_source = "provider"
        elif 200 <= line.status < 300:
            assert line.api is not None
            line.usage = await asyncio.get_running_loop().run_in_executor(
                self.gw.scan_pool, estimate, line.api, line.model or "", body, max_out, line.response)
            line.usage_source = "estimated"

    async def _stream(self, request: web.BaseRequest, responded: asyncio.Future[web.StreamResponse],
                      line: _Line, r: aiohttp.ClientResponse, ctype: str,
                      su: StreamUsage, metered: Callable[[], Awaitable[None]]) -> web.StreamResponse:
        """Pass the stream on chunk by chunk as it arrives, and read it to its end whatever the
        caller does (the usage comes last). From the chunk carrying the last event on, chunks
        are held back until the call's line is written: the caller has the end of the stream
        only after its line is in the ledger."""
        line.sse = True
        resp = web.StreamResponse(status=r.status, headers={"Content-Type": ctype, "Cache-Control": "no-cache"})
        caller = True
        try:
            await resp.prepare(request)
        except (ConnectionError, RuntimeError):
            caller = False
        h = hashlib.sha256()
        kept: list[bytes] | None = []
        size = 0
        whole = False
        held: list[bytes] = []
        tail = b""
        try:
            async for chunk in r.content.iter_any():
                h.update(chunk)
                su.feed(chunk)
                size += len(chunk)
                if kept is not None:
                    if size > self.ledger.bodies_allowance:
                        kept = None
                    else:
                        kept.append(chunk)
                if held or any(m in tail + chunk for m in _END_MARKERS):
                    held.append(chunk)
                elif caller:
                    try:
                        await resp.write(chunk)
                    except (ConnectionError, RuntimeError):
                        caller = False
                        line.error = "the caller disconnected mid-stream (read to the end for usage)"
                tail = chunk[-16:]
            whole = True
        finally:
            line.response_sha256 = "sha256:" + h.hexdigest()
            line.response = b"".join(kept) if kept is not None else b""
            if kept is None:
                line.bodies = "dropped"
            if not whole:
                if caller and request.transport is not None:
                    request.transport.abort()  # a broken upstream stream reaches the caller broken
                responded.set_result(resp)
        await metered()
        await self._recorded(line)
        if caller:
            try:
                for chunk in held:
                    await resp.write(chunk)
                await resp.write_eof()
            except (ConnectionError, RuntimeError):
                pass
        # only now may the server finish the response (it would end the stream early)
        responded.set_result(resp)
        return resp

    async def _broken(self, request: web.BaseRequest, responded: asyncio.Future[web.StreamResponse],
                      line: _Line, prepared: web.StreamResponse | None, shape: Api, status: int,
                      etype: str, message: str) -> None:
        """An upstream that failed: a 502/504 in the provider's shape if nothing was sent yet,
        else the caller's connection cut (a stream it gets whole or visibly broken)."""
        if not responded.done():
            line.status = status
            return await self._answer(request, responded, line, status,
                                      error_body(shape, etype, f"evalrig gateway: {message}"))
        if request.transport is not None:
            request.transport.abort()

    async def _refuse(self, request: web.BaseRequest, responded: asyncio.Future[web.StreamResponse],
                      line: _Line, shape: Api, refused: Refusal, message: str, *,
                      close: bool = False) -> None:
        line.refused = refused
        line.error = message[:300]
        status, payload = refusal(shape, refused, message)
        # the official SDKs retry a 409 or 429 by themselves: a refusal would only be refused again
        await self._answer(request, responded, line, status, payload, close=close,
                           extra={"x-should-retry": "false"})

    async def _answer(self, request: web.BaseRequest, responded: asyncio.Future[web.StreamResponse],
                      line: _Line, status: int, payload: bytes, ctype: str = "application/json", *,
                      close: bool = False, extra: Mapping[str, str] | None = None) -> None:
        """Write the call's line, then send a whole response now."""
        line.status = status
        line.response, line.response_sha256 = payload, sha256_bytes(payload)
        await self._recorded(line)
        resp = web.Response(status=status, body=payload, headers={"Content-Type": ctype, **(extra or {})})
        if close:
            resp.force_close()
        try:
            await resp.prepare(request)
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            line.error = line.error or "the caller disconnected before the answer"
        if not responded.done():
            responded.set_result(resp)

    async def _read_body(self, request: web.BaseRequest, line: _Line) -> tuple[bytes, str | None]:
        """(the body, None or why it was not read whole: "size" over BODY_LIMIT, "held" over
        the session's HELD_LIMIT, "broken" when the caller went away mid-body). What is read
        counts as held until the call is admitted or ends."""
        declared = request.content_length
        if declared is not None and declared > BODY_LIMIT:
            return b"", "size"
        if declared is not None:
            # A declared length is held whole before the first byte is read, so bodies that
            # arrive together are admitted first come, first held, up to the limit, and the
            # rest refused at once; counted chunk by chunk, every body being read would cross
            # the limit together and nearly all be refused.
            if self._held + declared > HELD_LIMIT:
                return b"", "held"
            line.held += declared
            self._held += declared
        counted = declared or 0  # bytes of this body already counted as held
        parts: list[bytes] = []
        size = 0
        try:
            while True:
                chunk = await request.content.read(1 << 16)
                if not chunk:
                    break
                parts.append(chunk)
                size += len(chunk)
                if size > counted:  # chunked, or inflated past its declared (compressed) length
                    line.held += size - counted
                    self._held += size - counted
                    counted = size
                if size > BODY_LIMIT:
                    return b"".join(parts), "size"
                if self._held > HELD_LIMIT:
                    return b"".join(parts), "held"
        except Exception:  # noqa: BLE001 - the caller went away: the call still gets its line
            return b"".join(parts), "broken"
        return b"".join(parts), None

    # -- the record ---------------------------------------------------------------------------

    def _record(self, line: _Line) -> None:
        """Bodies first (within the allowance), then the line (runs in the write pool)."""
        if line.bodies == "kept":
            suffix = ".response.sse" if line.sse else ".response.json"
            if self.ledger.keep_bodies(len(line.request) + len(line.response)):
                try:
                    self.ledger.write_body(line.seq, ".request.json", line.request)
                    if line.response_sha256 is not None:
                        self.ledger.write_body(line.seq, suffix, line.response)
                except OSError as e:  # the line is kept whatever happens to the bodies
                    line.bodies = "dropped"
                    line.error = line.error or f"bodies not kept: {type(e).__name__}"
            else:
                line.bodies = "dropped"
        line.request = line.response = b""
        try:
            call = line.model_call()
        except ValueError as e:  # a field the record refuses: the call still has its line
            line.usage_raw, line.cost_usd = None, max(0.0, line.cost_usd)
            line.error = f"gateway error: the line did not validate ({type(e).__name__}): usage_raw dropped"
            try:
                call = line.model_call()
            except ValueError:
                line.model, line.usage, line.usage_source, line.cost_usd = None, None, None, 0.0
                line.error = "gateway error: the line did not validate: its model and usage dropped"
                call = line.model_call()
        shown, line.shown = line.shown, None
        self.ledger.append(call, *(shown or ()), needles=self.grant.needles)


class _Ended(Exception):
    """The session closed before this call was admitted: it goes no further."""


_TOO_MANY = object()


def _parse(body: bytes) -> Any:
    """The body's JSON, None when it is not JSON, or _TOO_MANY when it holds more than
    MAX_CONTAINERS arrays and objects or MAX_VALUES values (counted on the bytes, strings
    left out, before any Python object is built)."""
    if body.count(b"{") + body.count(b"[") > MAX_CONTAINERS or body.count(b",") > MAX_VALUES:
        bare = _STRINGS.sub(b"", body)
        if bare.count(b"{") + bare.count(b"[") > MAX_CONTAINERS or bare.count(b",") > MAX_VALUES:
            return _TOO_MANY
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


def _upstream_fields(line: _Line, obj: dict[str, Any]) -> None:
    """What the gateway sets in every forwarded body: Responses `store: false` (its default is
    true), and a streamed chat's usage asked for (it comes last, as one more chunk)."""
    if line.api == "openai-responses" or (line.api == "openai-chat" and "store" in obj):
        obj["store"] = False
    if line.api == "openai-chat" and line.stream:
        so = obj.get("stream_options")
        if not isinstance(so, dict) or so.get("include_usage") is not True:
            obj["stream_options"] = {**(so if isinstance(so, dict) else {}), "include_usage": True}


def _dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


class _Closing(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


def _scan(data: bytes, needles: tuple[bytes, ...]) -> str:
    return scan_body_verdict(data, needles, cpu_s=SCAN_CPU_S)


def _priced(price: Pricer, qualified: str, provider: str, usage: CallUsage, as_of: datetime) -> float | None:
    """The pricer's figure; a pricer that fails prices nothing (the line says so) rather
    than failing the call."""
    try:
        return price(qualified, provider, usage, as_of)
    except Exception:  # noqa: BLE001
        return None


def _without_key(payload: bytes, key: str | None) -> bytes:
    """An upstream's answer with the key it was sent blotted out, should it quote it (some
    providers' 401s do): the key never reaches the agent or the evidence."""
    if key and key.encode() in payload:
        return payload.replace(key.encode(), b"[key]")
    return payload


def _is_json_object(data: bytes) -> bool:
    try:
        return isinstance(orjson.loads(data), dict)
    except orjson.JSONDecodeError:
        return False
