"""The client-side rate limit on API requests: one token bucket per instance.

Like a Kubernetes controller's --kube-api-qps / --kube-api-burst: requests go at once while
tokens last (up to `burst`), then at the sustained rate `qps`. Every pass of an instance
shares one bucket, so concurrent events cannot add up to more. A wait that would pass the
caller's deadline is refused at once (ApiUnavailable: the event is answered 503 and retried).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from podsweeper.errors import ApiUnavailable


class RateLimiter:
    def __init__(
        self,
        qps: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be > 0 and burst >= 1")
        self.qps, self.burst = qps, burst
        self._clock, self._sleep = clock, sleep
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    def acquire(self, deadline: float | None = None) -> float:
        """Take one token, waiting for it if need be; returns the seconds waited."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            wait = 0.0 if self._tokens >= 1 else (1 - self._tokens) / self.qps
            if deadline is not None and now + wait > deadline:
                raise ApiUnavailable(
                    f"client-side rate limit ({self.qps:g}/s, burst {self.burst}): "
                    f"the next request would wait {wait:.2f}s, past this event's time bound"
                )
            self._tokens -= 1  # reserved: a later caller waits behind this one
        if wait > 0:
            self._sleep(wait)
        return wait
