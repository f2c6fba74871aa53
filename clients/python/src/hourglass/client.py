"""The synchronous client: :class:`Client`."""

from __future__ import annotations

import queue
from datetime import datetime
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence, TypeVar, Union

import grpc

from . import _convert as cv
from . import errors
from ._channel import DEFAULT_ADDR, credentials, target_of
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

__all__ = ["Client"]

T = TypeVar("T")


class Client:
    """A client of one Hourglass server over native gRPC (HTTP/2).

    One channel carries every call of all the threads that use the client;
    it connects on first use and again after the server restarts. Use it
    from any number of threads; close it when done (or use it as a context
    manager).

    ``addr`` is "host:port" or "http://host:port" for plain text,
    "https://host:port" for TLS (the system's roots, or
    ``root_certificates`` in PEM). ``token`` is the server's --auth-token,
    sent as "authorization: Bearer <token>" with every call; ``headers``
    are sent with every call too; ``options`` are grpc channel options;
    ``timeout`` (seconds) bounds each unary call (None: no bound).

    A call the server refuses raises the :class:`hourglass.errors.RpcError`
    subclass of its status code, with the server's message.
    """

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
            self._channel = grpc.secure_channel(t.target, credentials(root_certificates), options=t.options)
        else:
            self._channel = grpc.insecure_channel(t.target, options=t.options)
        self._stub = pb_grpc.HourglassServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self._md = t.metadata
        self._timeout = timeout

    def close(self) -> None:
        """Closes the channel; calls in flight fail."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def rpc(self) -> pb_grpc.HourglassServiceStub:
        """The generated stub of the whole API, for calls this class does
        not wrap (pass ``metadata=client.metadata``)."""
        return self._stub

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The metadata sent with every call (the token, the headers)."""
        return self._md

    def _call(self, name: str, req: Any, wrap: Callable[[str, grpc.RpcError], errors.RpcError] = errors.from_grpc) -> Any:
        try:
            return getattr(self._stub, name)(req, timeout=self._timeout, metadata=self._md)
        except grpc.RpcError as e:
            raise wrap(name, e) from e

    # --- producing ---------------------------------------------------------

    def schedule(
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
        """Stores one message and returns its ID once the server has made it
        durable under its fsync policy (``ID.time`` is when it will be
        delivered). At most one of delay, at, level and working; none means
        now.
        See :class:`hourglass.Message` for each field."""
        return self.schedule_message(Message(topic, body, headers, delay, at, level, key, working, flow_key, ttl, expire_at))

    def schedule_message(self, m: Message) -> ID:
        """schedule, with the message as a :class:`hourglass.Message`."""
        res = self._call("Schedule", cv.schedule_request(m))
        return cv.id_of("Schedule", res.id)

    def schedule_batch(self, messages: Sequence[Message]) -> list[ID]:
        """Stores up to 1000 messages atomically, all or none, and returns
        their IDs in order."""
        reqs = []
        for i, m in enumerate(messages):
            try:
                reqs.append(cv.schedule_request(m))
            except errors.InvalidMessage as e:
                raise errors.InvalidMessage(f"messages[{i}]: {str(e).removeprefix('hourglass: invalid message: ')}") from e
        res = self._call("ScheduleBatch", pb.ScheduleBatchRequest(messages=reqs))
        if len(res.results) != len(reqs):
            raise errors.HourglassError(
                f"hourglass: ScheduleBatch: the server answered {len(res.results)} results for {len(reqs)} messages"
            )
        return [cv.id_of("ScheduleBatch", r.id) for r in res.results]

    def schedule_stream(self, messages: Iterable[Message]) -> Iterator[ScheduleResult]:
        """Schedules each message of ``messages`` on one ScheduleStream and
        yields one :class:`hourglass.ScheduleResult` per message, in order:
        its ID, or the error the server refused it with (nothing of it was
        stored; the stream goes on). Requests are sent while answers come
        back, and the server schedules them concurrently, sharing group
        commits. A message the client refuses (InvalidMessage) is raised
        before it is sent; a stream that breaks raises its error."""
        sent: "queue.SimpleQueue[Message]" = queue.SimpleQueue()
        failed: list[BaseException] = []

        def requests() -> Iterator[pb.ScheduleStreamRequest]:
            # Runs on grpc's thread: a message refused here ends the
            # requests, and the caller raises its error after the answers
            # to those sent before it.
            try:
                for m in messages:
                    req = cv.schedule_request(m)
                    sent.put(m)
                    yield pb.ScheduleStreamRequest(message=req)
            except Exception as e:
                failed.append(e)

        call = self._stub.ScheduleStream(requests(), metadata=self._md)
        try:
            for res in call:
                m = sent.get()
                kind = res.WhichOneof("kind")
                if kind == "result":
                    yield ScheduleResult(m, id=cv.id_of("ScheduleStream", res.result.id))
                elif kind == "error":
                    code = errors.code_of(res.error.code)
                    yield ScheduleResult(m, error=errors.error_of("ScheduleStream", code, res.error.message))
                else:
                    raise errors.HourglassError(f"hourglass: ScheduleStream: the server answered {kind!r} to a message")
        except grpc.RpcError as e:
            raise errors.from_grpc("ScheduleStream", e) from e
        finally:
            call.cancel()
        if failed:
            raise failed[0]

    def cancel(self, ref: Ref) -> CancelResult:
        """Makes sure the message ref names (its ID, or its Key) is never
        delivered, if it is not too late; the answer says which."""
        return cv.cancel_result(self._call("Cancel", cv.cancel_request(ref)))

    def reschedule(
        self, ref: Ref, *, delay: Optional[Seconds] = None, at: Optional[datetime] = None, now: bool = False
    ) -> ID:
        """Moves the pending message ref names to a new time (exactly one of
        delay, at and now=True), atomically: the old time never fires, and
        the message is delivered at the new time under the ID returned (its
        origin_id stays the first message's). The first ID (or the Key)
        names the message for its whole life: by it, reschedule moves
        whatever carries the message now. When the server changed nothing
        it raises AlreadyDelivered, AlreadyCancelled or NotPending."""
        return cv.rescheduled_id(self._call("Reschedule", cv.reschedule_request(ref, delay, at, now)))

    def edit(
        self, ref: Ref, *, body: Union[bytes, str, None] = None, headers: Optional[Mapping[str, str]] = None
    ) -> ID:
        """Replaces the body and/or the headers (all of the message's own;
        {} removes them) of the pending message ref names, atomically,
        keeping its delivery time; returns the ID that carries it now (the
        first ID and the Key go on naming it). Its next delivery carries the
        new content, never the old. When the server changed nothing it
        raises AlreadyDelivered (it is being delivered, or was),
        AlreadyCancelled or NotPending."""
        return cv.edited_id(self._call("Edit", cv.edit_request(ref, body, headers)))

    def freeze_message(self, ref: Ref) -> Frozen:
        """Stops the clock of the pending message ref names, atomically: it
        is never delivered until thaw_message, which makes it due the delay
        it had left (Frozen.remaining) from the thaw. It goes on under
        Frozen.id; the first ID and the Key go on naming it, and cancel
        cancels it. When the server changed nothing it raises
        AlreadyFrozen, AlreadyDelivered, AlreadyCancelled or NotPending."""
        return cv.frozen_of(self._call("FreezeMessage", cv.freeze_request(ref)))

    def thaw_message(self, ref: Ref) -> ID:
        """Starts the clock of the frozen message ref names again: it is due
        the delay it had left from now, under the ID returned. When the
        server changed nothing it raises NotFrozen, AlreadyDelivered,
        AlreadyCancelled or NotPending."""
        return cv.thawed_id(self._call("ThawMessage", cv.thaw_request(ref)))

    def get(self, ref: Ref) -> Found:
        """Looks up the message ref names and says what became of it, where
        it is now (Found.rescheduled_to: the ID that carries it after a
        reschedule, retry or redrive). It only reads."""
        return cv.found_of(self._call("Get", cv.get_request(ref)))

    def list_messages_page(
        self,
        topic: str,
        *,
        state: Union[State, str, None] = None,
        start: Optional[datetime] = None,
        end: Optional[datetime] = None,
        page_size: int = 0,
        page_token: str = "",
    ) -> tuple[list[StoredMessage], str]:
        """One page of topic's messages in state (pending by default, in
        delivery order, with deliver_at in [start, end); or due, leased,
        dead-lettered) and the next page's token ("" at the end)."""
        res = self._call("List", cv.list_request(topic, state, start, end, page_size, page_token))
        return [cv.stored_of(m) for m in res.messages], res.next_page_token

    def list_messages(
        self,
        topic: str,
        *,
        state: Union[State, str, None] = None,
        start: Optional[datetime] = None,
        end: Optional[datetime] = None,
        page_size: int = 0,
    ) -> Iterator[StoredMessage]:
        """Every message list_messages_page would list, a page at a time."""
        return _pages(lambda tok: self.list_messages_page(topic, state=state, start=start, end=end, page_size=page_size, page_token=tok))

    # --- consuming ---------------------------------------------------------

    def receive(
        self, topic: str, *, max_messages: int = 1, wait: Seconds = 0, lease: Optional[Seconds] = None
    ) -> list[Delivery]:
        """Long-polls topic once: returns as soon as a message is due (up to
        max_messages, 1 to 1000), or none once ``wait`` (up to 5 min) has
        passed. Each is leased for ``lease`` (None: the server's
        --default-lease)."""
        req = pb.ReceiveRequest(
            topic=topic, max_messages=max_messages, wait_ms=cv.ms_of("wait", wait), lease_ms=cv.ms_of("lease", lease)
        )
        return [cv.delivery_of(m) for m in self._call("Receive", req).messages]

    def ack(self, d: Delivery) -> None:
        """Completes d: it is never delivered again. FailedPrecondition if
        its lease has ended."""
        self._call("Ack", pb.AckRequest(topic=d.topic, receipt=d.receipt))

    def ack_batch(self, ds: Sequence[Delivery]) -> list[Optional[errors.HourglassError]]:
        """Acks up to 1000 deliveries of one topic in one call (one fsync on
        the server); returns one error per delivery (None: acked)."""
        if not ds:
            return []
        return cv.ack_errors("AckBatch", ds, self._call("AckBatch", cv.ack_batch_request(ds)))

    def nack(
        self, d: Delivery, *, delay: Seconds = 0, reason: str = "", dead_letter: bool = False, release: bool = False
    ) -> None:
        """Gives d back: delivered again after delay (0: the topic's retry
        backoff on the server), or to "<topic>.dlq" now with dead_letter,
        or unhandled with release (its attempt not counted); reason is kept
        with it. After the server's --max-attempts it is dead-lettered."""
        self._call("Nack", cv.nack_request(d, delay, reason, dead_letter, release))

    def extend(self, d: Delivery, lease: Seconds) -> datetime:
        """Gives d more time: its lease ends ``lease`` from now instead;
        returns when, on the server's clock."""
        req = pb.ExtendRequest(topic=d.topic, receipt=d.receipt, lease_ms=cv.ms_of("lease", lease))
        return cv.time_of(self._call("Extend", req).lease_expires_at)

    def settle(self, d: Delivery, exc: Optional[BaseException]) -> None:
        """Acks or nacks d by the result of handling it, as a Worker does
        (hourglass.results): None acks, Retry and DeadLetter do what they
        say, any other exception nacks with the topic's backoff."""
        a = action_of(exc)
        if not a.nack:
            self.ack(d)
        else:
            req = pb.NackRequest(
                topic=d.topic, receipt=d.receipt, delay_ms=a.delay_ms, reason=a.reason, dead_letter=a.dead_letter
            )
            self._call("Nack", req)

    # --- operating ---------------------------------------------------------

    def topics(self) -> list[TopicInfo]:
        """The topics the server knows, by name, with counts and policy."""
        return [cv.topic_info_of(t) for t in self._call("Topics", pb.TopicsRequest()).topics]

    def get_policy(self, topic: str) -> Policies:
        """A topic's delivery policy: what it set, and what applies."""
        return cv.policies_of(self._call("GetPolicy", pb.GetPolicyRequest(topic=topic)))

    def set_policy(self, topic: str, policy: Policy, defaults: Iterable[Union[PolicyField, str]] = ()) -> Policies:
        """Changes topic's policy at run time, durably: the fields policy
        sets take their values, those in defaults go back to the server's
        defaults, the others keep theirs."""
        req = pb.SetPolicyRequest(topic=topic, policy=cv.policy_pb(policy), defaults=cv.defaults_pb(defaults))
        return cv.policies_of(self._call("SetPolicy", req))

    def pause(self, topic: str) -> Policies:
        """Stops topic handing out messages, durably, until resume."""
        return self.set_policy(topic, Policy(paused=True))

    def freeze(self, topic: str) -> Policies:
        """Pauses topic with its clock stopped: on resume every message stored
        before and not yet due then is due as much later as the pause lasted."""
        return self.set_policy(topic, Policy(freeze=True))

    def resume(self, topic: str) -> Policies:
        """Lets a paused topic hand out its messages again."""
        return self.set_policy(topic, Policy(), [PolicyField.PAUSED])

    def redrive(
        self,
        dead_letter_topic: str,
        *,
        to: str = "",
        reason: str = "",
        ids: Iterable[str] = (),
        rate: int = 0,
        max_messages: int = 0,
    ) -> RedriveResult:
        """Moves the dead letters of "<topic>.dlq" back as new first attempts
        that keep their origin_id (to ``to``, default each one's origin
        topic; only of ``reason`` or ``ids`` if given). Resumable: a message
        moved before is not moved twice."""
        req = cv.redrive_request(dead_letter_topic, to, reason, ids, rate, max_messages)
        return cv.redrive_of(self._call("Redrive", req))

    def purge(self, topic: str, state: Union[State, str]) -> int:
        """Removes topic's messages in state (pending: cancelled; due,
        dead-lettered: removed from the queue) and says how many."""
        st = cv.state_pb("purge", state, (State.PENDING, State.DUE, State.DEAD_LETTERED))
        return int(self._call("Purge", pb.PurgeRequest(topic=topic, state=st)).purged)  # type: ignore[arg-type]

    def delete_topic(self, topic: str) -> DeletedTopic:
        """Cancels topic's pending messages, removes its queue and policy."""
        return cv.deleted_of(self._call("DeleteTopic", pb.DeleteTopicRequest(topic=topic)))

    def time(self) -> datetime:
        """The server's clock."""
        return cv.time_of(self._call("Time", pb.TimeRequest()).now)

    def stats(self) -> pb.StatsResponse:
        """The server's counters, pending buckets and lateness, as the API
        answers them."""
        res: pb.StatsResponse = self._call("Stats", pb.StatsRequest())
        return res

    # --- recurring schedules ----------------------------------------------

    def _sched(self, name: str, req: Any) -> Any:
        return self._call(name, req, errors.from_schedule_call)

    def create_schedule(self, s: RecurringSchedule) -> Optional[datetime]:
        """Creates the recurring schedule s and arms its first occurrence;
        returns its time (None: none armed). ScheduleExists if the name is
        taken; InvalidArgument for a bad spec, zone or name."""
        return cv.next_of(self._sched("CreateSchedule", pb.CreateScheduleRequest(schedule=cv.recurring_pb(s))))

    def update_schedule(self, s: RecurringSchedule) -> Optional[datetime]:
        """Replaces the definition of the schedule s.name names (its paused
        state and fired count stay) and arms its next occurrence.
        ScheduleNotFound for an unknown name."""
        return cv.next_of(self._sched("UpdateSchedule", pb.UpdateScheduleRequest(schedule=cv.recurring_pb(s))))

    def pause_schedule(self, name: str) -> None:
        """Stops a schedule's occurrences, durably, until resumed."""
        self._sched("PauseSchedule", pb.PauseScheduleRequest(name=name))

    def resume_schedule(self, name: str) -> Optional[datetime]:
        """Arms a paused schedule's next occurrence from now on; its time."""
        return cv.next_of(self._sched("ResumeSchedule", pb.ResumeScheduleRequest(name=name)))

    def delete_schedule(self, name: str) -> None:
        """Deletes a schedule: once it returns, no occurrence is delivered."""
        self._sched("DeleteSchedule", pb.DeleteScheduleRequest(name=name))

    def get_schedule(self, name: str, next_count: int = 0) -> ScheduleInfo:
        """The schedule with its next next_count fire times (0: 5; at most
        100), its armed occurrence and how many fired. It only reads."""
        res = self._sched("GetSchedule", cv.get_schedule_request(name, next_count))
        return cv.schedule_info_of("GetSchedule", res)

    def list_schedules_page(
        self, *, topic: str = "", page_size: int = 0, page_token: str = ""
    ) -> tuple[list[ScheduleInfo], str]:
        """One page of the schedules (of topic, if given), by name, and the
        next page's token ("" at the end)."""
        req = pb.ListSchedulesRequest(topic=topic, page_size=page_size, page_token=page_token)
        res = self._call("ListSchedules", req)
        return [cv.schedule_info_of("ListSchedules", g) for g in res.schedules], res.next_page_token

    def list_schedules(self, *, topic: str = "", page_size: int = 0) -> Iterator[ScheduleInfo]:
        """Every schedule (of topic, if given), by name, a page at a time."""
        return _pages(lambda tok: self.list_schedules_page(topic=topic, page_size=page_size, page_token=tok))

    def backfill_schedule(self, name: str, start: datetime, end: datetime) -> Backfilled:
        """Delivers now the occurrences of the schedule name from start up
        to (not including) end, which must not be after the server's clock
        (at most 10000): one message per occurrence, keyed as the live one
        was, none for an occurrence whose message exists (so a backfill cut
        short is run again safely); they carry the header
        "hourglass-backfill". ScheduleNotFound for an unknown name."""
        return cv.backfilled_of(self._sched("BackfillSchedule", cv.backfill_request(name, start, end)))

    # --- calendars ----------------------------------------------------------

    def create_calendar(self, c: Calendar) -> None:
        """Creates the calendar c, durably. AlreadyExists if the name is
        taken; InvalidArgument for a bad zone, span or date. Calendars are
        not available in cluster mode."""
        self._call("CreateCalendar", pb.CreateCalendarRequest(calendar=cv.calendar_pb(c)))

    def update_calendar(self, c: Calendar) -> None:
        """Replaces the calendar c.name names. Messages stored before keep
        their delivery times; recurring schedules keep to the new one from
        their next occurrence on. NotFound for an unknown name."""
        self._call("UpdateCalendar", pb.UpdateCalendarRequest(calendar=cv.calendar_pb(c)))

    def delete_calendar(self, name: str) -> None:
        """Deletes a calendar; FailedPrecondition, naming the schedule, for
        one a recurring schedule keeps to."""
        self._call("DeleteCalendar", pb.DeleteCalendarRequest(name=name))

    def get_calendar(self, name: str) -> Calendar:
        """The calendar name; NotFound for an unknown name."""
        return cv.calendar_of(self._call("GetCalendar", pb.GetCalendarRequest(name=name)).calendar)

    def list_calendars_page(self, *, page_size: int = 0, page_token: str = "") -> tuple[list[Calendar], str]:
        """One page of the calendars, by name, and the next page's token
        ("" at the end)."""
        res = self._call("ListCalendars", pb.ListCalendarsRequest(page_size=page_size, page_token=page_token))
        return [cv.calendar_of(c) for c in res.calendars], res.next_page_token

    def list_calendars(self, *, page_size: int = 0) -> Iterator[Calendar]:
        """Every calendar, by name, a page at a time."""
        return _pages(lambda tok: self.list_calendars_page(page_size=page_size, page_token=tok))



def _pages(page: Callable[[str], tuple[list[T], str]]) -> Iterator[T]:
    token = ""
    while True:
        items, token = page(token)
        yield from items
        if not token:
            return

