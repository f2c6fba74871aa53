"""The sync Worker against the real server (started with --max-attempts 3):
acks, nacks by exception with the topic's backoff, Retry, dead letters,
bounded concurrency, lease extension, graceful stop by stop() and by
SIGTERM. Every wait has a deadline; no test sleeps for time to pass."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

import hourglass
from hourglass import Delivery, Retry, State

from conftest import TOKEN, Server, wait_for

#: Where the hourglass package under test was imported from (src/, or the
#: installed package), for the worker subprocess to import the same.
PACKAGE_ROOT = Path(hourglass.__file__).resolve().parents[1]


class Running:
    """A worker running on a thread; errors it reported are in errors."""

    def __init__(self, w: hourglass.Worker) -> None:
        self.w = w
        self.raised: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.w.run(handle_signals=False)
        except BaseException as e:
            self.raised.append(e)

    def stop(self, timeout: float = 20.0) -> None:
        self.w.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the worker did not stop within {timeout}s"


class Workers:
    """Makes workers on the test's client whose reported errors the test
    checks, runs them on threads, and stops them after the test."""

    def __init__(self, client: hourglass.Client) -> None:
        self.client = client
        self.running: list[Running] = []

    def make(self, **kw: Any) -> tuple[hourglass.Worker, list[BaseException]]:
        reported: list[BaseException] = []
        return hourglass.Worker(self.client, poll_wait=1, on_error=reported.append, **kw), reported

    def run(self, w: hourglass.Worker) -> Running:
        r = Running(w)
        self.running.append(r)
        return r


@pytest.fixture
def start(client: hourglass.Client) -> Iterator[Workers]:
    ws = Workers(client)
    yield ws
    for r in ws.running:
        if r.thread.is_alive():
            r.stop()


def test_a_handler_that_returns_acks(client: hourglass.Client, topic: str, start: Workers) -> None:
    id = client.schedule(topic, "hello", delay=0.2)
    w, reported = start.make()
    got: list[Delivery] = []

    @w.handler(topic)
    def handle(d: Delivery) -> None:
        got.append(d)

    r = start.run(w)
    wait_for("the message to be acked", lambda: client.get(id).state == State.ACKED)
    r.stop()
    assert [d.body for d in got] == [b"hello"] and got[0].id == id
    assert reported == [] and r.raised == []


def test_an_exception_nacks_with_the_topics_backoff(client: hourglass.Client, topic: str, start: Workers) -> None:
    client.set_policy(topic, hourglass.Policy(backoff=hourglass.Backoff(initial=0.3)))
    client.schedule(topic, "flaky")
    w, reported = start.make()
    got: list[Delivery] = []

    @w.handler(topic)
    def handle(d: Delivery) -> None:
        got.append(d)
        if d.attempt == 0:
            raise ValueError("flaky")

    r = start.run(w)
    wait_for("the second attempt to be acked", lambda: len(got) == 2 and client.get(got[1].id).state == State.ACKED)
    r.stop()
    assert [d.attempt for d in got] == [0, 1]
    assert got[1].origin_id == got[0].id
    waited = got[1].deliver_at - got[0].received_at
    assert waited.total_seconds() >= 0.3, f"the retry was due {waited} after the first delivery; the backoff is 300ms"
    assert reported == []


def test_retry_delivers_again_after_its_delay(client: hourglass.Client, topic: str, start: Workers) -> None:
    client.schedule(topic, "later")
    w, reported = start.make()
    got: list[Delivery] = []

    @w.handler(topic)
    def handle(d: Delivery) -> None:
        got.append(d)
        if d.attempt == 0:
            raise Retry(0.4, "not yet")

    r = start.run(w)
    wait_for("the retry to be acked", lambda: len(got) == 2 and client.get(got[1].id).state == State.ACKED)
    r.stop()
    assert got[1].attempt == 1 and got[1].origin_id == got[0].id
    waited = got[1].deliver_at - got[0].received_at
    assert waited.total_seconds() >= 0.4, f"the retry was due {waited} after the first delivery; it asked 400ms"
    assert reported == []


def test_dead_letter_after_max_attempts_and_by_request(client: hourglass.Client, topic: str, start: Workers) -> None:
    failing = client.schedule(topic, "charge card", headers={"kind": "fail"})
    poison = client.schedule(topic, "not json", headers={"kind": "poison"})
    w, reported = start.make(concurrency=2)
    tries: list[Delivery] = []
    dead: list[Delivery] = []

    @w.handler(topic)
    def handle(d: Delivery) -> None:
        tries.append(d)
        if d.headers["kind"] == "poison":
            raise hourglass.DeadLetter("unparsable")
        raise ValueError(f"card declined {d.attempt}")

    @w.handler(f"{topic}.dlq")
    def handle_dead(d: Delivery) -> None:
        dead.append(d)

    r = start.run(w)
    wait_for("both messages in the dead-letter topic", lambda: len(dead) == 2)
    r.stop()
    by_kind = {d.headers["kind"]: d for d in dead}
    f, p = by_kind["fail"], by_kind["poison"]
    assert [d.attempt for d in tries if d.headers["kind"] == "fail"] == [0, 1, 2]  # the server's --max-attempts 3
    assert [d.attempt for d in tries if d.headers["kind"] == "poison"] == [0]
    assert f.topic == f"{topic}.dlq" and f.body == b"charge card" and f.origin_id == failing
    assert f.dead_letter is not None
    assert (f.dead_letter.origin_topic, f.dead_letter.reason, f.dead_letter.last_error, f.dead_letter.attempts) == (
        topic, "max-attempts", "card declined 2", 3,
    )
    assert p.dead_letter is not None and p.origin_id == poison
    assert (p.dead_letter.reason, p.dead_letter.last_error) == ("nacked", "unparsable")
    assert reported == []


def test_concurrency_bounds_the_handlers_running_at_once(client: hourglass.Client, topic: str, start: Workers) -> None:
    n, limit = 8, 3
    client.schedule_batch([hourglass.Message(topic, f"m{i}") for i in range(n)])
    w, reported = start.make(concurrency=limit)
    mu = threading.Lock()
    running = most = handled = 0
    gate = threading.Event()

    @w.handler(topic)
    def handle(d: Delivery) -> None:
        nonlocal running, most, handled
        with mu:
            running += 1
            most = max(most, running)
            if running == limit:
                gate.set()
        assert gate.wait(20)
        with mu:
            running -= 1
            handled += 1

    r = start.run(w)
    wait_for("every message handled", lambda: handled == n)
    r.stop()
    assert most == limit
    assert reported == []


def test_a_long_handler_keeps_its_lease(client: hourglass.Client, topic: str, start: Workers) -> None:
    id = client.schedule(topic, "slow")
    w, reported = start.make(lease=2)
    seen: list[Delivery] = []
    done = threading.Event()

    @w.handler(topic)
    def handle(d: Delivery) -> None:
        seen.append(d)
        assert done.wait(20)

    r = start.run(w)
    wait_for("the handler to start", lambda: seen)
    first = seen[0].lease_expires_at

    def kept_past_its_first_lease() -> bool:
        leased = list(client.list_messages(topic, state=State.LEASED))
        # Not leased: the lease ran out and the message is due again (the
        # worker's one handler is busy, so it does not take it): the wait fails.
        return bool(leased) and client.time() > first and leased[0].lease_expires_at > first  # type: ignore[operator]

    wait_for("the message to stay leased past its first lease", kept_past_its_first_lease)
    done.set()
    wait_for("the message to be acked", lambda: client.get(id).state == State.ACKED)
    r.stop()
    assert len(seen) == 1, "an extended lease does not run out: the message is not delivered again"
    assert reported == []


def test_stop_lets_running_handlers_finish(client: hourglass.Client, topic: str, start: Workers) -> None:
    first = client.schedule(topic, "running")
    w, reported = start.make(concurrency=1)
    started = threading.Event()
    finish = threading.Event()

    @w.handler(topic)
    def handle(d: Delivery) -> None:
        started.set()
        assert finish.wait(20)

    r = start.run(w)
    assert started.wait(20)
    second = client.schedule(topic, "not taken")
    w.stop()
    assert r.thread.is_alive(), "run returned while a handler was running"
    finish.set()
    r.thread.join(20)
    assert not r.thread.is_alive() and r.raised == []
    assert client.get(first).state == State.ACKED
    assert client.get(second).state in (State.DUE, State.DELIVERING), "no message is taken after stop"
    [d] = client.receive(topic, wait=10)
    assert d.id == second and d.attempt == 0
    assert reported == []


def test_the_shutdown_timeout_gives_back_what_handlers_hold(client: hourglass.Client, topic: str, start: Workers) -> None:
    id = client.schedule(topic, "stuck")
    w, reported = start.make(shutdown_timeout=0.3)
    started = threading.Event()
    never = threading.Event()
    returned: list[Delivery] = []

    @w.handler(topic)
    def handle(d: Delivery) -> None:
        started.set()
        never.wait(20)
        returned.append(d)

    r = start.run(w)
    assert started.wait(20)
    r.stop()
    assert returned == [], "run returned without waiting for the stuck handler"
    [d] = client.receive(topic, wait=10)
    assert d.id == id and d.attempt == 0, "given back unhandled: its attempt is not counted"
    client.ack(d)
    never.set()
    assert reported == []


def test_run_raises_what_retrying_cannot_fix(client: hourglass.Client, start: Workers) -> None:
    w, _ = start.make()
    w.handle("bad topic", lambda d: None)
    with pytest.raises(hourglass.InvalidArgument, match="bad topic"):
        w.run(handle_signals=False)
    with pytest.raises(hourglass.HourglassError, match="already started"):
        w.run(handle_signals=False)
    w2, _ = start.make()
    with pytest.raises(hourglass.HourglassError, match="no topic to consume"):
        w2.run(handle_signals=False)
    w2.handle("t", lambda d: None)
    with pytest.raises(ValueError, match="already has a handler"):
        w2.handle("t", lambda d: None)


WORKER_SCRIPT = textwrap.dedent(
    """
    import sys
    import time
    import hourglass

    c = hourglass.Client(sys.argv[1], token=sys.argv[2])
    w = hourglass.Worker(c, concurrency=1, poll_wait=1)

    @w.handler(sys.argv[3])
    def handle(d):
        print("started", d.id, flush=True)
        deadline = time.monotonic() + 20
        while not w.stopping and time.monotonic() < deadline:
            time.sleep(0.005)  # until SIGTERM has reached the worker
        print("finishing", flush=True)

    w.run()
    print("stopped", flush=True)
    """
)


def test_sigterm_stops_gracefully(server: Server, client: hourglass.Client, topic: str, tmp_path: Path) -> None:
    first = client.schedule(topic, "a")
    script = tmp_path / "worker.py"
    script.write_text(WORKER_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.Popen(
        [sys.executable, str(script), server.addr, TOKEN, topic],
        stdout=subprocess.PIPE, text=True, env=env,
    )
    try:
        assert p.stdout is not None
        assert p.stdout.readline().split() == ["started", first]
        second = client.schedule(topic, "b")
        p.send_signal(signal.SIGTERM)
        assert p.stdout.readline().strip() == "finishing"
        assert p.stdout.readline().strip() == "stopped"
        assert p.wait(20) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert client.get(first).state == State.ACKED, "the running handler finished and its message was acked"
    f = client.get(second)
    assert f.state in (State.DUE, State.DELIVERING), f"a message due after SIGTERM was not taken ({f.state})"
