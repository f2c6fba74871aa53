"""Errors: each status the server answers is the exception of its code with
the server's message, the same code and message the Go client gives (the
hourglass command is built on it, and prints "CALL: MESSAGE (CODE IN WORDS)"
or "CALL: MESSAGE (CODE IN WORDS: HINT)")."""

from __future__ import annotations

import re
import socket
import subprocess
from datetime import datetime
from typing import Callable, Optional

import grpc
import pytest

import hourglass
from hourglass import errors

from conftest import TOKEN, Server


def go_client_error(server: Server, args: list[str], token: Optional[str] = TOKEN, stdin: str = "") -> tuple[str, str]:
    """The code (in words: "invalid argument") and message of the Go client's error for the command."""
    env_args = ["--addr", f"http://{server.addr}"] + (["--token", token] if token else [])
    p = subprocess.run([server.binary, *args, *env_args], input=stdin, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0, f"hourglass {args} succeeded: {p.stdout}"
    m = re.search(r"\b[A-Z][A-Za-z]+: (.*) \(([a-z ]+)(: [^()]*)?\)\s*$", p.stderr)  # after the call's name
    assert m, f"no status in the Go client's error: {p.stderr}"
    return m.group(2), m.group(1)


def anonymous(server: Server) -> hourglass.Client:
    """A client without the server's token."""
    return hourglass.Client(server.addr)


CASES: list[tuple[str, Callable[[hourglass.Client, Server], object], list[str], Optional[str], str, type[errors.RpcError]]] = [
    (
        "invalid_topic",
        lambda c, s: c.schedule("bad topic", "x"),
        ["send", "--topic", "bad topic", "--now", "--body", "x"],
        TOKEN,
        "",
        errors.InvalidArgument,
    ),
    (
        "body_over_max_body",
        lambda c, s: c.schedule("t", b"x" * 20000),
        ["send", "--topic", "t", "--now", "--body-file", "-"],
        TOKEN,
        "x" * 20000,
        errors.InvalidArgument,
    ),
    (
        "request_over_max_request_size",
        lambda c, s: c.schedule_batch([hourglass.Message("t", b"x" * 16000) for _ in range(6)]),
        ["send", "--topic", "t", "--now", "--body-file", "-"],
        TOKEN,
        "x" * 100000,
        errors.ResourceExhausted,
    ),
    (
        "no_token",
        lambda c, s: anonymous(s).schedule("t", "x"),
        ["send", "--topic", "t", "--now", "--body", "x"],
        None,
        "",
        errors.Unauthenticated,
    ),
    (
        "unknown_schedule",
        lambda c, s: c.get_schedule("no-such-schedule"),
        ["schedule", "get", "no-such-schedule"],
        TOKEN,
        "",
        errors.ScheduleNotFound,
    ),
    (
        "bad_spec",
        lambda c, s: c.create_schedule(hourglass.RecurringSchedule("bad-spec", "t", "not a spec")),
        ["schedule", "create", "bad-spec", "--topic", "t", "--spec", "not a spec"],
        TOKEN,
        "",
        errors.InvalidArgument,
    ),
]


@pytest.mark.parametrize("name,call,args,token,stdin,want", CASES, ids=[c[0] for c in CASES])
def test_errors_have_the_go_clients_code_and_message(
    server: Server,
    client: hourglass.Client,
    name: str,
    call: Callable[[hourglass.Client, Server], object],
    args: list[str],
    token: Optional[str],
    stdin: str,
    want: type[errors.RpcError],
) -> None:
    with pytest.raises(want) as got:
        call(client, server)
    e = got.value
    assert e.code == want.code
    assert str(e) == f"hourglass: {e.call}: {e.message}"
    assert not e.message.startswith("rpc error"), "the message is the server's, without the gRPC prefix"
    go_code, go_message = go_client_error(server, args, token, stdin)
    assert go_code == e.code.name.lower().replace("_", " ")
    if name == "request_over_max_request_size":
        # Both name the limit; the sizes differ with what each sent.
        assert re.sub(r"\d+", "N", e.message) == re.sub(r"\d+", "N", go_message)
    else:
        assert e.message == go_message


def test_failed_precondition_for_an_ack_of_a_settled_message(client: hourglass.Client, topic: str) -> None:
    client.schedule(topic, "x")
    [d] = client.receive(topic, wait=10)
    client.ack(d)
    with pytest.raises(errors.FailedPrecondition, match="message not leased") as e:
        client.ack(d)
    assert e.value.call == "Ack"
    [err] = client.ack_batch([d])
    assert err is not None and str(err).startswith(f"hourglass: AckBatch: {d.id}: message not leased")


def test_unavailable_when_nothing_listens() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free once closed: nothing listens there
    with hourglass.Client(f"127.0.0.1:{port}", timeout=10) as c:
        with pytest.raises(errors.Unavailable) as e:
            c.time()
    assert e.value.code == grpc.StatusCode.UNAVAILABLE and errors.is_transient(e.value)


def test_mistakes_refused_before_sending(client: hourglass.Client, topic: str) -> None:
    with pytest.raises(hourglass.InvalidMessage, match=r"^hourglass: invalid message: delay 1 and level 2: set at most one of delay, at, level and working$"):
        client.schedule(topic, delay=1, level=2)
    with pytest.raises(hourglass.InvalidMessage, match="has no time zone"):
        client.schedule(topic, at=datetime(2030, 1, 2, 9, 0))
    with pytest.raises(hourglass.InvalidMessage, match="is negative"):
        client.schedule(topic, delay=-1)
    with pytest.raises(hourglass.InvalidMessage, match=r"messages\[1\]: level 0"):
        client.schedule_batch([hourglass.Message(topic), hourglass.Message(topic, level=0)])
    with pytest.raises(hourglass.InvalidMessage, match="want one of pending, due, dead-lettered"):
        client.purge(topic, "leased")
    with pytest.raises(hourglass.InvalidMessage, match="from 0 \\(5\\) to 100"):
        client.get_schedule("x", next_count=101)
    with pytest.raises(TypeError, match="names no message"):
        client.get(42)  # type: ignore[arg-type]
    assert isinstance(hourglass.InvalidMessage("x"), ValueError)


@pytest.mark.parametrize(
    "addr,want",
    [
        ("ftp://h:1", "scheme 'ftp'; want http:// or https://"),
        ("http://h:1/x", "has a path"),
        ("http://:1", "has no host"),
    ],
)
def test_bad_addresses(addr: str, want: str) -> None:
    with pytest.raises(ValueError, match=re.escape(want)):
        hourglass.Client(addr)
