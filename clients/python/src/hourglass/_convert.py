"""Between the package's values (types.py) and the API's messages: the
request builders check what they are given, the readers turn answers into
values. Shared by the sync and the asyncio client."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Iterable, Mapping, Optional, Sequence, Union

from google.protobuf.timestamp_pb2 import Timestamp

from . import errors
from .results import ceil_ms, to_timedelta
from .types import (
    EPOCH,
    ID,
    Backfilled,
    Backoff,
    Calendar,
    CalendarPolicy,
    CancelResult,
    DeadLetterInfo,
    DeletedTopic,
    Delivery,
    Found,
    Key,
    Message,
    MisfirePolicy,
    Frozen,
    FrozenPause,
    OverlapPolicy,
    Policies,
    Policy,
    PolicyField,
    RecurringSchedule,
    RedriveResult,
    Ref,
    ScheduleInfo,
    Seconds,
    State,
    StoredMessage,
    TopicInfo,
    WorkingHours,
    WorkingTime,
)
from .v1 import hourglass_pb2 as pb


def timestamp(what: str, t: datetime) -> Timestamp:
    """t as a Timestamp; a naive datetime names no instant and is refused."""
    if not isinstance(t, datetime):
        raise TypeError(f"hourglass: {what} {t!r}: want a datetime")
    if t.tzinfo is None or t.utcoffset() is None:
        raise errors.InvalidMessage(
            f"{what} {t.isoformat()} has no time zone: give an aware datetime (datetime.now(timezone.utc) + ...)"
        )
    d = t - EPOCH
    secs = d.days * 86400 + d.seconds
    return Timestamp(seconds=secs, nanos=d.microseconds * 1000)


def time_of(ts: Timestamp) -> datetime:
    """The datetime (UTC) of a Timestamp, to the microsecond."""
    return EPOCH + timedelta(seconds=ts.seconds, microseconds=ts.nanos // 1000)


def opt_time(msg: object, name: str) -> Optional[datetime]:
    """msg's Timestamp field name as a datetime, None when unset."""
    if not msg.HasField(name):  # type: ignore[attr-defined]
        return None
    return time_of(getattr(msg, name))


def body_of(body: Union[bytes, str]) -> bytes:
    return body.encode("utf-8") if isinstance(body, str) else bytes(body)


def headers_pb(headers: Optional[Mapping[str, str]]) -> list[pb.Header]:
    return [pb.Header(key=k, value=v) for k, v in (headers or {}).items()]


def headers_of(hs: Iterable[pb.Header]) -> dict[str, str]:
    return {h.key: h.value for h in hs}


def delay_ms(what: str, d: Seconds) -> int:
    td = to_timedelta(what, d)
    if td < timedelta(0):
        raise errors.InvalidMessage(f"{what} {td} is negative; use 0 (or nothing) for now")
    return ceil_ms(td)


def schedule_request(m: Message) -> pb.ScheduleRequest:
    """Checks m and builds its request."""
    set_ = [f"{n} {v!r}" for n, v in (("delay", m.delay), ("at", m.at), ("level", m.level), ("working", m.working)) if v is not None]
    if len(set_) > 1:
        raise errors.InvalidMessage(f"{' and '.join(set_)}: set at most one of delay, at, level and working")
    r = pb.ScheduleRequest(topic=m.topic, body=body_of(m.body), headers=headers_pb(m.headers), idempotency_key=m.key, flow_key=m.flow_key)
    if m.delay is not None:
        r.delay_ms = delay_ms("delay", m.delay)
    elif m.at is not None:
        r.deliver_at.CopyFrom(timestamp("at", m.at))
    elif m.level is not None:
        if isinstance(m.level, bool) or not isinstance(m.level, int) or m.level < 1:
            raise errors.InvalidMessage(f"level {m.level!r}: levels are whole numbers from 1")
        r.delay_level = m.level
    elif m.working is not None:
        r.working.CopyFrom(working_pb(m.working))
    if m.ttl is not None and m.expire_at is not None:
        raise errors.InvalidMessage(f"ttl {m.ttl!r} and expire_at {m.expire_at!r}: set at most one of them")
    if m.expire_at is not None:
        r.expire_at.CopyFrom(timestamp("expire_at", m.expire_at))
    elif m.ttl is not None:
        ttl = delay_ms("ttl", m.ttl)
        if ttl < 1:
            raise errors.InvalidMessage(f"ttl {m.ttl!r}: more than 0, counted from the delivery time")
        r.ttl_ms = ttl
    return r


def working_pb(w: WorkingTime) -> pb.WorkingTime:
    """Checks w and builds its WorkingTime."""
    out = pb.WorkingTime(calendar=w.calendar, at_time=w.at_time)
    if (w.days is None) == (w.duration is None):
        raise errors.InvalidMessage(f"working time in {w.calendar!r}: give one of days and duration")
    if w.days is not None:
        if isinstance(w.days, bool) or not isinstance(w.days, int) or not 1 <= w.days <= 3650:
            raise errors.InvalidMessage(f"working time in {w.calendar!r}: days {w.days!r}: a whole number from 1 to 3650")
        out.days = w.days
    else:
        if w.at_time:
            raise errors.InvalidMessage(f"working time in {w.calendar!r}: at_time goes with days, not duration")
        out.duration_ms = delay_ms("duration", w.duration)  # type: ignore[arg-type]
    if w.after is not None:
        out.after.CopyFrom(timestamp("after", w.after))
    return out


_weekdays = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_weekday_names = dict(zip(_weekdays, ("WEEKDAY_MONDAY", "WEEKDAY_TUESDAY", "WEEKDAY_WEDNESDAY", "WEEKDAY_THURSDAY",
                                      "WEEKDAY_FRIDAY", "WEEKDAY_SATURDAY", "WEEKDAY_SUNDAY")))


def calendar_pb(c: Calendar) -> pb.Calendar:
    """Checks c and builds its Calendar."""
    out = pb.Calendar(name=c.name, time_zone=c.time_zone, closed_dates=list(c.closed))
    for h in c.hours:
        if h.day not in _weekdays:
            raise errors.InvalidMessage(f"calendar {c.name!r}: day {h.day!r}: want one of {', '.join(_weekdays)}")
        out.hours.append(pb.WorkingHours(day=pb.Weekday.Value(_weekday_names[h.day]), start=h.start, end=h.end))
    return out


def calendar_of(m: pb.Calendar) -> Calendar:
    return Calendar(
        name=m.name,
        time_zone=m.time_zone,
        hours=[WorkingHours(_weekdays[h.day - 1], h.start, h.end) for h in m.hours],
        closed=list(m.closed_dates),
    )


def backfill_request(name: str, start: datetime, end: datetime) -> pb.BackfillScheduleRequest:
    r = pb.BackfillScheduleRequest(name=name)
    r.to.CopyFrom(timestamp("end", end))
    getattr(r, "from").CopyFrom(timestamp("start", start))
    return r


def backfilled_of(res: pb.BackfillScheduleResponse) -> Backfilled:
    return Backfilled(stored=res.stored, existing=res.existing)


def ref_fields(ref: Ref) -> tuple[str, str, str]:
    """The id, topic and key fields of a request that names a message."""
    if isinstance(ref, Key):
        return "", ref.topic, ref.key
    if isinstance(ref, str):
        return str(ref), "", ""
    raise TypeError(f"hourglass: {ref!r} names no message: want an ID (or its text) or a Key(topic, key)")


def cancel_request(ref: Ref) -> pb.CancelRequest:
    id_, topic, key = ref_fields(ref)
    return pb.CancelRequest(id=id_, topic=topic, key=key)


def get_request(ref: Ref) -> pb.GetRequest:
    id_, topic, key = ref_fields(ref)
    return pb.GetRequest(id=id_, topic=topic, key=key)


def id_of(call: str, text: str) -> ID:
    """An ID the server answered for call."""
    try:
        return ID(text)
    except ValueError as e:
        raise errors.HourglassError(f"hourglass: {call}: the server answered an ID this client cannot read: {e}") from e


def opt_id(text: str) -> Optional[ID]:
    return ID(text) if text else None


_cancel_results = {
    pb.CANCEL_RESULT_CANCELLED: CancelResult.CANCELLED,
    pb.CANCEL_RESULT_ALREADY_CANCELLED: CancelResult.ALREADY_CANCELLED,
    pb.CANCEL_RESULT_ALREADY_DELIVERED: CancelResult.ALREADY_DELIVERED,
    pb.CANCEL_RESULT_UNKNOWN: CancelResult.UNKNOWN,
}


def cancel_result(res: pb.CancelResponse) -> CancelResult:
    r = _cancel_results.get(res.result)
    if r is None:
        raise errors.HourglassError(
            f"hourglass: Cancel: the server answered {res.result}, which this client does not know"
        )
    return r


def reschedule_request(
    ref: Ref, delay: Optional[Seconds], at: Optional[datetime], now: bool
) -> pb.RescheduleRequest:
    id_, topic, key = ref_fields(ref)
    r = pb.RescheduleRequest(id=id_, topic=topic, key=key)
    given = sum(1 for x in (delay is not None, at is not None, now) if x)
    if given != 1:
        raise errors.InvalidMessage(
            "reschedule without a time: give delay, at or now=True"
            if given == 0
            else "reschedule: give one of delay, at and now=True"
        )
    if now:
        r.now = True
    elif at is not None:
        r.deliver_at.CopyFrom(timestamp("at", at))
    elif delay is not None:
        r.delay_ms = delay_ms("reschedule delay", delay)
    return r


def edit_request(ref: Ref, body: Union[bytes, str, None], headers: Optional[Mapping[str, str]]) -> pb.EditRequest:
    id_, topic, key = ref_fields(ref)
    if body is None and headers is None:
        raise errors.InvalidMessage("edit without a change: give body, headers, or both")
    r = pb.EditRequest(id=id_, topic=topic, key=key, headers=headers_pb(headers), set_headers=headers is not None)
    if body is not None:
        r.body = body_of(body)
    return r


def edited_id(res: pb.EditResponse) -> ID:
    """The edited message's ID, or the exception of an edit that changed nothing."""
    if res.result == pb.EDIT_RESULT_EDITED:
        return id_of("Edit", res.id)
    if res.result == pb.EDIT_RESULT_ALREADY_DELIVERED:
        raise errors.AlreadyDelivered()
    if res.result == pb.EDIT_RESULT_ALREADY_CANCELLED:
        raise errors.AlreadyCancelled()
    if res.result == pb.EDIT_RESULT_UNKNOWN:
        raise errors.NotPending()
    raise errors.HourglassError(f"hourglass: Edit: the server answered {res.result}, which this client does not know")


def freeze_request(ref: Ref) -> pb.FreezeMessageRequest:
    id_, topic, key = ref_fields(ref)
    return pb.FreezeMessageRequest(id=id_, topic=topic, key=key)


def thaw_request(ref: Ref) -> pb.ThawMessageRequest:
    id_, topic, key = ref_fields(ref)
    return pb.ThawMessageRequest(id=id_, topic=topic, key=key)


def _freeze_refusal(rpc: str, result: int) -> errors.HourglassError:
    by_result: dict[int, type[errors.RescheduleRefused]] = {
        pb.FREEZE_RESULT_ALREADY_FROZEN: errors.AlreadyFrozen,
        pb.FREEZE_RESULT_NOT_FROZEN: errors.NotFrozen,
        pb.FREEZE_RESULT_ALREADY_DELIVERED: errors.AlreadyDelivered,
        pb.FREEZE_RESULT_ALREADY_CANCELLED: errors.AlreadyCancelled,
        pb.FREEZE_RESULT_UNKNOWN: errors.NotPending,
    }
    cls = by_result.get(result)
    if cls is None:
        return errors.HourglassError(f"hourglass: {rpc}: the server answered {result}, which this client does not know")
    return cls()


def frozen_of(res: pb.FreezeMessageResponse) -> Frozen:
    """The frozen message, or the exception of a freeze that changed nothing."""
    if res.result == pb.FREEZE_RESULT_FROZEN:
        return Frozen(id=id_of("FreezeMessage", res.id), remaining=timedelta(milliseconds=res.remaining_ms))
    raise _freeze_refusal("FreezeMessage", res.result)


def thawed_id(res: pb.ThawMessageResponse) -> ID:
    """The thawed message's ID, or the exception of a thaw that changed nothing."""
    if res.result == pb.FREEZE_RESULT_THAWED:
        return id_of("ThawMessage", res.id)
    raise _freeze_refusal("ThawMessage", res.result)


def rescheduled_id(res: pb.RescheduleResponse) -> ID:
    """The new ID, or the exception of a reschedule that changed nothing."""
    if res.result == pb.RESCHEDULE_RESULT_RESCHEDULED:
        return id_of("Reschedule", res.id)
    if res.result == pb.RESCHEDULE_RESULT_ALREADY_DELIVERED:
        raise errors.AlreadyDelivered()
    if res.result == pb.RESCHEDULE_RESULT_ALREADY_CANCELLED:
        raise errors.AlreadyCancelled()
    if res.result == pb.RESCHEDULE_RESULT_UNKNOWN:
        raise errors.NotPending()
    raise errors.HourglassError(
        f"hourglass: Reschedule: the server answered {res.result}, which this client does not know"
    )


_states = {
    pb.MESSAGE_STATE_PENDING: State.PENDING,
    pb.MESSAGE_STATE_DELIVERING: State.DELIVERING,
    pb.MESSAGE_STATE_DELIVERED: State.DELIVERED,
    pb.MESSAGE_STATE_DUE: State.DUE,
    pb.MESSAGE_STATE_LEASED: State.LEASED,
    pb.MESSAGE_STATE_ACKED: State.ACKED,
    pb.MESSAGE_STATE_CANCELLED: State.CANCELLED,
    pb.MESSAGE_STATE_DEAD_LETTERED: State.DEAD_LETTERED,
    pb.MESSAGE_STATE_RESCHEDULED: State.RESCHEDULED,
}
_state_pb = {v: k for k, v in _states.items()}


def state_pb(call: str, state: Union[State, str, None], allowed: Sequence[State]) -> int:
    """The MessageState list and purge ask for; None is PENDING."""
    try:
        s = State.PENDING if state is None else State(state)
    except ValueError:
        s = None
    if s is None or s not in allowed:
        want = ", ".join(a.value for a in allowed)
        raise errors.InvalidMessage(f"{call} of state {state!r}: want one of {want}")
    return _state_pb[s]


def dead_letter_of(m: pb.Message) -> Optional[DeadLetterInfo]:
    if not m.HasField("dead_letter"):
        return None
    dl = m.dead_letter
    return DeadLetterInfo(dl.origin_topic, dl.reason, dl.last_error, dl.attempts, opt_time(dl, "at"))


def stored_of(m: pb.Message) -> StoredMessage:
    mid = ID(m.id)
    return StoredMessage(
        id=mid,
        topic=m.topic,
        headers=headers_of(m.headers),
        body=m.body,
        deliver_at=opt_time(m, "deliver_at"),
        attempt=m.attempt,
        origin_id=ID(m.origin_id) if m.origin_id else mid,
        lease_expires_at=opt_time(m, "lease_expires_at"),
        dead_letter=dead_letter_of(m),
        due_at=opt_time(m, "due_at"),
        frozen=m.frozen,
        frozen_remaining=timedelta(milliseconds=m.frozen_remaining_ms) if m.HasField("frozen_remaining_ms") else None,
    )


def delivery_of(m: pb.Message) -> Delivery:
    mid = ID(m.id)
    return Delivery(
        id=mid,
        origin_id=ID(m.origin_id) if m.origin_id else mid,
        topic=m.topic,
        headers=headers_of(m.headers),
        body=m.body,
        deliver_at=time_of(m.deliver_at),
        received_at=time_of(m.received_at),
        lease_expires_at=time_of(m.lease_expires_at),
        attempt=m.attempt,
        receipt=m.receipt,
        dead_letter=dead_letter_of(m),
    )


def found_of(res: pb.GetResponse) -> Found:
    return Found(
        state=_states.get(res.state, State.NOT_FOUND),
        message=stored_of(res.message) if res.HasField("message") else None,
        queue_attempt=res.queue_attempt,
        lease_expires_at=opt_time(res, "lease_expires_at"),
        dead_letter_topic=res.dead_letter_topic,
        rescheduled_to=opt_id(res.rescheduled_to),
    )


def list_request(
    topic: str, state: Union[State, str, None], start: Optional[datetime], end: Optional[datetime], page_size: int, token: str
) -> pb.ListRequest:
    st = state_pb("list", state, (State.PENDING, State.DUE, State.LEASED, State.DEAD_LETTERED))
    r = pb.ListRequest(topic=topic, state=st, page_token=token, page_size=page_size)  # type: ignore[arg-type]
    if start is not None:
        getattr(r, "from").CopyFrom(timestamp("start", start))  # "from" is a Python keyword
    if end is not None:
        r.to.CopyFrom(timestamp("end", end))
    return r


def ms_of(what: str, d: Optional[Seconds]) -> int:
    """An optional duration as whole milliseconds (None: 0)."""
    return 0 if d is None else delay_ms(what, d)


def nack_request(d: Delivery, delay: Seconds, reason: str, dead_letter: bool, release: bool) -> pb.NackRequest:
    return pb.NackRequest(
        topic=d.topic,
        receipt=d.receipt,
        delay_ms=delay_ms("nack delay", delay),
        reason=reason,
        dead_letter=dead_letter,
        release=release,
    )


def ack_errors(call: str, ds: Sequence[Delivery], res: pb.AckBatchResponse) -> list[Optional[errors.HourglassError]]:
    if len(res.results) != len(ds):
        raise errors.HourglassError(f"hourglass: {call}: {len(res.results)} results for {len(ds)} receipts")
    return [
        None if r.acked else errors.HourglassError(f"hourglass: {call}: {d.id}: {r.error}")
        for d, r in zip(ds, res.results)
    ]


def ack_batch_request(ds: Sequence[Delivery]) -> pb.AckBatchRequest:
    topic = ds[0].topic
    for d in ds:
        if d.topic != topic:
            raise errors.InvalidMessage(f"ack_batch of topics {topic!r} and {d.topic!r}: one topic per call")
    return pb.AckBatchRequest(topic=topic, receipts=[d.receipt for d in ds])


def backoff_of(b: pb.Backoff) -> Backoff:
    return Backoff(
        initial=timedelta(milliseconds=b.initial_ms),
        max=timedelta(milliseconds=b.max_ms),
        multiplier=b.multiplier,
        jitter=b.jitter,
    )


def policy_of(p: pb.Policy) -> Policy:
    return Policy(
        max_attempts=p.max_attempts if p.HasField("max_attempts") else None,
        backoff=backoff_of(p.backoff) if p.HasField("backoff") else None,
        paused=p.paused if p.HasField("paused") else None,
        max_dispatch_rate=p.max_dispatch_rate if p.HasField("max_dispatch_rate") else None,
        lease=timedelta(milliseconds=p.lease_ms) if p.HasField("lease_ms") else None,
        flow_concurrency=p.flow_concurrency if p.HasField("flow_concurrency") else None,
        flow_rate=p.flow_rate if p.HasField("flow_rate") else None,
        flow_burst=p.flow_burst if p.HasField("flow_burst") else None,
        flow_ordered=p.flow_ordered if p.HasField("flow_ordered") else None,
        flow_fair=p.flow_fair if p.HasField("flow_fair") else None,
        freeze=p.freeze if p.HasField("freeze") else None,
        expiry_drop=p.expiry_drop if p.HasField("expiry_drop") else None,
        expiry_unacked=p.expiry_unacked if p.HasField("expiry_unacked") else None,
    )


def policy_pb(p: Policy) -> pb.Policy:
    out = pb.Policy()
    if p.max_attempts is not None:
        out.max_attempts = p.max_attempts
    if p.backoff is not None:
        b = p.backoff
        out.backoff.CopyFrom(
            pb.Backoff(
                initial_ms=delay_ms("backoff initial", b.initial),
                max_ms=delay_ms("backoff max", b.max),
                multiplier=b.multiplier,
                jitter=b.jitter,
            )
        )
    if p.paused is not None:
        out.paused = p.paused
    if p.max_dispatch_rate is not None:
        out.max_dispatch_rate = p.max_dispatch_rate
    if p.lease is not None:
        out.lease_ms = delay_ms("lease", p.lease)
    if p.flow_concurrency is not None:
        out.flow_concurrency = p.flow_concurrency
    if p.flow_rate is not None:
        out.flow_rate = p.flow_rate
    if p.flow_burst is not None:
        out.flow_burst = p.flow_burst
    if p.flow_ordered is not None:
        out.flow_ordered = p.flow_ordered
    if p.flow_fair is not None:
        out.flow_fair = p.flow_fair
    if p.freeze is not None:
        out.freeze = p.freeze
    if p.expiry_drop is not None:
        out.expiry_drop = p.expiry_drop
    if p.expiry_unacked is not None:
        out.expiry_unacked = p.expiry_unacked
    return out


def defaults_pb(fields: Iterable[Union[PolicyField, str]]) -> list[str]:
    out = []
    for f in fields:
        try:
            out.append(PolicyField(f).value)
        except ValueError:
            want = ", ".join(x.value for x in PolicyField)
            raise errors.InvalidMessage(f"policy field {f!r}: want one of {want}") from None
    return out


def policies_of(res: Union[pb.GetPolicyResponse, pb.SetPolicyResponse]) -> Policies:
    freezes = tuple(FrozenPause(time_of(f.began_at), opt_time(f, "ended_at")) for f in res.freezes)
    return Policies(policy_of(res.policy), policy_of(res.effective), freezes)


def topic_info_of(t: pb.TopicInfo) -> TopicInfo:
    return TopicInfo(
        topic=t.topic,
        due=t.due,
        leased=t.leased,
        dead_lettered=t.dead_lettered,
        oldest_due_age=timedelta(seconds=t.oldest_due_age_seconds),
        policy=policy_of(t.policy),
    )


def redrive_request(
    dead_letter_topic: str, to: str, reason: str, ids: Iterable[str], rate: int, max_messages: int
) -> pb.RedriveRequest:
    return pb.RedriveRequest(
        dead_letter_topic=dead_letter_topic,
        to_topic=to,
        reason=reason,
        ids=list(ids),
        rate_per_second=rate,
        max_messages=max_messages,
    )


def redrive_of(res: pb.RedriveResponse) -> RedriveResult:
    return RedriveResult(res.redriven, res.skipped, res.more)


def deleted_of(res: pb.DeleteTopicResponse) -> DeletedTopic:
    return DeletedTopic(res.cancelled, res.removed)


_misfire_pb = {
    MisfirePolicy.FIRE_LATEST: pb.MISFIRE_POLICY_FIRE_LATEST,
    MisfirePolicy.FIRE_ALL: pb.MISFIRE_POLICY_FIRE_ALL,
    MisfirePolicy.SKIP: pb.MISFIRE_POLICY_SKIP,
}


def recurring_pb(s: RecurringSchedule) -> pb.RecurringSchedule:
    try:
        misfire = _misfire_pb[MisfirePolicy(s.misfire)]
    except ValueError:
        raise errors.InvalidMessage(
            f"schedule {s.name!r}: misfire policy {s.misfire!r}: want 'fire-latest' (the default), 'fire-all' or 'skip'"
        ) from None
    try:
        overlap = _overlap_pb[OverlapPolicy(s.overlap)]
    except ValueError:
        raise errors.InvalidMessage(
            f"schedule {s.name!r}: overlap policy {s.overlap!r}: want 'allow' (the default), 'skip' or 'buffer-one'"
        ) from None
    jitter = to_timedelta("jitter", s.jitter)
    if jitter < timedelta(0):
        raise errors.InvalidMessage(f"schedule {s.name!r}: jitter {jitter} is negative")
    calendar_policy = pb.CALENDAR_POLICY_UNSPECIFIED
    if s.calendar_policy is not None:
        try:
            calendar_policy = _calendar_policy_pb[CalendarPolicy(s.calendar_policy)]
        except ValueError:
            raise errors.InvalidMessage(
                f"schedule {s.name!r}: calendar policy {s.calendar_policy!r}: want 'skip' (the default) or 'shift'"
            ) from None
    out = pb.RecurringSchedule(
        jitter_ms=jitter // timedelta(milliseconds=1),
        overlap_policy=overlap,
        calendar=s.calendar,
        calendar_policy=calendar_policy,
        name=s.name,
        topic=s.topic,
        spec=s.spec,
        body=body_of(s.body),
        headers=headers_pb(s.headers),
        time_zone=s.time_zone,
        misfire_policy=misfire,
        paused=s.paused,
    )
    if s.start is not None:
        out.start.CopyFrom(timestamp("start", s.start))
    if s.end is not None:
        out.end.CopyFrom(timestamp("end", s.end))
    return out


_overlap_pb = {
    OverlapPolicy.ALLOW: pb.OVERLAP_POLICY_ALLOW,
    OverlapPolicy.SKIP: pb.OVERLAP_POLICY_SKIP,
    OverlapPolicy.BUFFER_ONE: pb.OVERLAP_POLICY_BUFFER_ONE,
}
_calendar_policy_pb = {CalendarPolicy.SKIP: pb.CALENDAR_POLICY_SKIP, CalendarPolicy.SHIFT: pb.CALENDAR_POLICY_SHIFT}


def recurring_of(m: pb.RecurringSchedule) -> RecurringSchedule:
    misfire = {pb.MISFIRE_POLICY_FIRE_ALL: MisfirePolicy.FIRE_ALL, pb.MISFIRE_POLICY_SKIP: MisfirePolicy.SKIP}.get(
        m.misfire_policy, MisfirePolicy.FIRE_LATEST
    )
    return RecurringSchedule(
        name=m.name,
        topic=m.topic,
        spec=m.spec,
        time_zone=m.time_zone,
        body=m.body,
        headers=headers_of(m.headers),
        start=opt_time(m, "start"),
        end=opt_time(m, "end"),
        misfire=misfire,
        paused=m.paused,
        jitter=timedelta(milliseconds=m.jitter_ms),
        overlap={pb.OVERLAP_POLICY_SKIP: OverlapPolicy.SKIP, pb.OVERLAP_POLICY_BUFFER_ONE: OverlapPolicy.BUFFER_ONE}.get(
            m.overlap_policy, OverlapPolicy.ALLOW
        ),
        calendar=m.calendar,
        calendar_policy=(CalendarPolicy.SHIFT if m.calendar_policy == pb.CALENDAR_POLICY_SHIFT else CalendarPolicy.SKIP)
        if m.calendar
        else None,
    )


def schedule_info_of(call: str, g: pb.GetScheduleResponse) -> ScheduleInfo:
    return ScheduleInfo(
        schedule=recurring_of(g.schedule),
        next=[time_of(t) for t in g.next],
        armed=id_of(call, g.armed_id) if g.armed_id else None,
        fired=g.fired,
        skipped=g.skipped,
        buffered=opt_time(g, "buffered"),
    )


def next_of(res: Union[pb.CreateScheduleResponse, pb.UpdateScheduleResponse, pb.ResumeScheduleResponse]) -> Optional[datetime]:
    """The armed occurrence's time; None when none is armed."""
    return opt_time(res, "next")


def get_schedule_request(name: str, next_count: int) -> pb.GetScheduleRequest:
    if isinstance(next_count, bool) or not isinstance(next_count, int) or not 0 <= next_count <= 100:
        raise errors.InvalidMessage(f"get_schedule of {next_count!r} next times: from 0 (5) to 100")
    return pb.GetScheduleRequest(name=name, next_count=next_count)
