"""One API call as every part of the real client makes it: bounded, rate-limited, raw.

Every call ends by the event's deadline, waits for the instance's rate limiter, reads the raw
JSON body (`_preload_content=False`) for the typed edge, and waits out one short Retry-After.
A failure becomes ApiUnavailable (-> 503, the source retries); 404 is None. A name the API
server could never accept is never asked for.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Self, TypeVar

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

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


def _retry_after(error: ApiException) -> float | None:
    value = (error.headers or {}).get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


@dataclass
class Calls:
    """The connection, the deadline and the rate limiter every request of the client shares."""

    api: client.ApiClient
    deadline: float | None = None  # time.monotonic() value; None = unbounded (CLI sweep)
    limiter: RateLimiter | None = None  # shared by every view of this cluster

    def __post_init__(self) -> None:
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    def bounded(self, deadline: float) -> Self:
        """A view of this cluster whose calls all end by `deadline` (shares the connection pool)."""
        view = type(self).__new__(type(self))
        view.api, view.deadline, view.core, view.custom = self.api, deadline, self.core, self.custom
        view.limiter = self.limiter
        return view

    def _timeout(self) -> float | None:
        if self.deadline is None:
            return 30.0
        remaining = self.deadline - time.monotonic()
        if remaining <= 0.05:
            raise ApiUnavailable("time bound for this event exceeded")
        return remaining

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One API call; returns the decoded JSON body. 404 -> None."""
        body = self._request(what, fn, *args, **kwargs)
        return None if body is None else json.loads(body or b"null")

    def _request(
        self,
        what: str,
        fn: Callable[..., Any],
        *args: Any,
        conflicts: tuple[int, ...] = (409,),
        **kwargs: Any,
    ) -> bytes | None:
        """One API call; returns the raw body. 404 -> None; `conflicts` raise ApiException."""
        for attempt in (1, 2):
            try:
                if self.limiter is not None:
                    self.limiter.acquire(self.deadline)
                response = fn(*args, _preload_content=False, _request_timeout=self._timeout(), **kwargs)
                return response.data or b""
            except ApiException as error:
                if error.status == 404:
                    return None
                wait = _retry_after(error)
                if (
                    error.status == 429
                    and attempt == 1
                    and wait is not None
                    and wait <= MAX_RETRY_AFTER_WAIT
                    and self._fits(wait)
                ):
                    time.sleep(wait)
                    continue
                if error.status in conflicts:
                    raise
                raise ApiUnavailable(
                    f"{what}: API answered {error.status} {error.reason}", retry_after=wait
                ) from None
            except (urllib3.exceptions.HTTPError, OSError) as error:
                raise ApiUnavailable(f"{what}: {type(error).__name__}: {error}"[:300]) from None
        raise AssertionError("unreachable")

    def _fits(self, wait: float) -> bool:
        return self.deadline is None or time.monotonic() + wait < self.deadline - 0.5

    def _paged(
        self,
        parse_page: Callable[[bytes], tuple[list[Any], list[str], str | None]],
        what: str,
        fn: Callable[..., Any],
        *args: Any,
        **kwargs: Any,
    ) -> Iterator[Any]:
        """Objects of a paginated LIST, each page validated straight from the API's bytes.

        A collection the API does not serve (a CRD not installed) answers 404: no objects.
        """
        token = None
        while True:
            body = self._request(what, fn, *args, limit=PAGE_SIZE, _continue=token, **kwargs)
            objects, unreadable, token = parse_page(body or b"{}")
            for reason in unreadable:
                log.warning("ignoring an object the API returned: %s", reason)
            yield from objects
            if not token:
                return

    def _listed(
        self,
        parse_page: Callable[[bytes], tuple[list[Any], list[str], str | None]],
        what: str,
        namespace: str | None,
        everywhere: Callable[..., Any],
        within: Callable[..., Any],
        **kwargs: Any,
    ) -> Iterator[Any]:
        """A paginated LIST in `namespace` (by `within`), or in every namespace (by `everywhere`)
        when it is None. `kwargs`: the client method's arguments, by name, so that one set
        serves both methods."""
        if namespace is None:
            return self._paged(parse_page, what, everywhere, **kwargs)
        return self._paged(parse_page, what, within, namespace=namespace, **kwargs)

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
