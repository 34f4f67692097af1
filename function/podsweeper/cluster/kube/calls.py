"""One API call as every part of the real client makes it: bounded, rate-limited, raw.

Every call ends by the event's deadline, waits for the instance's rate limiter, hands the raw
JSON body to the typed edge, and waits out one short Retry-After.
A failure becomes ApiUnavailable (-> 503, the source retries); 404 is None. A name the API
server could never accept is never asked for.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Self, TypeVar
from urllib.parse import quote

import urllib3

from podsweeper.cluster.kube.transport import JSON, Api
from podsweeper.cluster.ratelimit import RateLimiter
from podsweeper.errors import ApiUnavailable, BadEvent

log = logging.getLogger("podsweeper.cluster")

PAGE_SIZE = 500
T = TypeVar("T")
# Longest Retry-After we wait out inside one event (and only if the deadline allows).
MAX_RETRY_AFTER_WAIT = 2.0

# Names the API server accepts (apimachinery validation). A name outside them cannot exist:
# asking for it only earns a 400, or with "/", "..", "%2F" a request for another URL. Such
# names come only from hostile or broken payloads; they read as "not there".
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def can_exist(namespace: str, name: str) -> bool:
    """Could a namespaced object with this namespace and name exist at all?"""
    return (
        len(namespace) <= 63
        and _DNS_LABEL.fullmatch(namespace) is not None
        and len(name) <= 253
        and _DNS_SUBDOMAIN.fullmatch(name) is not None
    )


def can_label(namespace: str, job_name: str) -> bool:
    """Could pods in this namespace carry this job name as a label value?"""
    return (
        len(namespace) <= 63
        and _DNS_LABEL.fullmatch(namespace) is not None
        and len(job_name) <= 63
        and _LABEL_VALUE.fullmatch(job_name) is not None
    )


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _offered_continue(status: bytes) -> str | None:
    """The continue token a 410 Status offers for an expired one (metadata.continue), if any."""
    try:
        offered = json.loads(status or b"{}").get("metadata", {}).get("continue")
    except (ValueError, AttributeError):
        return None
    return offered if isinstance(offered, str) and offered else None


def core_path(plural: str, namespace: str | None = None, name: str = "", sub: str = "") -> str:
    """The path of a core (v1) collection or object; namespace None: across all namespaces.
    Names are quoted as the generated client quotes them (callers check them first)."""
    base = "/api/v1" if namespace is None else f"/api/v1/namespaces/{quote(namespace, safe='')}"
    return "/".join(part for part in (base, plural, quote(name, safe=""), sub) if part)


def group_path(group: str, version: str, plural: str, namespace: str | None = None, name: str = "") -> str:
    """The path of a custom resource collection or object; namespace None: all namespaces."""
    scope = "" if namespace is None else f"/namespaces/{quote(namespace, safe='')}"
    return "/".join(
        part for part in (f"/apis/{group}/{version}{scope}", plural, quote(name, safe="")) if part
    )


class Refused(Exception):
    """The API refused the request with one of the statuses the caller named as its own to
    handle (409 by default: a precondition failed, or the object exists); `body`: its Status."""

    def __init__(self, status: int, body: bytes = b""):
        super().__init__(status)
        self.status = status
        self.body = body


@dataclass
class Keyring:
    """Where the signing key of podsweeper's finish records is kept (a Secret: namespace/name),
    and the key once read; `retry_at`: when to ask again after it could not be had."""

    secret: str = "podsweeper/podsweeper-record-key"
    make: bool = True  # made when missing (False: a read-only look makes nothing)
    key: bytes | None = None
    retry_at: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)


@dataclass
class Calls:
    """The connection, the deadline and the rate limiter every request of the client shares."""

    api: Api
    deadline: float | None = None  # time.monotonic() value; None = unbounded (CLI sweep)
    limiter: RateLimiter | None = None  # shared by every view of this cluster
    # The key podsweeper's finish records are signed with (records.py), shared by every view.
    keyring: Keyring = field(default_factory=Keyring)

    def bounded(self, deadline: float) -> Self:
        """A view of this cluster whose calls all end by `deadline` (shares the connection pool)."""
        view = type(self).__new__(type(self))
        view.api, view.deadline, view.limiter, view.keyring = self.api, deadline, self.limiter, self.keyring
        return view

    def _timeout(self) -> float:
        if self.deadline is None:
            return 30.0
        remaining = self.deadline - time.monotonic()
        if remaining <= 0.05:
            raise ApiUnavailable("time bound for this event exceeded")
        return remaining

    def _call(self, what: str, method: str, path: str, **kwargs: Any) -> Any:
        """One API call; returns the decoded JSON body. 404 -> None."""
        body = self._request(what, method, path, **kwargs)
        return None if body is None else json.loads(body or b"null")

    def _request(
        self,
        what: str,
        method: str,
        path: str,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = JSON,
        conflicts: tuple[int, ...] = (409,),
    ) -> bytes | None:
        """One API call; returns the raw body. 404 -> None; `conflicts` raise Refused."""
        for attempt in (1, 2):
            try:
                if self.limiter is not None:
                    self.limiter.acquire(self.deadline)
                answer = self.api.request(method, path, query, body, content_type, self._timeout())
            except (urllib3.exceptions.HTTPError, OSError) as error:
                raise ApiUnavailable(f"{what}: {type(error).__name__}: {error}"[:300]) from None
            if answer.status < 300:
                return answer.body
            if answer.status == 404:
                return None
            wait = _retry_after(answer.retry_after)
            if (
                answer.status == 429
                and attempt == 1
                and wait is not None
                and wait <= MAX_RETRY_AFTER_WAIT
                and self._fits(wait)
            ):
                time.sleep(wait)
                continue
            if answer.status in conflicts:
                raise Refused(answer.status, answer.body)
            raise ApiUnavailable(f"{what}: API answered {answer.status} {answer.reason}", retry_after=wait)
        raise AssertionError("unreachable")

    def _fits(self, wait: float) -> bool:
        return self.deadline is None or time.monotonic() + wait < self.deadline - 0.5

    def _paged(
        self,
        parse_page: Callable[[bytes], tuple[list[Any], list[str], str | None]],
        what: str,
        path: str,
        query: dict[str, Any] | None = None,
    ) -> Iterator[Any]:
        """Objects of a paginated LIST, each page validated straight from the API's bytes.

        A collection the API does not serve (a CRD not installed) answers 404: no objects.
        """
        for objects, _ in self._pages(parse_page, what, path, query):
            yield from objects

    def _pages(
        self,
        parse_page: Callable[[bytes], tuple[list[Any], list[str], str | None]],
        what: str,
        path: str,
        query: dict[str, Any] | None = None,
        token: str | None = None,
    ) -> Iterator[tuple[list[Any], str | None]]:
        """A paginated LIST page by page, each with the continue token after it (None after
        the last), starting at `token` (a token of an earlier listing, which may have expired).

        An expired token (410: its snapshot was compacted away) is followed by the token the
        API server offers in its answer, which continues at the newest state (objects changed
        meanwhile may be missed or seen twice: the caller only nominates); without one the
        listing starts again from the beginning."""
        expired_once = False
        while True:
            page_query = {**(query or {}), "limit": PAGE_SIZE, "continue": token}
            may_expire = token is not None and not expired_once
            try:
                body = self._request(what, "GET", path, page_query, conflicts=(410,) if may_expire else ())
            except Refused as expired:
                expired_once, token = True, _offered_continue(expired.body)
                log.info(
                    "%s: continue token expired, %s",
                    what,
                    "going on at the newest state" if token else "starting again",
                )
                continue
            objects, unreadable, token = parse_page(body or b"{}")
            for reason in unreadable:
                log.warning("ignoring an object the API returned: %s", reason)
            yield objects, token or None
            if not token:
                return

    @staticmethod
    def _decoded(decode: Callable[[bytes], T], body: bytes | None) -> T | None:
        """One object through the typed edge; None on 404 or when we cannot read it."""
        if body is None:
            return None
        try:
            return decode(body)
        except BadEvent as error:
            log.warning("ignoring an object the API returned: %s", error)
            return None
