"""Calendars, messages in working time, and recurring schedules' calendar,
jitter, overlap and backfill against the real server, with the sync and
the asyncio client."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta, timezone

import pytest

import hourglass
from hourglass.aio import AsyncClient
from hourglass import Calendar, CalendarPolicy, OverlapPolicy, RecurringSchedule, WorkingHours, WorkingTime

from conftest import TOKEN, Server

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
TODAY = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)


def day(n: int, hours: float = 0) -> datetime:
    return TODAY + timedelta(days=n, hours=hours)


def date(n: int) -> str:
    return day(n).date().isoformat()


def test_calendars_working_time_and_a_schedule_keeping_to_one(client: hourglass.Client, topic: str) -> None:
    # 09:00-17:00 UTC every day, except tomorrow.
    name = topic.replace("py.", "c-")[:100]
    ops = Calendar(name, [WorkingHours(d, "09:00", "17:00") for d in DAYS], closed=[date(1)])
    client.create_calendar(ops)
    with pytest.raises(hourglass.AlreadyExists):
        client.create_calendar(ops)
    with pytest.raises(hourglass.InvalidArgument, match="Mars/Olympus"):
        client.create_calendar(Calendar(name + "-bad", ops.hours, time_zone="Mars/Olympus"))
    with pytest.raises(hourglass.InvalidMessage, match="someday"):
        client.create_calendar(Calendar(name + "-bad", [WorkingHours("someday", "09:00", "17:00")]))
    assert client.get_calendar(name) == Calendar(name, ops.hours, time_zone="", closed=[date(1)])
    assert name in [c.name for c in client.list_calendars(page_size=1)]
    with pytest.raises(hourglass.NotFound):
        client.get_calendar(name + "-nope")

    after = day(0, 12)  # tomorrow is closed
    first = client.schedule(topic, working=WorkingTime(name, days=2, at_time="10:30", after=after))
    assert first.time == day(3, 10.5)
    hours = client.schedule(topic, working=WorkingTime(name, duration=timedelta(hours=10), after=after))
    assert hours.time == day(2, 14)
    [batched] = client.schedule_batch([hourglass.Message(topic, working=WorkingTime(name, days=1, after=after))])
    assert batched.time == day(2, 12)
    for bad in (WorkingTime(name, days=1, duration=1), WorkingTime(name), WorkingTime(name, duration=1, at_time="09:00"), WorkingTime(name, days=0)):
        with pytest.raises(hourglass.InvalidMessage):
            client.schedule(topic, working=bad)
    with pytest.raises(hourglass.InvalidMessage):
        client.schedule(topic, delay=1, working=WorkingTime(name, days=1))
    with pytest.raises(hourglass.InvalidArgument, match="no such calendar"):
        client.schedule(topic, working=WorkingTime(name + "-nope", days=1))

    # The day after tomorrow closed too: what is stored keeps its time.
    client.update_calendar(Calendar(name, ops.hours, closed=[date(1), date(2)]))
    assert client.get(hours).message.deliver_at == day(2, 14)  # type: ignore[union-attr]
    assert client.schedule(topic, working=WorkingTime(name, days=1, after=after)).time == day(3, 12)

    # 08:00 every day, shifted to 09:00, never on a closed day.
    sched = name + "-eight"
    client.create_schedule(
        RecurringSchedule(sched, topic, "0 8 * * *", calendar=name, calendar_policy=CalendarPolicy.SHIFT,
                          jitter=timedelta(seconds=90), overlap=OverlapPolicy.BUFFER_ONE)
    )
    info = client.get_schedule(sched, next_count=5)
    s = info.schedule
    assert (s.jitter, s.overlap, s.calendar, s.calendar_policy, info.skipped, info.buffered) == (
        timedelta(seconds=90), OverlapPolicy.BUFFER_ONE, name, CalendarPolicy.SHIFT, 0, None)
    assert len(info.next) == 5
    for t in info.next:
        assert t.hour == 9 and t.minute == 0 and t.date().isoformat() not in (date(1), date(2)), t
    with pytest.raises(hourglass.InvalidMessage, match="overlap"):
        client.create_schedule(RecurringSchedule("x", topic, "@daily", overlap="queue"))  # type: ignore[arg-type]
    with pytest.raises(hourglass.FailedPrecondition, match=sched):
        client.delete_calendar(name)
    client.update_schedule(RecurringSchedule(sched, topic, "0 8 * * *"))
    s = client.get_schedule(sched).schedule
    assert (s.jitter, s.overlap, s.calendar, s.calendar_policy) == (timedelta(0), OverlapPolicy.ALLOW, "", None)
    client.delete_calendar(name)
    with pytest.raises(hourglass.NotFound):
        client.get_calendar(name)
    client.delete_schedule(sched)


def test_backfill_stores_a_past_spans_occurrences_once(client: hourglass.Client, topic: str) -> None:
    name = topic.replace("py.", "b-")[:100]
    client.create_schedule(RecurringSchedule(name, topic, "* * * * * *", paused=True))
    now = datetime.now(timezone.utc).replace(microsecond=0)
    start = now - timedelta(seconds=10)
    assert client.backfill_schedule(name, start, now - timedelta(seconds=5)) == hourglass.Backfilled(5, 0)
    assert client.backfill_schedule(name, start, now - timedelta(seconds=4)) == hourglass.Backfilled(1, 5)
    with pytest.raises(hourglass.InvalidArgument, match="after now"):
        client.backfill_schedule(name, start, now + timedelta(hours=1))
    with pytest.raises(hourglass.ScheduleNotFound):
        client.backfill_schedule(name + "-nope", start, now - timedelta(seconds=5))
    ds: list[hourglass.Delivery] = []
    deadline = time.monotonic() + 20
    while len(ds) < 6 and time.monotonic() < deadline:  # receive answers what is due, perhaps not all 6 at once
        ds += client.receive(topic, max_messages=10, wait=1)
    assert len(ds) == 6 and all("hourglass-backfill" in d.headers for d in ds)
    client.delete_schedule(name)


def test_aio_calendars_and_backfill(server: Server, topic: str) -> None:
    async def run() -> None:
        async with AsyncClient(server.addr, token=TOKEN) as c:
            name = topic.replace("py.", "a-")[:100]
            await c.create_calendar(Calendar(name, [WorkingHours("mon", "09:00", "12:00"), WorkingHours("mon", "13:00", "17:00")], time_zone="Europe/Berlin"))
            got = await c.get_calendar(name)
            assert got.time_zone == "Europe/Berlin" and [(h.day, h.start, h.end) for h in got.hours] == [("mon", "09:00", "12:00"), ("mon", "13:00", "17:00")]
            assert name in [x.name async for x in c.list_calendars()]
            id_ = await c.schedule(topic, working=WorkingTime(name, days=1))
            assert id_.time.astimezone(timezone.utc).weekday() == 0  # a Monday, the calendar's only working day
            await c.update_calendar(Calendar(name, [WorkingHours("tue", "09:00", "17:00")]))
            assert [h.day for h in (await c.get_calendar(name)).hours] == ["tue"]
            sched = name + "-s"
            await c.create_schedule(RecurringSchedule(sched, topic, "* * * * * *", paused=True))
            now = datetime.now(timezone.utc).replace(microsecond=0)
            assert await c.backfill_schedule(sched, now - timedelta(seconds=3), now) == hourglass.Backfilled(3, 0)
            await c.delete_schedule(sched)
            await c.delete_calendar(name)

    asyncio.run(run())
