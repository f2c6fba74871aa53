"""The values the client's calls take and answer.

Times are timezone-aware :class:`datetime.datetime` values (UTC when the
server answers them); a naive datetime is refused, since it names no
instant. Durations are seconds (``int`` or ``float``) or
:class:`datetime.timedelta`, sent as whole milliseconds rounded up
(never early).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Mapping, Optional, Sequence, Union

__all__ = [
    "ID",
    "Key",
    "Ref",
    "Seconds",
    "Message",
    "ScheduleResult",
    "CancelResult",
    "State",
    "StoredMessage",
    "DeadLetterInfo",
    "Delivery",
    "Found",
    "Backoff",
    "Policy",
    "Policies",
    "PolicyField",
    "TopicInfo",
    "RedriveResult",
    "DeletedTopic",
    "MisfirePolicy",
    "OverlapPolicy",
    "CalendarPolicy",
    "RecurringSchedule",
    "ScheduleInfo",
    "Backfilled",
    "WorkingHours",
    "Calendar",
    "WorkingTime",
]

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

#: A duration: seconds, or a timedelta.
Seconds = Union[int, float, timedelta]


class ID(str):
    """A message's ID: the 32 lowercase hex digits the server answers, the
    delivery time (UTC epoch milliseconds) then a sequence number, so that
    IDs in text order are in delivery order. It is a ``str``; ``time`` is
    the delivery time it carries."""

    __slots__ = ()

    def __new__(cls, text: str) -> "ID":
        if len(text) != 32:
            raise ValueError(f"hourglass: malformed ID {text!r}: want 32 hex digits, got {len(text)} characters")
        try:
            ms = int(text[:16], 16)
            int(text[16:], 16)
        except ValueError:
            raise ValueError(f"hourglass: malformed ID {text!r}: want 32 hex digits (0-9, a-f)") from None
        if ms >= 1 << 63:
            raise ValueError(f"hourglass: malformed ID {text!r}: delivery time is negative")
        return super().__new__(cls, text.lower())

    @property
    def time(self) -> datetime:
        """The delivery time the ID carries, to the millisecond (UTC): for a
        retried or rescheduled message the time of this ID, not the first."""
        return EPOCH + timedelta(milliseconds=int(self[:16], 16))


@dataclass(frozen=True)
class Key:
    """Names a message by its topic and the idempotency key it was
    scheduled with, for its whole life (not only the server's
    --idempotency-window)."""

    topic: str
    key: str

    def __str__(self) -> str:
        return f"{self.topic}/{self.key}"


#: Names one message for cancel, get and reschedule: its ID (or the ID's
#: text), or its Key.
Ref = Union[ID, str, Key]


@dataclass(frozen=True)
class Message:
    """One message to schedule. At most one of ``delay``, ``at``, ``level``
    and ``working``; none means now.

    ``delay`` counts from the server's clock when the request arrives;
    ``at`` is an absolute time (a time in the past is due at once);
    ``level`` is a delay level of the server's --delay-levels, 1-based
    (level 3 is 10 s by default). ``key`` is an idempotency key (at most
    200 bytes): a second schedule of the same topic and key within the
    server's --idempotency-window answers the first message's ID and
    stores nothing, and ``Key(topic, key)`` names the message for good.
    ``working`` is a time in a calendar's working time (:class:`WorkingTime`),
    computed by the server when it stores the message.
    ``flow_key`` (at most 200 bytes) is the key the topic's flow policy
    bounds and orders messages by (a tenant, an account); many messages
    share one, and it is delivered as the header "hourglass-flow-key".
    ``ttl`` (after the delivery time) or ``expire_at`` (at most one) is when
    the message expires: from then on it is never handed to a consumer
    (the queue dead-letters it with reason "expired").
    """

    topic: str
    body: Union[bytes, str] = b""
    headers: Optional[Mapping[str, str]] = None
    delay: Optional[Seconds] = None
    at: Optional[datetime] = None
    level: Optional[int] = None
    key: str = ""
    working: Optional["WorkingTime"] = None
    flow_key: str = ""
    ttl: Optional[Seconds] = None
    expire_at: Optional[datetime] = None


@dataclass(frozen=True)
class ScheduleResult:
    """The answer to one message of schedule_stream: its ID, or why the
    server refused it (nothing of it was stored)."""

    message: Message
    id: Optional[ID] = None
    error: Optional[Exception] = None


class CancelResult(str, enum.Enum):
    """What cancel did (docs/API.md, "Cancel answers")."""

    #: This call cancelled it: the message will never be delivered.
    CANCELLED = "cancelled"
    #: An earlier cancel did; it will never be delivered.
    ALREADY_CANCELLED = "already-cancelled"
    #: It was delivered, is being delivered, or was dead-lettered.
    ALREADY_DELIVERED = "already-delivered"
    #: No such message is pending on this server.
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


class State(str, enum.Enum):
    """What became of a scheduled message, as get tells it (docs/API.md,
    "Looking up and listing")."""

    PENDING = "pending"
    DELIVERING = "delivering"
    DELIVERED = "delivered"
    DUE = "due"
    LEASED = "leased"
    ACKED = "acked"
    CANCELLED = "cancelled"
    DEAD_LETTERED = "dead-lettered"
    #: Cluster mode: it will never be delivered at this time
    #: (Found.rescheduled_to names its replacement).
    RESCHEDULED = "rescheduled"
    NOT_FOUND = "not-found"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class DeadLetterInfo:
    """Why a message of a dead-letter topic died, and where."""

    #: The topic it died on.
    origin_topic: str
    #: "max-attempts", "nacked" (a consumer asked for it) or "sink".
    reason: str
    #: The reason of the last nack, or "lease expired".
    last_error: str
    #: Attempts made on the origin topic.
    attempts: int
    #: When it was dead-lettered (the server's clock).
    at: Optional[datetime]


@dataclass(frozen=True)
class StoredMessage:
    """A message as the server stores it (get, list)."""

    id: ID
    topic: str
    headers: Mapping[str, str]
    body: bytes
    deliver_at: Optional[datetime]
    #: The attempt it was scheduled with; in a list of the queue's states,
    #: the queue's failed attempts.
    attempt: int
    #: The first attempt's ID of a retry or reschedule; the ID itself
    #: otherwise.
    origin_id: ID
    #: When the lease of a message listed as leased ends.
    lease_expires_at: Optional[datetime] = None
    dead_letter: Optional[DeadLetterInfo] = None
    #: When it is due with its topic's frozen pauses counted, if they make
    #: it due after deliver_at; frozen while such a pause lasts (due_at
    #: then as if resumed now).
    due_at: Optional[datetime] = None
    frozen: bool = False
    #: A message frozen on its own (freeze_message): the delay it keeps
    #: until thaw_message; frozen is then set and due_at is as if it were
    #: thawed now. None otherwise.
    frozen_remaining: Optional[timedelta] = None


@dataclass(frozen=True)
class Frozen:
    """What freeze_message made: the ID the frozen message goes on under
    and the delay it keeps until thaw_message."""

    id: ID
    remaining: timedelta


@dataclass(frozen=True)
class Delivery:
    """A due message handed to this consumer under a lease."""

    #: The ID to ack or nack; a retry's own ID.
    id: ID
    #: The ID the producer was given (equal to id on attempt 0).
    origin_id: ID
    topic: str
    headers: Mapping[str, str]
    body: bytes
    #: When it was due, when the server handed it out, and when it is
    #: delivered again if not settled (the server's clock).
    deliver_at: datetime
    received_at: datetime
    lease_expires_at: datetime
    #: 0 for the first delivery, raised by every nack and expired lease.
    attempt: int
    #: Names this lease: acks and nacks act only while it holds.
    receipt: str
    #: Set on a message of a dead-letter topic ("<topic>.dlq").
    dead_letter: Optional[DeadLetterInfo] = None


@dataclass(frozen=True)
class Found:
    """What get answers."""

    state: State
    #: The message as scheduled; None when not found.
    message: Optional[StoredMessage] = None
    #: Due or leased: the queue's failed attempts so far.
    queue_attempt: int = 0
    #: Leased: when the lease ends.
    lease_expires_at: Optional[datetime] = None
    #: Dead-lettered by the queue: the topic that holds it.
    dead_letter_topic: str = ""
    #: The ID that carries the message now, when it is not the one asked
    #: for: after a reschedule, a retry or a redrive (state and message are
    #: that one's). In cluster mode: the replacement of a rescheduled one.
    rescheduled_to: Optional[ID] = None


@dataclass(frozen=True)
class Backoff:
    """A retry delay: ``initial * multiplier**(retry-1)``, at most
    ``max`` (0: no cap), less up to ``jitter`` of it at random."""

    initial: Seconds
    max: Seconds = 0
    #: 1 (a fixed delay) to 10.
    multiplier: float = 1.0
    #: 0 to 1.
    jitter: float = 0.0


@dataclass(frozen=True)
class Policy:
    """How a topic's messages are delivered. A field left None is the
    server's default (in set_policy: it keeps its current value)."""

    #: Deliveries before a message goes to "<topic>.dlq", 1 to 1000.
    max_attempts: Optional[int] = None
    #: The delay before a retry after a nack without a delay or an
    #: expired lease.
    backoff: Optional[Backoff] = None
    #: A paused topic hands out nothing until resumed.
    paused: Optional[bool] = None
    #: At most this many messages handed out per second; 0: no limit.
    max_dispatch_rate: Optional[float] = None
    #: The lease of a receive that asks for none, 1 ms to 12 h.
    lease: Optional[Seconds] = None
    #: Per flow key (a message's flow_key): at most this many of one key
    #: leased at once; 0: no bound.
    flow_concurrency: Optional[int] = None
    #: Per flow key: at most this many handed out per second, a token
    #: bucket of flow_burst (0: one second's worth); 0: no bound.
    flow_rate: Optional[float] = None
    flow_burst: Optional[int] = None
    #: One message of a key at a time, in due order; the next once it is
    #: acked or dead-lettered.
    flow_ordered: Optional[bool] = None
    #: The keys with due messages are served in turn, one message each.
    flow_fair: Optional[bool] = None
    #: A frozen pause: paused with the topic's clock stopped; on resume
    #: every message stored before it and not yet due then is due as much
    #: later as it lasted. Setting it pauses; resume ends it.
    freeze: Optional[bool] = None
    #: A message past its expiry (ttl, expire_at) is dropped instead of
    #: dead-lettered with reason "expired".
    expiry_drop: Optional[bool] = None
    #: A message expires unless acked by its expiry, not only unless
    #: received by then: its lease ending after the expiry ends it as
    #: expired, and an ack after it is refused (FAILED_PRECONDITION).
    expiry_unacked: Optional[bool] = None


@dataclass(frozen=True)
class FrozenPause:
    """A frozen pause of a topic; ended_at is None while it lasts."""

    began_at: datetime
    ended_at: Optional[datetime] = None


@dataclass(frozen=True)
class Policies:
    """A topic's policy: what it set, and what applies (what it set over
    the server's defaults), and its frozen pauses that may still make a
    message due later, oldest first."""

    policy: Policy
    effective: Policy
    freezes: tuple[FrozenPause, ...] = ()


class PolicyField(str, enum.Enum):
    """A field of Policy, for set_policy to set back to the server's
    default."""

    MAX_ATTEMPTS = "max_attempts"
    BACKOFF = "backoff"
    PAUSED = "paused"
    MAX_DISPATCH_RATE = "max_dispatch_rate"
    LEASE = "lease_ms"
    FLOW_CONCURRENCY = "flow_concurrency"
    FLOW_RATE = "flow_rate"
    FLOW_BURST = "flow_burst"
    FLOW_ORDERED = "flow_ordered"
    FLOW_FAIR = "flow_fair"
    EXPIRY_DROP = "expiry_drop"
    EXPIRY_UNACKED = "expiry_unacked"


@dataclass(frozen=True)
class TopicInfo:
    """One topic's counts and policy, as topics() tells them."""

    topic: str
    due: int
    leased: int
    dead_lettered: int
    #: How long the oldest due message has waited; 0 if none.
    oldest_due_age: timedelta
    policy: Policy


@dataclass(frozen=True)
class RedriveResult:
    """What one redrive call did; ``more``: call it again to go on."""

    redriven: int
    skipped: int
    more: bool


@dataclass(frozen=True)
class DeletedTopic:
    """What delete_topic removed."""

    cancelled: int
    removed: int


class MisfirePolicy(str, enum.Enum):
    """What a recurring schedule does with the occurrences that fell while
    the server was down."""

    #: The default: deliver them once, late, as one.
    FIRE_LATEST = "fire-latest"
    #: Deliver each, oldest first, up to 100 in a row.
    FIRE_ALL = "fire-all"
    #: Deliver none of them.
    SKIP = "skip"

    def __str__(self) -> str:
        return self.value


class OverlapPolicy(str, enum.Enum):
    """What a recurring schedule's occurrence does while the previous one
    is not yet acked."""

    #: The default: deliver it all the same.
    ALLOW = "allow"
    #: Do not deliver it (counted in ScheduleInfo.skipped).
    SKIP = "skip"
    #: Hold it until the previous one is acked, then deliver it; later
    #: ones are skipped while one is held.
    BUFFER_ONE = "buffer-one"

    def __str__(self) -> str:
        return self.value


class CalendarPolicy(str, enum.Enum):
    """What becomes of an occurrence outside its schedule's calendar's
    working time."""

    #: The default: not delivered; the next one inside is.
    SKIP = "skip"
    #: Delivered at the next working instant instead.
    SHIFT = "shift"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class RecurringSchedule:
    """A named message delivered to ``topic`` at every occurrence of
    ``spec`` in ``time_zone``.

    ``spec`` is a 5-field cron spec ("0 9 * * MON-FRI"), a 6-field one with
    seconds first ("*/30 * * * * *"), "@every 90s" (whole seconds, at least
    1 s) or a macro (@yearly, @monthly, @weekly, @daily, @hourly);
    ``time_zone`` an IANA zone ("Europe/Berlin"), "" for UTC. Each
    occurrence is an ordinary message of ``topic`` with the idempotency key
    "<name>@<time>" (UTC, "2030-01-02T09:00:00.000Z") and the headers
    "hourglass-schedule" and "hourglass-occurrence". ``paused``: create it
    paused; update_schedule keeps the schedule's paused state.

    ``jitter`` delays each occurrence's delivery by 0 to it (whole
    milliseconds, at most 7 days), never before its time: the same delay
    for the same occurrence. ``overlap`` is what an occurrence does while
    the previous one is not acked. ``calendar`` names a calendar whose
    working time the occurrences keep to, as ``calendar_policy`` says
    (None: skip; set only with a calendar).
    """

    name: str
    topic: str
    spec: str
    time_zone: str = ""
    body: Union[bytes, str] = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    start: Optional[datetime] = None
    end: Optional[datetime] = None
    misfire: MisfirePolicy = MisfirePolicy.FIRE_LATEST
    paused: bool = False
    jitter: Seconds = 0
    overlap: OverlapPolicy = OverlapPolicy.ALLOW
    calendar: str = ""
    calendar_policy: Optional[CalendarPolicy] = None


@dataclass(frozen=True)
class ScheduleInfo:
    """A recurring schedule as get_schedule and list_schedules answer it."""

    schedule: RecurringSchedule
    #: Its next fire times from now, oldest first; none while paused or
    #: past its end.
    next: list[datetime]
    #: The ID of its armed occurrence, while one is pending.
    armed: Optional[ID]
    #: Occurrences delivered since it was created.
    fired: int
    #: Occurrences its overlap policy did not deliver.
    skipped: int = 0
    #: The time of the occurrence BUFFER_ONE holds until the previous one
    #: is acked; None when none is held.
    buffered: Optional[datetime] = None


@dataclass(frozen=True)
class Backfilled:
    """What backfill_schedule stored."""

    #: Occurrences stored, each a message due at once.
    stored: int
    #: Occurrences whose message existed already (live, or an earlier
    #: backfill's), not stored again.
    existing: int


@dataclass(frozen=True)
class WorkingHours:
    """Working time on one weekday: from ``start`` up to (not including)
    ``end``, "HH:MM" ("24:00": the end of the day). ``day`` is
    "mon" ... "sun"."""

    day: str
    start: str
    end: str


@dataclass(frozen=True)
class Calendar:
    """Working time: the working hours of each weekday, except on the
    ``closed`` dates ("YYYY-MM-DD"), read on the wall clock of
    ``time_zone`` (an IANA zone; "" for UTC). A message sent in its working
    time has its time fixed when stored: a later change of the calendar
    does not move it."""

    name: str
    hours: Sequence[WorkingHours]
    time_zone: str = ""
    closed: Sequence[str] = ()


@dataclass(frozen=True)
class WorkingTime:
    """A delivery time in the working time of ``calendar``: the
    ``days``-th working day after the start's date at ``at_time`` ("HH:MM"
    on the calendar's clock; the start's time of day when ""), or
    ``duration`` of working time after the start. The start is ``after``,
    or the server's clock. Give one of days and duration."""

    calendar: str
    days: Optional[int] = None
    at_time: str = ""
    duration: Optional[Seconds] = None
    after: Optional[datetime] = None
