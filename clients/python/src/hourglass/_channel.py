"""What the sync and the asyncio client share about reaching a server: the
address, TLS, the channel's options and the metadata of every call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence
from urllib.parse import urlsplit

import grpc

#: Where a client connects when given no address: the address
#: ``hourglass serve`` listens on by default.
DEFAULT_ADDR = "http://127.0.0.1:7420"

#: What the client sends and accepts in one message: far above the
#: server's own request limit, which the server names in its errors.
MAX_MESSAGE_BYTES = 1 << 30


@dataclass(frozen=True)
class Target:
    """A gRPC target, whether it is TLS, and the metadata of every call."""

    target: str
    secure: bool
    metadata: tuple[tuple[str, str], ...]
    options: tuple[tuple[str, Any], ...]


def parse_addr(addr: str) -> tuple[str, bool]:
    """addr ("host:port", "http://host:port", "https://host:port") as a
    gRPC target and whether it is TLS. A URL's port defaults to 80 or 443."""
    if "://" not in addr:
        return addr, False
    try:
        u = urlsplit(addr)
        port = u.port
    except ValueError as e:
        raise ValueError(f"hourglass: address {addr!r}: {e}") from None
    if u.path not in ("", "/"):
        raise ValueError(f"hourglass: address {addr!r} has a path: give http://host:port or https://host:port")
    if u.scheme == "http":
        secure, default = False, 80
    elif u.scheme == "https":
        secure, default = True, 443
    else:
        raise ValueError(f"hourglass: address {addr!r}: scheme {u.scheme!r}; want http:// or https://")
    if not u.hostname:
        raise ValueError(f"hourglass: address {addr!r} has no host: give http://host:port or https://host:port")
    host = f"[{u.hostname}]" if ":" in u.hostname else u.hostname
    return f"{host}:{port or default}", secure


def target_of(
    addr: str,
    token: Optional[str],
    headers: Optional[Mapping[str, str]],
    options: Sequence[tuple[str, Any]],
) -> Target:
    target, secure = parse_addr(addr or DEFAULT_ADDR)
    md = [(k.lower(), v) for k, v in (headers or {}).items()]
    if token:
        md = [(k, v) for k, v in md if k != "authorization"]
        md.append(("authorization", f"Bearer {token}"))
    opts = (
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ) + tuple(options)
    return Target(target, secure, tuple(md), opts)


def credentials(root_certificates: Optional[bytes]) -> grpc.ChannelCredentials:
    """TLS credentials: the given roots (PEM), else the system's."""
    return grpc.ssl_channel_credentials(root_certificates=root_certificates)
