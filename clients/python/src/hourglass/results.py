"""What a handler's result does to its message.

A handler that returns acks its message. One that raises nacks it:

=============================  ===============================  ==========================================
the handler                    the server is told               the message
=============================  ===============================  ==========================================
returns                        ack                              is never delivered again
raises ``Retry(delay)``        nack, ``delay_ms`` delay         comes back as the next attempt, a new ID,
                                                                no sooner than delay
raises ``DeadLetter(reason)``  nack, ``dead_letter: true``      goes to "<topic>.dlq" now
raises anything else           nack, ``delay_ms`` 0             comes back after the topic's retry backoff
=============================  ===============================  ==========================================

Every nack carries the exception's text as its reason (cut to 1000 bytes
on a character boundary), kept with the message and shown with it in the
dead-letter topic. After the server's --max-attempts a nacked message goes
to "<topic>.dlq" too.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import timedelta
from typing import Optional

from .types import Seconds

__all__ = ["Retry", "DeadLetter", "Outcome", "outcome_of"]

#: The server's limit on a nack's reason, in bytes.
MAX_REASON = 1000


def to_timedelta(what: str, d: Seconds) -> timedelta:
    """d as a timedelta; a bool or another type is refused."""
    if isinstance(d, timedelta):
        return d
    if isinstance(d, bool) or not isinstance(d, (int, float)):
        raise TypeError(f"hourglass: {what} {d!r}: want seconds (int or float) or a timedelta")
    return timedelta(seconds=d)


def ceil_ms(d: timedelta) -> int:
    """d in whole milliseconds, rounded up (never early)."""
    us = (d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds
    return -(-us // 1000)


class Retry(Exception):
    """Raised by a handler to have its message delivered again after
    ``delay`` (seconds or a timedelta; rounded up to whole milliseconds; 0
    leaves it to the topic's retry backoff): a nack with that delay, whose
    reason is ``reason`` or "retry after <delay>"."""

    def __init__(self, delay: Seconds, reason: Optional[str] = None) -> None:
        self.delay = max(to_timedelta("Retry delay", delay), timedelta(0))
        ms = ceil_ms(self.delay)
        super().__init__(reason if reason is not None else f"retry after {ms}ms")


class DeadLetter(Exception):
    """Raised by a handler whose message can never be handled: it goes to
    "<topic>.dlq" at once, whatever attempts remain, with ``reason`` kept
    beside it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Outcome(str, enum.Enum):
    """What a handler's result does to its message; for metrics labels."""

    ACK = "ack"
    RETRY = "retry"
    DEAD_LETTER = "dead-letter"
    NACK = "nack"

    def __str__(self) -> str:
        return self.value


def outcome_of(exc: Optional[BaseException]) -> Outcome:
    """What a handler's result (None: it returned) does to its message."""
    if exc is None:
        return Outcome.ACK
    if isinstance(exc, DeadLetter):
        return Outcome.DEAD_LETTER
    if isinstance(exc, Retry):
        return Outcome.RETRY
    return Outcome.NACK


@dataclass(frozen=True)
class Action:
    """What to tell the server of a handler's result."""

    nack: bool = False
    delay_ms: int = 0
    reason: str = ""
    dead_letter: bool = False


def action_of(exc: Optional[BaseException]) -> Action:
    """Maps a handler's result as the table in this module says."""
    if exc is None:
        return Action()
    reason = reason_of(exc)
    if isinstance(exc, DeadLetter):
        return Action(nack=True, reason=reason, dead_letter=True)
    if isinstance(exc, Retry):
        return Action(nack=True, reason=reason, delay_ms=ceil_ms(exc.delay))
    return Action(nack=True, reason=reason)


def reason_of(exc: BaseException) -> str:
    """The exception's text (its type's name if it has none), cut to the
    server's limit on a character boundary."""
    text = str(exc) or type(exc).__name__
    b = text.encode("utf-8", errors="replace")  # lone surrogates become "?"
    return b[:MAX_REASON].decode("utf-8", errors="ignore")  # drops a cut character
