"""Free TCP ports on 127.0.0.1 for the servers and emulators the tests start (importable from every
test folder: tests/ is on sys.path through its conftest.py)."""
from __future__ import annotations

import socket


def free_ports(n: int) -> list[int]:
    """n distinct ports the kernel had free a moment ago (all bound at once, so never the same)."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports
