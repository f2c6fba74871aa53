"""What a handler's result does (hourglass.results) and the ID type: no
server needed."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

import hourglass
from hourglass import DeadLetter, Outcome, Retry, outcome_of
from hourglass.results import MAX_REASON, action_of


@pytest.mark.parametrize(
    "exc,outcome,nack,delay_ms,dead_letter,reason",
    [
        ("returned", Outcome.ACK, False, 0, False, ""),
        (Retry(1.5), Outcome.RETRY, True, 1500, False, "retry after 1500ms"),
        (Retry(0.0001), Outcome.RETRY, True, 1, False, "retry after 1ms"),  # rounded up, never early
        (Retry(timedelta(microseconds=1500), "busy"), Outcome.RETRY, True, 2, False, "busy"),
        (Retry(-3), Outcome.RETRY, True, 0, False, "retry after 0ms"),
        (DeadLetter("unparsable"), Outcome.DEAD_LETTER, True, 0, True, "unparsable"),
        (ValueError("boom"), Outcome.NACK, True, 0, False, "boom"),
        (KeyError(), Outcome.NACK, True, 0, False, "KeyError"),
    ],
    ids=["returned", "retry", "retry_rounds_up", "retry_timedelta", "retry_negative", "dead_letter", "error", "no_text"],
)
def test_results(exc: object, outcome: Outcome, nack: bool, delay_ms: int, dead_letter: bool, reason: str) -> None:
    e = None if exc == "returned" else exc
    assert isinstance(e, (BaseException, type(None)))
    assert outcome_of(e) == outcome
    a = action_of(e)
    assert (a.nack, a.delay_ms, a.dead_letter, a.reason) == (nack, delay_ms, dead_letter, reason)


def test_reason_is_cut_on_a_character_boundary() -> None:
    a = action_of(ValueError("é" * 600))  # 1200 bytes
    assert len(a.reason.encode()) == MAX_REASON and a.reason == "é" * 500
    b = action_of(ValueError("x" + "é" * 600))
    assert len(b.reason.encode()) == MAX_REASON - 1 and b.reason.endswith("é")
    assert action_of(ValueError("\ud800")).reason == "?"  # a lone surrogate is not UTF-8


def test_retry_refuses_what_is_not_a_duration() -> None:
    with pytest.raises(TypeError, match="want seconds"):
        Retry("5s")  # type: ignore[arg-type]


def test_id() -> None:
    id = hourglass.ID("000001A247744D300000000000002B7E")
    assert id == "000001a247744d300000000000002b7e" and isinstance(id, str)
    assert id.time == datetime(2026, 12, 5, 18, 25, 34, tzinfo=timezone.utc)  # 0x1a247744d30 ms after the epoch
    with pytest.raises(ValueError, match="want 32 hex digits, got 2 characters"):
        hourglass.ID("zz")
    with pytest.raises(ValueError, match=r"want 32 hex digits \(0-9, a-f\)"):
        hourglass.ID("g" * 32)
    with pytest.raises(ValueError, match="delivery time is negative"):
        hourglass.ID("f" * 32)
