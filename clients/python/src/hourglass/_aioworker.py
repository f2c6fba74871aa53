"""The asyncio worker: :class:`AsyncWorker` (exported by hourglass.aio)."""

from __future__ import annotations

import asyncio
import inspect
import signal
import threading
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Optional, Union

import grpc
import grpc.aio

from . import _convert as cv
from . import errors
from ._workerbase import DEFAULT_POLL_WAIT, DEFAULT_SHUTDOWN_TIMEOUT, TopicConfig, TopicOptions, WorkerBase, lease_of
from .results import action_of
from .types import Delivery, Seconds
from .v1 import hourglass_pb2 as pb

if TYPE_CHECKING:
    from .aio import AsyncClient

#: A handler: an ``async def`` function (or a plain one, run on a thread)
#: that returns to ack its message and raises to nack it.
AsyncHandler = Callable[[Delivery], Union[Awaitable[object], object]]

_MAX_ACK_BATCH = 1000


class AsyncWorker(WorkerBase[AsyncHandler]):
    """The asyncio form of :class:`hourglass.Worker`, with the same options
    and results. Each topic's handlers run as tasks, at most
    ``concurrency`` at once; a plain (not ``async``) handler runs on a
    thread (asyncio.to_thread). ``await run()`` consumes until ``stop()``,
    or SIGTERM or SIGINT when it runs in the main thread. When the
    shutdown timeout passes, the handler tasks still running are
    cancelled and their messages given back."""

    def __init__(
        self,
        client: "AsyncClient",
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
        self._stop: Optional[asyncio.Event] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._stop_early = False
        self._fatal: list[BaseException] = []

    def stop(self) -> None:
        """Asks run to stop. Safe from the event loop, any other thread and
        a signal handler; a second call does nothing more."""
        if self._loop is None or self._stop is None:
            self._stop_early = True
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._stop.set()
        else:
            self._loop.call_soon_threadsafe(self._stop.set)

    @property
    def stopping(self) -> bool:
        """Whether stop was asked (or SIGTERM came)."""
        return self._stop_early or (self._stop is not None and self._stop.is_set())

    async def run(self, *, handle_signals: bool = True) -> None:
        """Consumes every topic with a handler until stop; see the class."""
        topics = self._start()
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if self._stop_early:
            self._stop.set()
        installed: list[signal.Signals] = []
        if handle_signals and threading.current_thread() is threading.main_thread():
            for s in (signal.SIGTERM, signal.SIGINT):
                try:
                    self._loop.add_signal_handler(s, self.stop)
                    installed.append(s)
                except (NotImplementedError, RuntimeError):
                    pass  # no signal handlers on this loop (Windows' proactor)
        loops = [_AsyncTopicLoop(self, cfg, fn) for cfg, fn in topics.values()]
        try:
            for lp in loops:
                lp.start()
            await self._stop.wait()
            for lp in loops:
                await lp.stop_polling()
            deadline = time.monotonic() + self._shutdown_timeout
            for lp in loops:
                await lp.finish(deadline)
        finally:
            for s in installed:
                self._loop.remove_signal_handler(s)
        if self._fatal:
            raise self._fatal[0]

    def _fail(self, err: BaseException) -> None:
        self._fatal.append(err)
        self.stop()


class _AsyncTopicLoop:
    """One topic of an AsyncWorker: a poll task, handler tasks, an acker."""

    def __init__(self, w: AsyncWorker, cfg: TopicConfig, fn: AsyncHandler) -> None:
        self.w, self.cfg, self.fn = w, cfg, fn
        self.rpc = w._client.rpc
        self.md = w._client.metadata
        self.free = asyncio.Semaphore(cfg.concurrency)
        self.tasks: dict["asyncio.Task[None]", Delivery] = {}
        self.handling: set["asyncio.Task[Any]"] = set()  # tasks whose handler runs
        self.acks: "asyncio.Queue[Optional[Delivery]]" = asyncio.Queue()
        self.poll: Optional[Any] = None
        self.stopping = False
        self.no_extend = False

    def start(self) -> None:
        self.poller = asyncio.ensure_future(self._poll_loop())
        self.acker = asyncio.ensure_future(self._ack_loop())

    async def _poll_loop(self) -> None:
        backoff = 0.1
        while not self.stopping:
            await self.free.acquire()
            n = 1
            while not self.free.locked() and n < self.cfg.concurrency:
                await self.free.acquire()  # does not wait: the semaphore is not locked
                n += 1
            if self.stopping:
                self._give_back(n)
                return
            req = pb.ReceiveRequest(
                topic=self.cfg.topic, max_messages=n, wait_ms=self.cfg.poll_wait_ms, lease_ms=self.cfg.lease_ms
            )
            self.poll = self.rpc.Receive(req, metadata=self.md)
            try:
                res = await self.poll
            except asyncio.CancelledError:
                self._give_back(n)
                if self.stopping:
                    return
                raise
            except grpc.RpcError as e:
                self._give_back(n)
                if self.stopping:
                    return
                err = errors.from_grpc("Receive", e)
                if not errors.is_transient(err):
                    self.w._fail(err)
                    return
                self.w._report(err)
                await asyncio.sleep(backoff)
                backoff = min(2 * backoff, 5.0)
                continue
            finally:
                self.poll = None
            backoff = 0.1
            self._give_back(n - len(res.messages))
            got = time.monotonic()
            for m in res.messages:
                d = cv.delivery_of(m)
                task = asyncio.ensure_future(self._handle(d, got))
                self.tasks[task] = d
                task.add_done_callback(self._forget)

    def _give_back(self, n: int) -> None:
        for _ in range(n):
            self.free.release()

    def _forget(self, task: "asyncio.Task[None]") -> None:
        if self.tasks.pop(task, None) is not None:
            self.free.release()

    async def stop_polling(self) -> None:
        self.stopping = True
        if self.poll is not None:
            self.poll.cancel()  # the poller gives back its slots and returns
        else:
            self.poller.cancel()  # waiting for a free handler, or a backoff
        # asyncio.wait: neither raises the poller's CancelledError nor
        # swallows one meant for the caller.
        await asyncio.wait([self.poller])

    async def _handle(self, d: Delivery, got: float) -> None:
        if self.stopping:
            await self._release(d)  # stopping: give it back rather than start it
            return
        extender = None
        if not self.no_extend and lease_of(d) > 0:
            extender = asyncio.ensure_future(self._extend_loop(d, got))
        exc: Optional[BaseException] = None
        task = asyncio.current_task()
        assert task is not None
        self.handling.add(task)
        try:
            if inspect.iscoroutinefunction(self.fn):
                await self.fn(d)
            else:
                r = await asyncio.to_thread(self.fn, d)
                if inspect.isawaitable(r):
                    await r
        except asyncio.CancelledError:
            raise  # the shutdown timeout: finish gives it back
        except Exception as e:
            exc = e
        finally:
            self.handling.discard(task)
            if extender is not None:
                extender.cancel()
        a = action_of(exc)
        if not a.nack:
            self.acks.put_nowait(d)
            return
        req = pb.NackRequest(topic=d.topic, receipt=d.receipt, delay_ms=a.delay_ms, reason=a.reason, dead_letter=a.dead_letter)
        await self._unary("Nack", req)

    async def _extend_loop(self, d: Delivery, got: float) -> None:
        """Extends d's lease by the lease again two thirds into each lease
        (the first counted from when d came)."""
        lease = lease_of(d)
        wait = got + lease * 2 / 3 - time.monotonic()
        while True:
            await asyncio.sleep(max(0.0, wait))
            wait = lease * 2 / 3
            req = pb.ExtendRequest(topic=d.topic, receipt=d.receipt, lease_ms=int(lease * 1000))
            try:
                await self.rpc.Extend(req, metadata=self.md)
            except grpc.RpcError as e:
                err = errors.from_grpc("Extend", e)
                if err.code == grpc.StatusCode.UNIMPLEMENTED:
                    self.no_extend = True
                self.w._report(err)
                return

    async def _release(self, d: Delivery) -> None:
        await self._unary("Nack", pb.NackRequest(topic=d.topic, receipt=d.receipt, release=True))

    async def _unary(self, name: str, req: object) -> Optional[object]:
        try:
            res: object = await getattr(self.rpc, name)(req, metadata=self.md)
            return res
        except grpc.RpcError as e:
            self.w._report(errors.from_grpc(name, e))
            return None

    async def _ack_loop(self) -> None:
        while True:
            d = await self.acks.get()
            if d is None:
                return
            batch = [d]
            end = False
            while len(batch) < _MAX_ACK_BATCH and not self.acks.empty():
                more = self.acks.get_nowait()
                if more is None:
                    end = True
                    break
                batch.append(more)
            res = await self._unary("AckBatch", pb.AckBatchRequest(topic=self.cfg.topic, receipts=[x.receipt for x in batch]))
            if isinstance(res, pb.AckBatchResponse):
                for err in cv.ack_errors("AckBatch", batch, res):
                    if err is not None:
                        self.w._report(err)
            if end:
                return

    async def finish(self, deadline: float) -> None:
        """After polling stopped: waits for the handler tasks until deadline,
        cancels those still running and gives their messages back, and
        waits for the acks."""
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=max(0.0, deadline - time.monotonic()))
        left = [(t, d) for t, d in self.tasks.items() if t in self.handling]
        for task, _ in left:
            task.cancel()
        settling = [t for t in self.tasks if t not in self.handling]
        for _, d in left:
            await self._release(d)
        if settling:
            await asyncio.wait(settling)  # their acks and nacks are on the way
        self.acks.put_nowait(None)
        await self.acker
