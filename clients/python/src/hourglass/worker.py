"""The synchronous worker: :class:`Worker` runs handler functions on threads."""

from __future__ import annotations

import queue
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

import grpc

from . import _convert as cv
from . import errors
from ._workerbase import DEFAULT_POLL_WAIT, DEFAULT_SHUTDOWN_TIMEOUT, TopicConfig, TopicOptions, WorkerBase, lease_of
from .client import Client
from .results import action_of
from .types import Delivery, Seconds
from .v1 import hourglass_pb2 as pb

__all__ = ["Worker", "TopicOptions", "Handler"]

#: A handler: returns to ack its message, raises to nack it (hourglass.results).
Handler = Callable[[Delivery], object]

_MAX_ACK_BATCH = 1000


class Worker(WorkerBase[Handler]):
    """Consumes topics of the built-in queue with handler functions, each
    topic with at most ``concurrency`` handler calls at once (on threads).

    A handler that returns acks its message; one that raises nacks it:
    ``Retry(delay)`` with that delay, ``DeadLetter(reason)`` to
    "<topic>.dlq" at once, anything else with the topic's retry backoff on
    the server (hourglass.results has the table). After the server's
    --max-attempts a nacked message is dead-lettered.

    Each topic long-polls with Receive for as many messages as it has free
    handlers, acks in batches (AckBatch) and nacks one by one. While a
    handler runs, its message's lease is extended by the lease again two
    thirds into each lease. ``lease`` is each message's lease (None: the
    server's --default-lease); ``topics`` holds options of single topics.

    ``run`` consumes until ``stop`` (or SIGTERM or SIGINT, when it runs in
    the main thread): no message is taken any more, those received and not
    started are given back at once, running handlers finish and settle
    their messages for up to ``shutdown_timeout`` seconds; then their
    messages are given back and run returns without them (what they do
    later is dropped). Failed acks and nacks and polls that failed and are
    retried go to ``on_error`` (default: the "hourglass" logger); an error
    retrying cannot fix (a bad topic, a wrong token) stops every topic and
    is what run raises.
    """

    def __init__(
        self,
        client: Client,
        *,
        concurrency: int = 1,
        lease: Optional[Seconds] = None,
        shutdown_timeout: Seconds = DEFAULT_SHUTDOWN_TIMEOUT,
        poll_wait: Seconds = DEFAULT_POLL_WAIT,
        topics: Optional[Mapping[str, TopicOptions]] = None,
        on_error: Optional[Callable[[BaseException], None]] = None,
    ) -> None:
        super().__init__(concurrency, lease, shutdown_timeout, poll_wait, topics, on_error)
        self._client = client
        self._stop = threading.Event()
        self._fatal: list[BaseException] = []

    def stop(self) -> None:
        """Asks run to stop as the class says. Safe from any thread and from
        a signal handler; a second call does nothing more."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        """Whether stop was asked (or SIGTERM came): a long handler may check
        it to cut its work short."""
        return self._stop.is_set()

    def run(self, *, handle_signals: bool = True) -> None:
        """Consumes every topic with a handler until stop; see the class.
        With handle_signals, in the main thread, SIGTERM and SIGINT call
        stop while it runs. A worker runs once."""
        topics = self._start()
        restore = _install_signals(self.stop) if handle_signals else (lambda: None)
        loops = [_TopicLoop(self, cfg, fn) for cfg, fn in topics.values()]
        try:
            for lp in loops:
                lp.start()
            self._stop.wait()
            for lp in loops:
                lp.stop_polling()
            deadline = time.monotonic() + self._shutdown_timeout
            for lp in loops:
                lp.finish(deadline)
        finally:
            restore()
        if self._fatal:
            raise self._fatal[0]

    def _fail(self, err: BaseException) -> None:
        self._fatal.append(err)
        self.stop()


def _install_signals(stop: Callable[[], None]) -> Callable[[], None]:
    """Makes SIGTERM and SIGINT call stop, in the main thread; returns what
    puts the previous handlers back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def on_signal(signum: int, frame: object) -> None:
        # Not stop() itself: the signal may have interrupted this thread
        # inside the lock that stop's Event takes.
        threading.Thread(target=stop, name="hourglass stop", daemon=True).start()

    prev = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for s, h in prev.items():
            signal.signal(s, h)

    return restore


@dataclass(eq=False)
class _Running:
    """A delivery being handled; gone once settled or given back."""

    d: Delivery
    gone: bool = False  # guarded by _TopicLoop.mu
    timer: Optional[threading.Timer] = field(default=None)  # guarded by _TopicLoop.mu


class _TopicLoop:
    """One topic of a Worker: a poller thread, ``concurrency`` handler
    threads and an acker thread."""

    def __init__(self, w: Worker, cfg: TopicConfig, fn: Handler) -> None:
        self.w, self.cfg, self.fn = w, cfg, fn
        self.c = w._client
        self.work: "queue.Queue[Optional[tuple[Delivery, float]]]" = queue.Queue()
        self.acks: "queue.Queue[Optional[Delivery]]" = queue.Queue()
        self.mu = threading.Condition()
        self.inflight = 0  # guarded by mu: received, not yet settled or given back
        self.running: set[_Running] = set()  # guarded by mu
        self.abandoned = False  # guarded by mu: the shutdown timeout passed
        self.poll: Optional[grpc.Future] = None  # guarded by mu
        self.no_extend = False
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        name = f"hourglass {self.cfg.topic}"
        self.poller = threading.Thread(target=self._poll_loop, name=f"{name} poll", daemon=True)
        self.acker = threading.Thread(target=self._ack_loop, name=f"{name} ack", daemon=True)
        self.threads = [
            threading.Thread(target=self._handle_loop, name=f"{name} handler", daemon=True)
            for _ in range(self.cfg.concurrency)
        ]
        for t in [self.poller, self.acker, *self.threads]:
            t.start()

    # --- receiving -------------------------------------------------------

    def _poll_loop(self) -> None:
        backoff = 0.1
        stop = self.w._stop
        while not stop.is_set():
            with self.mu:
                while self.inflight >= self.cfg.concurrency and not stop.is_set():
                    self.mu.wait()
                if stop.is_set():
                    return
                n = self.cfg.concurrency - self.inflight
                req = pb.ReceiveRequest(
                    topic=self.cfg.topic, max_messages=n, wait_ms=self.cfg.poll_wait_ms, lease_ms=self.cfg.lease_ms
                )
                self.poll = self.c.rpc.Receive.future(req, metadata=self.c.metadata)
                fut = self.poll
            try:
                res = fut.result()
            except grpc.FutureCancelledError:
                return
            except grpc.RpcError as e:
                if stop.is_set():
                    return
                err = errors.from_grpc("Receive", e)
                if not errors.is_transient(err):
                    self.w._fail(err)
                    return
                self.w._report(err)
                stop.wait(backoff)
                backoff = min(2 * backoff, 5.0)
                continue
            backoff = 0.1
            got = time.monotonic()
            with self.mu:
                self.inflight += len(res.messages)
            for m in res.messages:
                self.work.put((cv.delivery_of(m), got))

    def stop_polling(self) -> None:
        """Ends the poll in flight; the poller then returns."""
        with self.mu:
            if self.poll is not None:
                self.poll.cancel()
            self.mu.notify_all()
        self.poller.join()

    # --- handling ---------------------------------------------------------

    def _handle_loop(self) -> None:
        while True:
            item = self.work.get()
            if item is None:
                return
            d, got = item
            if self.w._stop.is_set():
                self._release(d)  # stopping: give it back rather than start it
                self._done()
                continue
            r = _Running(d)
            with self.mu:
                abandoned = self.abandoned
                if not abandoned:
                    self.running.add(r)
                    # Two thirds into the lease, counted from when it came.
                    self._extend_later(r, got + lease_of(d) * 2 / 3 - time.monotonic())
            if abandoned:
                self._release(d)
                self._done()
                continue
            exc: Optional[BaseException] = None
            try:
                self.fn(d)
            except BaseException as e:  # SystemExit too: this thread settles d, whatever the handler did
                exc = e
            self._settle(r, exc)
            self._done()

    def _done(self) -> None:
        with self.mu:
            self.inflight -= 1
            self.mu.notify_all()

    def _settle(self, r: _Running, exc: Optional[BaseException]) -> None:
        with self.mu:
            if r.gone:
                return  # given back at the shutdown timeout: the result is dropped
            r.gone = True
            if r.timer is not None:
                r.timer.cancel()
            self.running.discard(r)
        a = action_of(exc)
        if not a.nack:
            self.acks.put(r.d)
            return
        req = pb.NackRequest(
            topic=r.d.topic, receipt=r.d.receipt, delay_ms=a.delay_ms, reason=a.reason, dead_letter=a.dead_letter
        )
        self._unary("Nack", req)

    def _release(self, d: Delivery) -> None:
        """Gives d back unhandled: due again at once, its attempt not counted."""
        self._unary("Nack", pb.NackRequest(topic=d.topic, receipt=d.receipt, release=True))

    def _unary(self, name: str, req: object) -> Optional[object]:
        try:
            res: object = getattr(self.c.rpc, name)(req, metadata=self.c.metadata)
            return res
        except grpc.RpcError as e:
            self.w._report(errors.from_grpc(name, e))
            return None

    def _extend_later(self, r: _Running, after: float) -> None:
        """Extends r's lease after ``after`` seconds, and again each time;
        the caller holds mu."""
        if self.no_extend or r.gone or lease_of(r.d) <= 0:
            return
        r.timer = threading.Timer(max(0.0, after), self._extend, (r,))
        r.timer.daemon = True
        r.timer.start()

    def _extend(self, r: _Running) -> None:
        lease = lease_of(r.d)
        req = pb.ExtendRequest(topic=r.d.topic, receipt=r.d.receipt, lease_ms=int(lease * 1000))
        try:
            self.c.rpc.Extend(req, metadata=self.c.metadata)
        except grpc.RpcError as e:
            err = errors.from_grpc("Extend", e)
            if err.code == grpc.StatusCode.UNIMPLEMENTED:
                self.no_extend = True
            self.w._report(err)
            return
        with self.mu:
            self._extend_later(r, lease * 2 / 3)

    # --- acking -----------------------------------------------------------

    def _ack_loop(self) -> None:
        """Acks with AckBatch calls: what comes while one is in flight goes
        in the next."""
        while True:
            d = self.acks.get()
            if d is None:
                return
            batch = [d]
            end = False
            while len(batch) < _MAX_ACK_BATCH:
                try:
                    more = self.acks.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    end = True
                    break
                batch.append(more)
            res = self._unary("AckBatch", pb.AckBatchRequest(topic=self.cfg.topic, receipts=[x.receipt for x in batch]))
            if isinstance(res, pb.AckBatchResponse):
                for err in cv.ack_errors("AckBatch", batch, res):
                    if err is not None:
                        self.w._report(err)
            if end:
                return

    # --- shutdown ---------------------------------------------------------

    def finish(self, deadline: float) -> None:
        """After polling stopped: gives back what no handler started, waits
        for running handlers until deadline, gives back what they still
        hold, and waits for the acks."""
        for _ in self.threads:
            self.work.put(None)
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        with self.mu:
            self.abandoned = True
            left = list(self.running)
            for r in left:
                r.gone = True
                if r.timer is not None:
                    r.timer.cancel()
            self.running.clear()
        for r in left:
            self._release(r.d)
        self.acks.put(None)
        self.acker.join()
