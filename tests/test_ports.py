"""tests/ports.py: the ports a test draws are its xdist worker's alone."""
import ports


def test_ports_are_distinct_and_of_this_worker(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    got = ports.free_ports(6)
    assert len(set(got)) == 6 and all(p % 2 == 1 for p in got)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    assert all(p % 2 == 0 for p in ports.free_ports(6))


def test_one_process_draws_any_port(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    assert ports.xdist_worker() == (0, 1)
    got = ports.free_ports(4)
    assert len(set(got)) == 4 and all(ports.LOW <= p < ports.HIGH for p in got)
