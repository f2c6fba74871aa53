"""What the sync and the asyncio worker share: handlers, options, reports."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable, Generic, Mapping, Optional, TypeVar

from . import errors
from .results import ceil_ms, to_timedelta
from .types import Delivery, Seconds

log = logging.getLogger("hourglass")

#: WorkerOptions' default shutdown_timeout, in seconds.
DEFAULT_SHUTDOWN_TIMEOUT = 30.0

#: How long a poll waits for a message before it asks again, in seconds.
DEFAULT_POLL_WAIT = 20.0

H = TypeVar("H", bound=Callable[..., object])


@dataclass(frozen=True)
class TopicOptions:
    """The options of one topic of a worker; None takes the worker's."""

    concurrency: Optional[int] = None
    lease: Optional[Seconds] = None


@dataclass(frozen=True)
class TopicConfig:
    """What one topic's loop runs with."""

    topic: str
    concurrency: int
    lease_ms: int  # 0: the server's --default-lease
    poll_wait_ms: int


class WorkerBase(Generic[H]):
    """Handler registration, options and error reports of a worker."""

    def __init__(
        self,
        concurrency: int,
        lease: Optional[Seconds],
        shutdown_timeout: Seconds,
        poll_wait: Seconds,
        topics: Optional[Mapping[str, TopicOptions]],
        on_error: Optional[Callable[[BaseException], None]],
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"hourglass: concurrency {concurrency!r}: want a whole number of 1 or more")
        self._concurrency = concurrency
        self._lease = lease
        self._shutdown_timeout = to_timedelta("shutdown_timeout", shutdown_timeout).total_seconds()
        wait = to_timedelta("poll_wait", poll_wait)
        if not timedelta(0) < wait <= timedelta(minutes=5):
            raise ValueError(f"hourglass: poll_wait {wait}: want more than 0, at most 5 minutes")
        self._poll_wait_ms = ceil_ms(wait)
        self._topic_options = dict(topics or {})
        self._on_error = on_error
        self._handlers: dict[str, H] = {}
        self._mu = threading.Lock()
        self._started = False

    def handler(self, topic: str) -> Callable[[H], H]:
        """A decorator that makes the function consume topic::

            @worker.handler("orders")
            def handle(d: hourglass.Delivery) -> None: ...
        """

        def register(fn: H) -> H:
            self.handle(topic, fn)
            return fn

        return register

    def handle(self, topic: str, fn: H) -> None:
        """Consumes topic with fn (the non-decorator form of handler)."""
        with self._mu:
            if self._started:
                raise errors.HourglassError("hourglass: Worker.handle after run")
            if topic in self._handlers:
                raise ValueError(f"hourglass: Worker.handle: topic {topic!r} already has a handler")
            self._handlers[topic] = fn

    def _start(self) -> dict[str, tuple[TopicConfig, H]]:
        with self._mu:
            if self._started:
                raise errors.HourglassError("hourglass: worker already started")
            if not self._handlers:
                raise errors.HourglassError("hourglass: Worker.run: no topic to consume: register a handler first")
            self._started = True
            out = {}
            for topic, fn in self._handlers.items():
                o = self._topic_options.get(topic, TopicOptions())
                lease = o.lease if o.lease is not None else self._lease
                cfg = TopicConfig(
                    topic=topic,
                    concurrency=o.concurrency or self._concurrency,
                    lease_ms=0 if lease is None else ceil_ms(to_timedelta("lease", lease)),
                    poll_wait_ms=self._poll_wait_ms,
                )
                out[topic] = (cfg, fn)
            return out

    def _report(self, err: BaseException) -> None:
        """Tells on_error (or the "hourglass" logger) of an error that does
        not stop the worker."""
        if self._on_error is not None:
            try:
                self._on_error(err)
            except Exception:
                log.exception("hourglass: the worker's on_error raised")
        else:
            log.warning("%s", err)


def lease_of(d: Delivery) -> float:
    """d's lease in seconds, as the server gave it (both on its clock)."""
    return (d.lease_expires_at - d.received_at).total_seconds()
