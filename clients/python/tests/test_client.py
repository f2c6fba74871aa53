"""Each call of the sync Client against the real server. Short delays
(hundreds of ms); every wait has a deadline."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

import hourglass
from hourglass import CancelResult, Key, Message, State

from conftest import wait_for

UNKNOWN_ID = "0000019000000000ffffffffffffffff"


def receive_one(c: hourglass.Client, topic: str, timeout: float = 10.0) -> hourglass.Delivery:
    ds = c.receive(topic, wait=timeout)
    assert len(ds) == 1, f"nothing due in {topic} within {timeout}s"
    return ds[0]


def test_schedule_with_delay_is_delivered_when_due_not_before(client: hourglass.Client, topic: str) -> None:
    id = client.schedule(topic, "order 2 timed out", delay=0.3, headers={"order": "2"})
    assert id.time > datetime.now(timezone.utc), "due in the future"
    assert client.get(id).state == State.PENDING
    d = receive_one(client, topic)
    assert d.id == id and d.origin_id == id
    assert d.body == b"order 2 timed out"
    assert d.headers == {"order": "2"}
    assert d.attempt == 0
    assert d.deliver_at == id.time
    assert d.received_at >= d.deliver_at, f"received {d.received_at}, before due {d.deliver_at}"
    # Get tells "delivering" until the engine has recorded the hand-off to the queue.
    wait_for("get to tell leased", lambda: client.get(id).state == State.LEASED)
    client.ack(d)
    wait_for("get to tell acked", lambda: client.get(id).state == State.ACKED)


def test_schedule_at_an_absolute_time(client: hourglass.Client, topic: str) -> None:
    at = datetime.now(timezone.utc) + timedelta(milliseconds=400)
    at = at.replace(microsecond=at.microsecond // 1000 * 1000)  # the server keeps milliseconds
    id = client.schedule(topic, b"reminder", at=at)
    assert id.time == at
    d = receive_one(client, topic)
    assert d.id == id
    assert d.received_at >= at


def test_schedule_by_level(client: hourglass.Client, topic: str) -> None:
    before = client.time()
    id = client.schedule(topic, at=None, level=1)  # the server's first --delay-levels: 1s
    assert timedelta(milliseconds=900) <= id.time - before <= timedelta(seconds=5)
    assert client.cancel(id) == CancelResult.CANCELLED


def test_idempotency_key_names_the_message(client: hourglass.Client, topic: str) -> None:
    first = client.schedule(topic, "x", delay=3600, key="order-42")
    assert client.schedule(topic, "x", delay=3600, key="order-42") == first, "a resend stores nothing twice"
    ref = Key(topic, "order-42")
    f = client.get(ref)
    assert f.state == State.PENDING and f.message is not None and f.message.id == first
    assert f.message.headers.get("hourglass-idempotency-key") == "order-42"
    assert client.cancel(ref) == CancelResult.CANCELLED
    assert client.cancel(first) == CancelResult.ALREADY_CANCELLED


def test_cancel_answers(client: hourglass.Client, topic: str) -> None:
    id = client.schedule(topic, delay=0.3)
    assert client.cancel(id) == "cancelled"
    assert client.cancel(id) == CancelResult.ALREADY_CANCELLED
    assert client.get(id).state == State.CANCELLED
    assert client.cancel(UNKNOWN_ID) == CancelResult.UNKNOWN
    # A message due after it: once that one arrives, the cancelled one would have come first.
    marker = client.schedule(topic, "marker", delay=0.4)
    d = receive_one(client, topic)
    assert d.id == marker
    client.ack(d)
    res = client.cancel(marker)
    # Truthful, never "cancelled": already delivered while its bucket exists, unknown once it is deleted.
    assert res in (CancelResult.ALREADY_DELIVERED, CancelResult.UNKNOWN)


def test_schedule_batch_and_get(client: hourglass.Client, topic: str) -> None:
    a, b = client.schedule_batch(
        [Message(topic, "a", delay=60), Message(topic, bytes([0xFF]), level=1, headers={"k": "v"})]
    )
    assert a != b
    f = client.get(b)
    assert f.state == State.PENDING
    assert f.message is not None and f.message.body == b"\xff" and f.message.headers == {"k": "v"}
    assert client.get(UNKNOWN_ID).state == State.NOT_FOUND
    with pytest.raises(hourglass.InvalidArgument):
        client.schedule_batch([Message(topic), Message("bad topic")])  # all or none
    for id in (a, b):
        assert client.cancel(id) == CancelResult.CANCELLED


def test_schedule_stream_answers_each_message_in_order(client: hourglass.Client, topic: str) -> None:
    msgs = [Message(topic, f"m{i}", delay=3600) for i in range(5)]
    msgs.insert(2, Message("bad topic"))
    results = list(client.schedule_stream(msgs))
    assert [r.message for r in results] == msgs
    refused = results[2]
    assert refused.id is None and isinstance(refused.error, hourglass.InvalidArgument)
    assert "bad topic" in refused.error.message
    ids = [r.id for r in results if r.id is not None]
    assert len(ids) == 5 and len(set(ids)) == 5
    for id, m in zip(ids, [m for m in msgs if m.topic == topic]):
        f = client.get(id)
        assert f.state == State.PENDING and f.message is not None and f.message.body == m.body.encode()


def test_schedule_stream_raises_a_message_it_refuses_after_the_ones_before(
    client: hourglass.Client, topic: str
) -> None:
    msgs = [Message(topic, delay=3600), Message(topic, delay=1, level=1)]
    got = []
    with pytest.raises(hourglass.InvalidMessage, match="set at most one"):
        for r in client.schedule_stream(msgs):
            got.append(r)
    assert len(got) == 1 and got[0].id is not None


def test_reschedule_by_id_and_by_key(client: hourglass.Client, topic: str) -> None:
    old = client.schedule(topic, "moved", delay=3600)
    new = client.reschedule(old, delay=3600)
    assert new != old
    # The first ID names the message for its whole life: get by it says what
    # carries it now, and reschedule by it moves that one.
    f = client.get(old)
    assert f.state == State.PENDING and f.rescheduled_to == new and f.message is not None and f.message.id == new
    newer = client.reschedule(old, now=True)
    assert newer not in (old, new)
    d = receive_one(client, topic)
    assert d.id == newer and d.origin_id == old
    client.ack(d)
    with pytest.raises((hourglass.AlreadyDelivered, hourglass.NotPending)):
        client.reschedule(newer, at=datetime.now(timezone.utc) + timedelta(minutes=1))
    with pytest.raises(hourglass.NotPending, match="no such message pending"):
        client.reschedule(UNKNOWN_ID, now=True)
    cancelled = client.schedule(topic, delay=3600)
    assert client.cancel(cancelled) == CancelResult.CANCELLED
    with pytest.raises(hourglass.AlreadyCancelled, match="already cancelled or rescheduled"):
        client.reschedule(cancelled, now=True)

    keyed = client.schedule(topic, delay=3600, key="k1")
    moved = client.reschedule(Key(topic, "k1"), at=datetime.now(timezone.utc) + timedelta(hours=2))
    assert moved.time > keyed.time
    assert client.get(Key(topic, "k1")).message.id == moved  # type: ignore[union-attr]
    with pytest.raises(hourglass.InvalidMessage, match="reschedule without a time"):
        client.reschedule(moved)
    assert client.cancel(moved) == CancelResult.CANCELLED


def test_list_messages_in_delivery_order_a_page_at_a_time(client: hourglass.Client, topic: str) -> None:
    ids = client.schedule_batch([Message(topic, str(h), delay=3600 * h) for h in (3, 1, 2)])
    want = [ids[1], ids[2], ids[0]]
    assert [m.id for m in client.list_messages(topic, page_size=1)] == want
    page, token = client.list_messages_page(topic, page_size=2)
    assert [m.id for m in page] == want[:2] and token
    later = client.list_messages(topic, start=datetime.now(timezone.utc) + timedelta(minutes=90))
    assert [m.id for m in later] == want[1:]
    with pytest.raises(hourglass.InvalidMessage, match="want one of"):
        list(client.list_messages(topic, state="acked"))
    assert client.purge(topic, State.PENDING) == 3
    assert list(client.list_messages(topic)) == []


def test_recurring_schedule_fires_pauses_resumes_changes_and_is_deleted(
    client: hourglass.Client, topic: str
) -> None:
    name = topic.replace("py.", "s-")[:100]
    s = hourglass.RecurringSchedule(name, topic, "@every 1s", body="tick", headers={"k": "v"})
    first = client.create_schedule(s)
    assert first is not None
    with pytest.raises(hourglass.ScheduleExists) as exists:
        client.create_schedule(s)
    assert exists.value.code.name == "ALREADY_EXISTS"
    info = client.get_schedule(name, next_count=3)
    assert info.schedule.spec == "@every 1s" and info.schedule.topic == topic and len(info.next) == 3
    assert info.armed is not None and info.armed.time >= first  # or a later one, if the first fired meanwhile
    assert name in [i.schedule.name for i in client.list_schedules(topic=topic)]
    d = receive_one(client, topic)
    assert d.body == b"tick" and d.headers["hourglass-schedule"] == name and d.headers["k"] == "v"
    at = d.deliver_at
    assert datetime.fromisoformat(d.headers["hourglass-occurrence"].replace("Z", "+00:00")) == at
    key = f"{name}@{at:%Y-%m-%dT%H:%M:%S}.{at.microsecond // 1000:03d}Z"  # the occurrence's idempotency key
    assert client.get(Key(topic, key)).message.id == d.id  # type: ignore[union-attr]
    client.ack(d)

    client.pause_schedule(name)
    paused = client.get_schedule(name)
    assert paused.schedule.paused and paused.next == [] and paused.armed is None
    assert client.resume_schedule(name) is not None
    nxt = client.update_schedule(hourglass.RecurringSchedule(name, topic, "0 9 * * MON-FRI", time_zone="Europe/Berlin"))
    assert nxt is not None and nxt > datetime.now(timezone.utc)
    assert client.get_schedule(name).schedule.time_zone == "Europe/Berlin"
    client.delete_schedule(name)
    with pytest.raises(hourglass.ScheduleNotFound):
        client.get_schedule(name)
    with pytest.raises(hourglass.InvalidArgument):
        client.create_schedule(hourglass.RecurringSchedule(name, topic, "not a spec"))


def test_topic_policy_pause_resume_and_delete(client: hourglass.Client, topic: str) -> None:
    p = client.set_policy(topic, hourglass.Policy(max_attempts=5, backoff=hourglass.Backoff(initial=0.5, multiplier=2)))
    assert p.policy.max_attempts == 5
    assert p.policy.backoff is not None and p.policy.backoff.initial == timedelta(milliseconds=500)
    assert client.pause(topic).policy.paused is True
    id = client.schedule(topic, "held")
    assert client.receive(topic, wait=0.3) == [], "a paused topic hands out nothing"
    assert client.resume(topic).policy.paused is None
    d = receive_one(client, topic)
    assert d.id == id
    client.ack(d)
    back = client.set_policy(topic, hourglass.Policy(), ["max_attempts"])
    assert back.policy.max_attempts is None and back.effective.max_attempts == 3  # the server's --max-attempts
    assert topic in [t.topic for t in client.topics()]
    client.schedule(topic, delay=3600)
    assert client.delete_topic(topic).cancelled == 1


def test_frozen_pause_counts_in_get_and_resume_ends_it(client: hourglass.Client, topic: str) -> None:
    id = client.schedule(topic, "later", delay=3600)
    p = client.freeze(topic)
    assert p.effective.freeze is True and p.effective.paused is True
    assert len(p.freezes) == 1 and p.freezes[0].ended_at is None
    deadline = time.monotonic() + 10
    while True:  # the freeze counts whole milliseconds: until get sees one pass
        m = client.get(id).message
        assert m is not None and m.deliver_at is not None
        if m.frozen and m.due_at is not None and m.due_at > m.deliver_at:
            break
        assert time.monotonic() < deadline, f"get while frozen: {m}"
    p = client.resume(topic)
    assert p.effective.freeze is False and p.effective.paused is False
    fz = p.freezes[0]
    assert fz.ended_at is not None
    m = client.get(id).message
    assert m is not None and m.deliver_at is not None and not m.frozen
    assert m.due_at == m.deliver_at + (fz.ended_at - fz.began_at)


def test_nack_to_the_dead_letter_topic_and_redrive(client: hourglass.Client, topic: str) -> None:
    ids = client.schedule_batch([Message(topic, "a"), Message(topic, "b")])
    ds = client.receive(topic, max_messages=2, wait=10)
    assert sorted(d.id for d in ds) == sorted(ids)
    client.nack(ds[0], dead_letter=True, reason="unparsable")
    client.nack(ds[1], delay=3600, reason="later")
    [dead] = client.receive(f"{topic}.dlq", wait=10, lease=60)
    assert dead.origin_id == ds[0].id and dead.dead_letter is not None
    assert (dead.dead_letter.reason, dead.dead_letter.last_error) == ("nacked", "unparsable")
    assert client.extend(dead, 120) > dead.lease_expires_at
    client.nack(dead, release=True)
    assert [m.id for m in client.list_messages(topic, state=State.DEAD_LETTERED)] == [dead.id]
    res = client.redrive(f"{topic}.dlq")
    assert (res.redriven, res.skipped, res.more) == (1, 0, False)
    [again] = client.receive(topic, wait=10)
    assert again.origin_id == ds[0].id and again.attempt == 0 and again.body == ds[0].body
    client.settle(again, None)
    wait_for("the redriven message to be acked", lambda: client.get(again.id).state == State.ACKED)


def test_edit_by_id_and_by_key(client: hourglass.Client, topic: str) -> None:
    first = client.schedule(topic, "old", headers={"a": "1"}, delay=3600, key="e1")
    edited = client.edit(Key(topic, "e1"), body="new", headers={"b": "2"})
    assert edited != first and edited.time == first.time
    f = client.get(first)
    assert f.state == State.PENDING and f.message is not None and f.message.id == edited
    assert f.message.body == b"new" and f.message.headers.get("b") == "2" and "a" not in f.message.headers
    client.edit(first, body="newer")  # the headers are kept
    f = client.get(first)
    assert f.message is not None and f.message.body == b"newer" and f.message.headers.get("b") == "2"
    with pytest.raises(hourglass.InvalidMessage, match="edit without a change"):
        client.edit(first)
    assert client.cancel(first) == CancelResult.CANCELLED
    with pytest.raises(hourglass.AlreadyCancelled):
        client.edit(first, body="late")
    with pytest.raises(hourglass.NotPending):
        client.edit(UNKNOWN_ID, body="x")


def test_freeze_message_and_thaw(client: hourglass.Client, topic: str) -> None:
    first = client.schedule(topic, "b", delay=3600, key="f1")
    frozen = client.freeze_message(Key(topic, "f1"))
    assert frozen.id != first and timedelta(minutes=59) < frozen.remaining <= timedelta(hours=1)
    f = client.get(first)
    assert f.state == State.PENDING and f.message is not None and f.message.id == frozen.id
    assert f.message.frozen and f.message.frozen_remaining == frozen.remaining
    with pytest.raises(hourglass.AlreadyFrozen):
        client.freeze_message(first)
    before = datetime.now(timezone.utc)
    thawed = client.thaw_message(first)
    assert thawed.time >= before + frozen.remaining - timedelta(seconds=1)
    f = client.get(Key(topic, "f1"))
    assert f.message is not None and f.message.id == thawed and f.message.frozen_remaining is None
    with pytest.raises(hourglass.NotFrozen):
        client.thaw_message(first)
    assert client.cancel(first) == CancelResult.CANCELLED
    with pytest.raises(hourglass.AlreadyCancelled):
        client.freeze_message(first)
    with pytest.raises(hourglass.NotPending):
        client.thaw_message(UNKNOWN_ID)


def test_expired_message_dead_lettered(client: hourglass.Client, topic: str) -> None:
    client.schedule(topic, "stale", at=datetime.now(timezone.utc) - timedelta(seconds=10), ttl=0.001)
    fresh = client.schedule(topic, "fresh", ttl=3600)
    d = receive_one(client, topic)
    assert d.id == fresh and d.body == b"fresh"
    client.ack(d)
    dead = receive_one(client, topic + ".dlq")
    assert dead.body == b"stale" and dead.dead_letter is not None and dead.dead_letter.reason == "expired"
    client.ack(dead)
    with pytest.raises(hourglass.InvalidMessage, match="at most one of them"):
        client.schedule(topic, ttl=1, expire_at=datetime.now(timezone.utc) + timedelta(hours=1))
    with pytest.raises(hourglass.InvalidMessage, match="ttl"):
        client.schedule(topic, ttl=0)
