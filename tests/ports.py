"""Free TCP ports on 127.0.0.1 for the servers and emulators the tests start (importable from every
test folder: tests/ is on sys.path through its conftest.py)."""
from __future__ import annotations

import os
import random
import socket

# Below Linux's ephemeral range (32768-60999 by default), so no client socket and no bind to port 0
# (which Linux answers with odd ports) is ever given one of these
LOW, HIGH = 20000, 32768


def xdist_worker() -> tuple[int, int]:
    """(index, count) of this pytest-xdist worker; (0, 1) when the tests run in one process."""
    wid = os.environ.get("PYTEST_XDIST_WORKER", "")
    try:
        count = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1), 1)
    except ValueError:
        count = 1
    index = int(wid[2:]) if wid.startswith("gw") and wid[2:].isdigit() else 0
    return index % count, count


def free_ports(n: int) -> list[int]:
    """n distinct ports free a moment ago (all bound at once, so never the same), drawn at random
    from [LOW, HIGH) among those equal to this xdist worker's index modulo the worker count. A port
    a test frees between a stop and a start (a rollback's window) can then be drawn again only by
    its own worker, whose tests run one at a time, never by a test running beside it (CI runs two
    workers; with ports from the kernel, one worker's next fleet took another's freed port)."""
    index, count = xdist_worker()
    first = LOW + (index - LOW) % count
    rng = random.Random()
    socks, ports = [], []
    try:
        for _ in range(64 * n):
            if len(ports) == n:
                break
            port = rng.randrange(first, HIGH, count)
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            socks.append(s)
            ports.append(port)
    finally:
        for s in socks:
            s.close()
    if len(ports) < n:
        raise RuntimeError(f"free_ports: {len(ports)} of {n} free ports in [{LOW}, {HIGH}) = {index} mod {count}")
    return ports
