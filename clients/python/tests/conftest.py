"""Starts the real ``hourglass serve`` binary on 127.0.0.1 with a free port
and a temporary data directory, for the tests. The binary is
$HOURGLASS_BIN, or built from the repository with ``go build``."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable, Iterator

import pytest

import hourglass

REPO = Path(__file__).resolve().parents[3]
TOKEN = "sesame"


def wait_for(what: str, cond: Callable[[], object], timeout: float = 20.0) -> None:
    """Waits until cond() is true, checking every few milliseconds; fails
    after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.005)


class Server:
    """A running server: ``addr`` is "127.0.0.1:PORT"; ``log()`` is what it
    wrote so far."""

    def __init__(self, binary: str, data_dir: Path, args: list[str]) -> None:
        self.binary = binary
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir), "--fsync", "none", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._lines: list[str] = []
        self._addr = threading.Event()
        self.addr = ""
        threading.Thread(target=self._read, daemon=True).start()
        if not self._addr.wait(30):
            self.stop()
            raise RuntimeError(f"the server printed no address in 30s:\n{self.log()}")
        if not self.addr:
            raise RuntimeError(f"the server exited before listening:\n{self.log()}")
        wait_for("/readyz to answer 200", self._ready)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.append(line)
            m = re.search(r"listening on (\S+)", line)
            if m and not self.addr:
                self.addr = m.group(1)
                self._addr.set()
        self._addr.set()

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.addr}/readyz", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def log(self) -> str:
        return "".join(self._lines)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


@pytest.fixture(scope="session")
def binary(tmp_path_factory: pytest.TempPathFactory) -> str:
    if os.environ.get("HOURGLASS_BIN"):
        return os.environ["HOURGLASS_BIN"]
    out = tmp_path_factory.mktemp("bin") / "hourglass"
    subprocess.run(["go", "build", "-o", str(out), "./cmd/hourglass"], cwd=REPO, check=True)
    return str(out)


@pytest.fixture(scope="session")
def server(binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for the session: a token, 3 attempts before a dead
    letter, bodies up to 16 KiB and requests up to 80 KiB. Its buckets are
    an hour long (the default), so that Get still finds a delivered
    message while the tests run: a bucket whose messages are all done is
    deleted once it is over, and Get then answers not-found."""
    s = Server(
        binary,
        tmp_path_factory.mktemp("data"),
        [
            "--auth-token", TOKEN,
            "--max-attempts", "3",
            "--max-body", "16KiB",
            "--max-request-size", "80KiB",
        ],
    )
    yield s
    s.stop()


@pytest.fixture
def client(server: Server) -> Iterator[hourglass.Client]:
    with hourglass.Client(server.addr, token=TOKEN) as c:
        yield c


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic of this test's own: letters of its name."""
    return "py." + re.sub(r"[^A-Za-z0-9_.-]", "-", request.node.name)[:150]


def pytest_report_header() -> str:
    return f"hourglass: {hourglass.__file__}"
