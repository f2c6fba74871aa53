"""The exceptions of the client.

An error the server answered is an :class:`RpcError` of the subclass its
gRPC status code names (:class:`InvalidArgument`, :class:`NotFound`,
:class:`ResourceExhausted`, :class:`Unavailable`, ...). Its ``message`` is
the server's own text, the same the Go client shows after ``desc =``; its
``call`` is the RPC's name; ``str()`` is ``"hourglass: <call>: <message>"``.
What the code tells a program to do is in docs/API.md, "Status codes":
InvalidArgument means fix the request, Unavailable and ResourceExhausted
mean retry later, FailedPrecondition means the state does not allow it.
"""

from __future__ import annotations

import grpc

__all__ = [
    "HourglassError",
    "InvalidMessage",
    "RpcError",
    "Cancelled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
    "ScheduleNotFound",
    "ScheduleExists",
    "RescheduleRefused",
    "AlreadyDelivered",
    "AlreadyCancelled",
    "NotPending",
]


class HourglassError(Exception):
    """The base of every exception this package raises on purpose."""


class InvalidMessage(HourglassError, ValueError):
    """A request the client refuses before sending it (two delivery times
    in one message, a naive datetime, a reschedule without a time); the
    text says what was wrong and what is allowed."""

    def __init__(self, what: str) -> None:
        super().__init__(f"hourglass: invalid message: {what}")


class RpcError(HourglassError):
    """An error status the server (or the connection to it) answered.

    ``code`` is the :class:`grpc.StatusCode`, ``message`` the status
    message as the server wrote it, ``call`` the RPC's name ("Schedule").
    """

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, call: str, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"hourglass: {call}: {message}")
        self.call = call
        self.code = code
        self.message = message


class Cancelled(RpcError):
    code = grpc.StatusCode.CANCELLED


class Unknown(RpcError):
    code = grpc.StatusCode.UNKNOWN


class InvalidArgument(RpcError):
    """The request is wrong: the message names the field, what was wrong
    and what is allowed. Fix the request."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(RpcError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(RpcError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(RpcError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(RpcError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(RpcError):
    """A limit: a request too large, too many streams or long polls, the
    disk full. Retry later, or within the limit the message names."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(RpcError):
    """The state does not allow it: an ack or nack of a message whose
    lease ended, say."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(RpcError):
    code = grpc.StatusCode.ABORTED


class OutOfRange(RpcError):
    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(RpcError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(RpcError):
    code = grpc.StatusCode.INTERNAL


class Unavailable(RpcError):
    """The server is shutting down, its storage failing, a cluster
    partition moving, or it cannot be reached. Retry later."""

    code = grpc.StatusCode.UNAVAILABLE


class DataLoss(RpcError):
    code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(RpcError):
    """No or a wrong bearer token: give the server's --auth-token as the
    client's ``token``."""

    code = grpc.StatusCode.UNAUTHENTICATED


class ScheduleNotFound(NotFound):
    """A recurring-schedule call named a schedule that does not exist."""


class ScheduleExists(AlreadyExists):
    """create_schedule of a name a schedule already has."""


class RescheduleRefused(HourglassError):
    """The server changed nothing in a reschedule; the subclass says why."""

    text = "hourglass: reschedule refused"

    def __init__(self) -> None:
        super().__init__(self.text)


class AlreadyDelivered(RescheduleRefused):
    """The message was delivered, is being delivered, or was
    dead-lettered: too late to move it."""

    text = "hourglass: message already delivered"


class AlreadyCancelled(RescheduleRefused):
    """The message was cancelled (in cluster mode: or rescheduled before;
    get tells the ID that replaced it)."""

    text = "hourglass: message already cancelled or rescheduled"


class NotPending(RescheduleRefused):
    """No such message is pending on the server."""

    text = "hourglass: no such message pending"


class AlreadyFrozen(RescheduleRefused):
    """freeze_message of a message frozen before."""

    text = "hourglass: message already frozen"


class NotFrozen(RescheduleRefused):
    """thaw_message of a pending message that is not frozen."""

    text = "hourglass: message not frozen"


_by_code: dict[grpc.StatusCode, type[RpcError]] = {
    cls.code: cls
    for cls in (
        Cancelled,
        Unknown,
        InvalidArgument,
        DeadlineExceeded,
        NotFound,
        AlreadyExists,
        PermissionDenied,
        ResourceExhausted,
        FailedPrecondition,
        Aborted,
        OutOfRange,
        Unimplemented,
        Internal,
        Unavailable,
        DataLoss,
        Unauthenticated,
    )
}

#: Codes worth retrying: the server is away, busy or restarting. A worker
#: retries its polls on these and stops on any other.
TRANSIENT_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.CANCELLED,
    }
)


def code_of(code: int) -> grpc.StatusCode:
    """The StatusCode of a code's number (a Status on a stream)."""
    for c in grpc.StatusCode:
        if c.value[0] == code:
            return c
    return grpc.StatusCode.UNKNOWN


def error_of(call: str, code: grpc.StatusCode, message: str) -> RpcError:
    """The exception of a status the server answered for call."""
    return _by_code.get(code, Unknown)(call, code, message)


def from_grpc(call: str, err: grpc.RpcError) -> RpcError:
    """The exception of a failed grpc call (sync or asyncio)."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    return error_of(call, code or grpc.StatusCode.UNKNOWN, details or "")


def from_schedule_call(call: str, err: grpc.RpcError) -> RpcError:
    """As from_grpc, with NotFound and AlreadyExists as the
    recurring-schedule exceptions."""
    e = from_grpc(call, err)
    if e.code == grpc.StatusCode.NOT_FOUND:
        return ScheduleNotFound(call, e.code, e.message)
    if e.code == grpc.StatusCode.ALREADY_EXISTS:
        return ScheduleExists(call, e.code, e.message)
    return e


def is_transient(err: BaseException) -> bool:
    """Whether retrying may fix err."""
    return isinstance(err, RpcError) and err.code in TRANSIENT_CODES
