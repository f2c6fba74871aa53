"""The asyncio client and worker, on grpc.aio: :class:`AsyncClient` has
the calls of :class:`hourglass.Client` as coroutines (and async iterators
for the listings and the stream), :class:`AsyncWorker` runs ``async def``
handlers (or plain functions, on threads) as :class:`hourglass.Worker`
runs its own."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import (
    Any,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Optional,
    Sequence,
    TypeVar,
    Union,
)

import grpc
import grpc.aio

from . import _convert as cv
from . import errors
from ._channel import DEFAULT_ADDR, credentials, target_of
from ._aioworker import AsyncHandler, AsyncWorker
from ._workerbase import TopicOptions
from .results import action_of
from .types import (
    Backfilled,
    Calendar,
    WorkingTime,
    ID,
    CancelResult,
    DeletedTopic,
    Delivery,
    Found,
    Frozen,
    Message,
    Policies,
    Policy,
    PolicyField,
    RecurringSchedule,
    RedriveResult,
    Ref,
    ScheduleInfo,
    ScheduleResult,
    Seconds,
    State,
    StoredMessage,
    TopicInfo,
)
from .v1 import hourglass_pb2 as pb
from .v1 import hourglass_pb2_grpc as pb_grpc

__all__ = ["AsyncClient", "AsyncWorker", "AsyncHandler", "TopicOptions"]

T = TypeVar("T")


class AsyncClient:
    """A client of one Hourglass server on asyncio (grpc.aio), with the
    options and the calls of :class:`hourglass.Client` as coroutines.
    Create it inside a running event loop and ``await close()`` it (or use
    ``async with``)."""

    def __init__(
        self,
        addr: str = DEFAULT_ADDR,
        *,
        token: Optional[str] = None,
        headers: Optional[Mapping[str, str]] = None,
        root_certificates: Optional[bytes] = None,
        options: Sequence[tuple[str, Any]] = (),
        timeout: Optional[float] = None,
    ) -> None:
        t = target_of(addr, token, headers, options)
        if t.secure:
            self._channel = grpc.aio.secure_channel(t.target, credentials(root_certificates), options=t.options)
        else:
            self._channel = grpc.aio.insecure_channel(t.target, options=t.options)
        self._stub = pb_grpc.HourglassServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self._md = t.metadata
        self._timeout = timeout

    async def close(self) -> None:
        """Closes the channel; calls in flight fail."""
        await self._channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def rpc(self) -> pb_grpc.HourglassServiceStub:
        """The generated stub on the client's grpc.aio channel."""
        return self._stub

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The metadata sent with every call (the token, the headers)."""
        return self._md

    async def _call(
        self, name: str, req: Any, wrap: Callable[[str, grpc.RpcError], errors.RpcError] = errors.from_grpc
    ) -> Any:
        try:
            return await getattr(self._stub, name)(req, timeout=self._timeout, metadata=self._md)
        except grpc.RpcError as e:
            raise wrap(name, e) from e

    # --- producing ---------------------------------------------------------

    async def schedule(
        self,
        topic: str,
        body: Union[bytes, str] = b"",
        *,
        headers: Optional[Mapping[str, str]] = None,
        delay: Optional[Seconds] = None,
        at: Optional[datetime] = None,
        level: Optional[int] = None,
        key: str = "",
        working: Optional[WorkingTime] = None,
        flow_key: str = "",
        ttl: Optional[Seconds] = None,
        expire_at: Optional[datetime] = None,
    ) -> ID:
        """As Client.schedule."""
        return await self.schedule_message(Message(topic, body, headers, delay, at, level, key, working, flow_key, ttl, expire_at))

    async def schedule_message(self, m: Message) -> ID:
        """As Client.schedule_message."""
        res = await self._call("Schedule", cv.schedule_request(m))
        return cv.id_of("Schedule", res.id)

    async def schedule_batch(self, messages: Sequence[Message]) -> list[ID]:
        """As Client.schedule_batch."""
        reqs = []
        for i, m in enumerate(messages):
            try:
                reqs.append(cv.schedule_request(m))
            except errors.InvalidMessage as e:
                raise errors.InvalidMessage(f"messages[{i}]: {str(e).removeprefix('hourglass: invalid message: ')}") from e
        res = await self._call("ScheduleBatch", pb.ScheduleBatchRequest(messages=reqs))
        if len(res.results) != len(reqs):
            raise errors.HourglassError(
                f"hourglass: ScheduleBatch: the server answered {len(res.results)} results for {len(reqs)} messages"
            )
        return [cv.id_of("ScheduleBatch", r.id) for r in res.results]

    async def schedule_stream(
        self, messages: Union[Iterable[Message], AsyncIterable[Message]]
    ) -> AsyncIterator[ScheduleResult]:
        """As Client.schedule_stream, from an iterable or an async iterable."""
        call = self._stub.ScheduleStream(metadata=self._md)
        sent: "asyncio.Queue[Message]" = asyncio.Queue()
        failed: list[BaseException] = []

        async def write() -> None:
            # Writes while the answers are read: a message refused here ends
            # the requests, and its error is raised after the answers to
            # those sent before it.
            try:
                async for m in _aiter(messages):
                    req = pb.ScheduleStreamRequest(message=cv.schedule_request(m))
                    sent.put_nowait(m)
                    await call.write(req)
            except grpc.RpcError:
                pass  # the stream broke: reading tells how
            except Exception as e:
                failed.append(e)
            finally:
                try:
                    await call.done_writing()
                except grpc.RpcError:
                    pass

        writer = asyncio.ensure_future(write())
        try:
            while True:
                res = await call.read()
                if res is grpc.aio.EOF:
                    break
                m = sent.get_nowait()
                kind = res.WhichOneof("kind")
                if kind == "result":
                    yield ScheduleResult(m, id=cv.id_of("ScheduleStream", res.result.id))
                elif kind == "error":
                    code = errors.code_of(res.error.code)
                    yield ScheduleResult(m, error=errors.error_of("ScheduleStream", code, res.error.message))
                else:
                    raise errors.HourglassError(f"hourglass: ScheduleStream: the server answered {kind!r} to a message")
            await writer
        except grpc.RpcError as e:
            raise errors.from_grpc("ScheduleStream", e) from e
        finally:
            writer.cancel()
            call.cancel()
        if failed:
            raise failed[0]

    async def cancel(self, ref: Ref) -> CancelResult:
        """As Client.cancel."""
        return cv.cancel_result(await self._call("Cancel", cv.cancel_request(ref)))

    async def edit(
        self, ref: Ref, *, body: Union[bytes, str, None] = None, headers: Optional[Mapping[str, str]] = None
    ) -> ID:
        """As Client.edit."""
        return cv.edited_id(await self._call("Edit", cv.edit_request(ref, body, headers)))

    async def reschedule(
        self, ref: Ref, *, delay: Optional[Seconds] = None, at: Optional[datetime] = None, now: bool = False
    ) -> ID:
        """As Client.reschedule."""
        return cv.rescheduled_id(await self._call("Reschedule", cv.reschedule_request(ref, delay, at, now)))

    async def freeze_message(self, ref: Ref) -> Frozen:
        """As Client.freeze_message."""
        return cv.frozen_of(await self._call("FreezeMessage", cv.freeze_request(ref)))

    async def thaw_message(self, ref: Ref) -> ID:
        """As Client.thaw_message."""
        return cv.thawed_id(await self._call("ThawMessage", cv.thaw_request(ref)))

    async def get(self, ref: Ref) -> Found:
        """As Client.get."""
        return cv.found_of(await self._call("Get", cv.get_request(ref)))

    async def list_messages_page(
        self,
        topic: str,
        *,
        state: Union[State, str, None] = None,
        start: Optional[datetime] = None,
        end: Optional[datetime] = None,
        page_size: int = 0,
        page_token: str = "",
    ) -> tuple[list[StoredMessage], str]:
        """As Client.list_messages_page."""
        res = await self._call("List", cv.list_request(topic, state, start, end, page_size, page_token))
        return [cv.stored_of(m) for m in res.messages], res.next_page_token

    def list_messages(
        self,
        topic: str,
        *,
        state: Union[State, str, None] = None,
        start: Optional[datetime] = None,
        end: Optional[datetime] = None,
        page_size: int = 0,
    ) -> AsyncIterator[StoredMessage]:
        """As Client.list_messages: ``async for m in client.list_messages(topic)``."""
        return _pages(lambda tok: self.list_messages_page(topic, state=state, start=start, end=end, page_size=page_size, page_token=tok))

    # --- consuming ---------------------------------------------------------

    async def receive(
        self, topic: str, *, max_messages: int = 1, wait: Seconds = 0, lease: Optional[Seconds] = None
    ) -> list[Delivery]:
        """As Client.receive."""
        req = pb.ReceiveRequest(
            topic=topic, max_messages=max_messages, wait_ms=cv.ms_of("wait", wait), lease_ms=cv.ms_of("lease", lease)
        )
        return [cv.delivery_of(m) for m in (await self._call("Receive", req)).messages]

    async def ack(self, d: Delivery) -> None:
        """As Client.ack."""
        await self._call("Ack", pb.AckRequest(topic=d.topic, receipt=d.receipt))

    async def ack_batch(self, ds: Sequence[Delivery]) -> list[Optional[errors.HourglassError]]:
        """As Client.ack_batch."""
        if not ds:
            return []
        return cv.ack_errors("AckBatch", ds, await self._call("AckBatch", cv.ack_batch_request(ds)))

    async def nack(
        self, d: Delivery, *, delay: Seconds = 0, reason: str = "", dead_letter: bool = False, release: bool = False
    ) -> None:
        """As Client.nack."""
        await self._call("Nack", cv.nack_request(d, delay, reason, dead_letter, release))

    async def extend(self, d: Delivery, lease: Seconds) -> datetime:
        """As Client.extend."""
        req = pb.ExtendRequest(topic=d.topic, receipt=d.receipt, lease_ms=cv.ms_of("lease", lease))
        return cv.time_of((await self._call("Extend", req)).lease_expires_at)

    async def settle(self, d: Delivery, exc: Optional[BaseException]) -> None:
        """As Client.settle."""
        a = action_of(exc)
        if not a.nack:
            await self.ack(d)
            return
        req = pb.NackRequest(
            topic=d.topic, receipt=d.receipt, delay_ms=a.delay_ms, reason=a.reason, dead_letter=a.dead_letter
        )
        await self._call("Nack", req)

    # --- operating ---------------------------------------------------------

    async def topics(self) -> list[TopicInfo]:
        """As Client.topics."""
        return [cv.topic_info_of(t) for t in (await self._call("Topics", pb.TopicsRequest())).topics]

    async def get_policy(self, topic: str) -> Policies:
        """As Client.get_policy."""
        return cv.policies_of(await self._call("GetPolicy", pb.GetPolicyRequest(topic=topic)))

    async def set_policy(
        self, topic: str, policy: Policy, defaults: Iterable[Union[PolicyField, str]] = ()
    ) -> Policies:
        """As Client.set_policy."""
        req = pb.SetPolicyRequest(topic=topic, policy=cv.policy_pb(policy), defaults=cv.defaults_pb(defaults))
        return cv.policies_of(await self._call("SetPolicy", req))

    async def pause(self, topic: str) -> Policies:
        """As Client.pause."""
        return await self.set_policy(topic, Policy(paused=True))

    async def freeze(self, topic: str) -> Policies:
        """As Client.freeze."""
        return await self.set_policy(topic, Policy(freeze=True))

    async def resume(self, topic: str) -> Policies:
        """As Client.resume."""
        return await self.set_policy(topic, Policy(), [PolicyField.PAUSED])

    async def redrive(
        self,
        dead_letter_topic: str,
        *,
        to: str = "",
        reason: str = "",
        ids: Iterable[str] = (),
        rate: int = 0,
        max_messages: int = 0,
    ) -> RedriveResult:
        """As Client.redrive."""
        req = cv.redrive_request(dead_letter_topic, to, reason, ids, rate, max_messages)
        return cv.redrive_of(await self._call("Redrive", req))

    async def purge(self, topic: str, state: Union[State, str]) -> int:
        """As Client.purge."""
        st = cv.state_pb("purge", state, (State.PENDING, State.DUE, State.DEAD_LETTERED))
        return int((await self._call("Purge", pb.PurgeRequest(topic=topic, state=st))).purged)  # type: ignore[arg-type]

    async def delete_topic(self, topic: str) -> DeletedTopic:
        """As Client.delete_topic."""
        return cv.deleted_of(await self._call("DeleteTopic", pb.DeleteTopicRequest(topic=topic)))

    async def time(self) -> datetime:
        """As Client.time."""
        return cv.time_of((await self._call("Time", pb.TimeRequest())).now)

    async def stats(self) -> pb.StatsResponse:
        """As Client.stats."""
        res: pb.StatsResponse = await self._call("Stats", pb.StatsRequest())
        return res

    # --- recurring schedules ----------------------------------------------

    async def _sched(self, name: str, req: Any) -> Any:
        return await self._call(name, req, errors.from_schedule_call)

    async def create_schedule(self, s: RecurringSchedule) -> Optional[datetime]:
        """As Client.create_schedule."""
        return cv.next_of(await self._sched("CreateSchedule", pb.CreateScheduleRequest(schedule=cv.recurring_pb(s))))

    async def update_schedule(self, s: RecurringSchedule) -> Optional[datetime]:
        """As Client.update_schedule."""
        return cv.next_of(await self._sched("UpdateSchedule", pb.UpdateScheduleRequest(schedule=cv.recurring_pb(s))))

    async def pause_schedule(self, name: str) -> None:
        """As Client.pause_schedule."""
        await self._sched("PauseSchedule", pb.PauseScheduleRequest(name=name))

    async def resume_schedule(self, name: str) -> Optional[datetime]:
        """As Client.resume_schedule."""
        return cv.next_of(await self._sched("ResumeSchedule", pb.ResumeScheduleRequest(name=name)))

    async def delete_schedule(self, name: str) -> None:
        """As Client.delete_schedule."""
        await self._sched("DeleteSchedule", pb.DeleteScheduleRequest(name=name))

    async def get_schedule(self, name: str, next_count: int = 0) -> ScheduleInfo:
        """As Client.get_schedule."""
        res = await self._sched("GetSchedule", cv.get_schedule_request(name, next_count))
        return cv.schedule_info_of("GetSchedule", res)

    async def list_schedules_page(
        self, *, topic: str = "", page_size: int = 0, page_token: str = ""
    ) -> tuple[list[ScheduleInfo], str]:
        """As Client.list_schedules_page."""
        req = pb.ListSchedulesRequest(topic=topic, page_size=page_size, page_token=page_token)
        res = await self._call("ListSchedules", req)
        return [cv.schedule_info_of("ListSchedules", g) for g in res.schedules], res.next_page_token

    def list_schedules(self, *, topic: str = "", page_size: int = 0) -> AsyncIterator[ScheduleInfo]:
        """As Client.list_schedules: ``async for s in client.list_schedules()``."""
        return _pages(lambda tok: self.list_schedules_page(topic=topic, page_size=page_size, page_token=tok))

    async def backfill_schedule(self, name: str, start: datetime, end: datetime) -> Backfilled:
        """As Client.backfill_schedule."""
        return cv.backfilled_of(await self._sched("BackfillSchedule", cv.backfill_request(name, start, end)))

    # --- calendars ----------------------------------------------------------

    async def create_calendar(self, c: Calendar) -> None:
        """As Client.create_calendar."""
        await self._call("CreateCalendar", pb.CreateCalendarRequest(calendar=cv.calendar_pb(c)))

    async def update_calendar(self, c: Calendar) -> None:
        """As Client.update_calendar."""
        await self._call("UpdateCalendar", pb.UpdateCalendarRequest(calendar=cv.calendar_pb(c)))

    async def delete_calendar(self, name: str) -> None:
        """As Client.delete_calendar."""
        await self._call("DeleteCalendar", pb.DeleteCalendarRequest(name=name))

    async def get_calendar(self, name: str) -> Calendar:
        """As Client.get_calendar."""
        return cv.calendar_of((await self._call("GetCalendar", pb.GetCalendarRequest(name=name))).calendar)

    async def list_calendars_page(self, *, page_size: int = 0, page_token: str = "") -> tuple[list[Calendar], str]:
        """As Client.list_calendars_page."""
        res = await self._call("ListCalendars", pb.ListCalendarsRequest(page_size=page_size, page_token=page_token))
        return [cv.calendar_of(c) for c in res.calendars], res.next_page_token

    def list_calendars(self, *, page_size: int = 0) -> AsyncIterator[Calendar]:
        """As Client.list_calendars: ``async for c in client.list_calendars()``."""
        return _pages(lambda tok: self.list_calendars_page(page_size=page_size, page_token=tok))



async def _aiter(xs: Union[Iterable[T], AsyncIterable[T]]) -> AsyncIterator[T]:
    if isinstance(xs, AsyncIterable):
        async for x in xs:
            yield x
    else:
        for x in xs:
            yield x


async def _pages(page: Callable[[str], Awaitable[tuple[list[T], str]]]) -> AsyncIterator[T]:
    token = ""
    while True:
        items, token = await page(token)
        for it in items:
            yield it
        if not token:
            return
