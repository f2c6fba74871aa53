"""hourglass: the Python client of Hourglass, the durable delayed-message server.

Producers schedule messages (a delay, an absolute time or a delay level; an
idempotency key; headers), one at a time, in atomic batches or on a stream;
cancel, get and reschedule them by ID or by Key(topic, key); and manage
recurring schedules. Consumers run a Worker: handler functions per topic
with bounded concurrency, where raising nacks (Retry and DeadLetter say
how) and SIGTERM stops gracefully. ``hourglass.aio`` has the same on
asyncio (grpc.aio). docs/CLIENTS.md in the repository describes it all.

    import hourglass

    with hourglass.Client("127.0.0.1:7420", token=token) as c:
        id = c.schedule("orders", b"order 42", delay=30 * 60, key="order-42")
        c.cancel(id)  # or hourglass.Key("orders", "order-42")
"""

from . import errors
from ._channel import DEFAULT_ADDR
from .client import Client
from .errors import (
    AlreadyCancelled,
    AlreadyDelivered,
    AlreadyExists,
    AlreadyFrozen,
    FailedPrecondition,
    HourglassError,
    InvalidArgument,
    InvalidMessage,
    NotFound,
    NotFrozen,
    NotPending,
    ResourceExhausted,
    RpcError,
    ScheduleExists,
    ScheduleNotFound,
    Unauthenticated,
    Unavailable,
)
from .results import DeadLetter, Outcome, Retry, outcome_of
from .types import (
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
    ScheduleResult,
    State,
    StoredMessage,
    TopicInfo,
    WorkingHours,
    WorkingTime,
)
from .worker import TopicOptions, Worker

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_ADDR",
    "errors",
    "Client",
    "Worker",
    "TopicOptions",
    "Retry",
    "DeadLetter",
    "Outcome",
    "outcome_of",
    "HourglassError",
    "InvalidMessage",
    "RpcError",
    "InvalidArgument",
    "NotFound",
    "AlreadyExists",
    "FailedPrecondition",
    "ResourceExhausted",
    "Unavailable",
    "Unauthenticated",
    "ScheduleNotFound",
    "ScheduleExists",
    "AlreadyDelivered",
    "AlreadyCancelled",
    "NotPending",
    "AlreadyFrozen",
    "NotFrozen",
    "Frozen",
    "ID",
    "Key",
    "Ref",
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
    "FrozenPause",
    "Policies",
    "PolicyField",
    "TopicInfo",
    "RedriveResult",
    "DeletedTopic",
    "MisfirePolicy",
    "RecurringSchedule",
    "ScheduleInfo",
    "OverlapPolicy",
    "CalendarPolicy",
    "Backfilled",
    "Calendar",
    "WorkingHours",
    "WorkingTime",
]
