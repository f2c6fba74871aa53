"""The asyncio client and worker (hourglass.aio) against the real server.
Each test runs its own event loop (asyncio.run); every wait has a deadline."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Awaitable, Callable, Coroutine

import pytest

import hourglass
from hourglass import CancelResult, Delivery, Key, Message, Retry, State
from hourglass.aio import AsyncClient, AsyncWorker

from conftest import TOKEN, Server


def run(server: Server, body: Callable[[AsyncClient], Coroutine[Any, Any, None]]) -> None:
    async def main() -> None:
        async with AsyncClient(server.addr, token=TOKEN) as c:
            await asyncio.wait_for(body(c), 60)

    asyncio.run(main())


async def until(what: str, cond: Callable[[], Awaitable[bool]], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not await cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.005)


def test_calls(server: Server, topic: str) -> None:
    async def body(c: AsyncClient) -> None:
        id = await c.schedule(topic, "hello", delay=0.3, headers={"k": "v"}, key="k1")
        assert await c.schedule(topic, "hello", delay=0.3, key="k1") == id
        f = await c.get(Key(topic, "k1"))
        assert f.state == State.PENDING and f.message is not None and f.message.id == id
        [d] = await c.receive(topic, wait=10)
        assert (d.id, d.body, d.headers["k"]) == (id, b"hello", "v") and d.received_at >= d.deliver_at
        await c.settle(d, None)
        assert (await c.get(id)).state in (State.ACKED, State.DELIVERING)

        a, b = await c.schedule_batch([Message(topic, delay=3600), Message(topic, delay=7200)])
        assert [m.id async for m in c.list_messages(topic, page_size=1)] == [a, b]
        assert await c.cancel(a) == CancelResult.CANCELLED
        assert await c.cancel(a) == CancelResult.ALREADY_CANCELLED
        moved = await c.reschedule(b, at=datetime.now(timezone.utc) + timedelta(milliseconds=200))
        assert (await c.get(b)).rescheduled_to == moved
        with pytest.raises(hourglass.AlreadyCancelled):
            await c.reschedule(a, now=True)
        [d] = await c.receive(topic, wait=10)
        assert d.id == moved and d.origin_id == b
        await c.ack(d)
        with pytest.raises(hourglass.FailedPrecondition):
            await c.ack(d)

        msgs = [Message(topic, f"s{i}", delay=3600) for i in range(50)] + [Message("bad topic")]
        results = [r async for r in c.schedule_stream(msgs)]
        assert [r.message for r in results] == msgs
        assert all(r.id is not None for r in results[:50])
        assert isinstance(results[50].error, hourglass.InvalidArgument)
        assert await c.purge(topic, "pending") == 50
        assert (await c.time()).tzinfo is not None

    run(server, body)


def test_recurring_schedules_and_policies(server: Server, topic: str) -> None:
    async def body(c: AsyncClient) -> None:
        name = "aio-" + topic[-40:]
        s = hourglass.RecurringSchedule(name, topic, "0 9 * * *", time_zone="Europe/Berlin", misfire=hourglass.MisfirePolicy.SKIP)
        assert await c.create_schedule(s) is not None
        with pytest.raises(hourglass.ScheduleExists):
            await c.create_schedule(s)
        info = await c.get_schedule(name, next_count=2)
        assert info.schedule.misfire == hourglass.MisfirePolicy.SKIP and len(info.next) == 2
        assert info.next[0].astimezone(timezone.utc).hour in (7, 8)  # 09:00 in Berlin
        await c.pause_schedule(name)
        assert (await c.get_schedule(name)).schedule.paused
        assert await c.resume_schedule(name) is not None
        assert await c.update_schedule(hourglass.RecurringSchedule(name, topic, "@every 1h")) is not None
        assert [i.schedule.spec async for i in c.list_schedules(topic=topic)] == ["@every 1h"]
        await c.delete_schedule(name)
        with pytest.raises(hourglass.ScheduleNotFound):
            await c.delete_schedule(name)

        p = await c.pause(topic)
        assert p.policy.paused is True and p.effective.max_attempts == 3
        assert [t.policy.paused for t in await c.topics() if t.topic == topic] == [True]
        assert (await c.resume(topic)).policy.paused is None
        assert (await c.get_policy(topic)).effective.max_attempts == 3

    run(server, body)


def test_errors(server: Server) -> None:
    async def body(c: AsyncClient) -> None:
        with pytest.raises(hourglass.InvalidArgument) as e:
            await c.schedule("bad topic")
        assert str(e.value) == f"hourglass: Schedule: {e.value.message}" and "bad topic" in e.value.message
        async with AsyncClient(server.addr) as anon:
            with pytest.raises(hourglass.Unauthenticated):
                await anon.time()
        with pytest.raises(hourglass.InvalidMessage):
            await c.schedule("t", delay=1, at=datetime.now(timezone.utc))

    run(server, body)


def test_worker_acks_retries_nacks_and_dead_letters(server: Server, topic: str) -> None:
    async def body(c: AsyncClient) -> None:
        ok = await c.schedule(topic, "ok")
        later = await c.schedule(topic, "later")
        failing = await c.schedule(topic, "fail")
        reported: list[BaseException] = []
        w = AsyncWorker(c, concurrency=4, poll_wait=1, on_error=reported.append)
        tries: list[Delivery] = []
        dead: list[Delivery] = []

        @w.handler(topic)
        async def handle(d: Delivery) -> None:
            tries.append(d)
            if d.body == b"later" and d.attempt == 0:
                raise Retry(timedelta(milliseconds=300))
            if d.body == b"fail":
                raise RuntimeError(f"no {d.attempt}")

        def handle_dead(d: Delivery) -> None:  # a plain function runs on a thread
            dead.append(d)

        w.handle(f"{topic}.dlq", handle_dead)
        running = asyncio.ensure_future(w.run(handle_signals=False))

        async def done() -> bool:
            return len(dead) == 1 and any(d.body == b"later" and d.attempt == 1 for d in tries)

        await until("the retry and the dead letter", done)
        w.stop()
        await asyncio.wait_for(running, 20)
        assert reported == []
        assert [d.attempt for d in tries if d.id == ok] == [0]
        first, second = [d for d in tries if d.body == b"later"]
        assert second.origin_id == later and (second.deliver_at - first.received_at).total_seconds() >= 0.3
        assert [d.attempt for d in tries if d.body == b"fail"] == [0, 1, 2]
        assert dead[0].origin_id == failing and dead[0].dead_letter is not None
        assert (dead[0].dead_letter.reason, dead[0].dead_letter.last_error) == ("max-attempts", "no 2")
        assert (await c.get(ok)).state == State.ACKED

    run(server, body)


def test_worker_stop_waits_for_handlers_then_cancels_them(server: Server, topic: str) -> None:
    async def body(c: AsyncClient) -> None:
        quick = await c.schedule(topic, "quick")
        stuck = await c.schedule(topic, "stuck")
        w = AsyncWorker(c, concurrency=2, poll_wait=1, shutdown_timeout=0.3)
        started: dict[bytes, asyncio.Event] = {b"quick": asyncio.Event(), b"stuck": asyncio.Event()}
        go = asyncio.Event()
        cancelled: list[bytes] = []

        @w.handler(topic)
        async def handle(d: Delivery) -> None:
            started[d.body].set()
            try:
                if d.body == b"quick":
                    await go.wait()
                else:
                    await asyncio.Event().wait()  # never set: until cancelled
            except asyncio.CancelledError:
                cancelled.append(d.body)
                raise

        running = asyncio.ensure_future(w.run(handle_signals=False))
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started.values())), 20)
        w.stop()
        assert w.stopping
        go.set()  # the quick handler finishes within the shutdown timeout
        await asyncio.wait_for(running, 20)
        assert cancelled == [b"stuck"]
        assert (await c.get(quick)).state == State.ACKED
        [d] = await c.receive(topic, wait=10)
        assert d.id == stuck and d.attempt == 0, "the cancelled handler's message is given back unhandled"
        await c.ack(d)

    run(server, body)


def test_worker_raises_what_retrying_cannot_fix(server: Server) -> None:
    async def body(c: AsyncClient) -> None:
        w = AsyncWorker(c, poll_wait=1)
        w.handle("bad topic", lambda d: None)
        with pytest.raises(hourglass.InvalidArgument, match="bad topic"):
            await w.run(handle_signals=False)

    run(server, body)


def test_worker_stops_when_every_handler_is_stuck(server: Server, topic: str) -> None:
    async def body(c: AsyncClient) -> None:
        id = await c.schedule(topic, "stuck")
        w = AsyncWorker(c, concurrency=1, poll_wait=1, shutdown_timeout=0.2)
        started = asyncio.Event()

        @w.handler(topic)
        async def handle(d: Delivery) -> None:
            started.set()
            await asyncio.Event().wait()  # never set: until cancelled

        running = asyncio.ensure_future(w.run(handle_signals=False))
        await asyncio.wait_for(started.wait(), 20)
        w.stop()
        done, _ = await asyncio.wait([running], timeout=10)
        assert done, "run did not return within 10 s of stop; its shutdown timeout is 0.2 s"
        await running
        [d] = await c.receive(topic, wait=10)
        assert d.id == id and d.attempt == 0
        await c.ack(d)

    run(server, body)
