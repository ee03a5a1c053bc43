"""Fixtures: throwaway redis-servers on loopback, clients of them.

Run from the repository with Debian's interpreter and pytest:
    DLOCK_LIBRARY=build/plain/libdlock.so /usr/bin/python3 -m pytest \\
        bindings/python/tests
(scripts/test.sh's `python` stage does). Without DLOCK_LIBRARY the
library is looked for in build/plain, build/dev, then the system. The
package under test is the source tree's (bindings/python), not an
installed copy.

Servers follow tests/fixtures/redis.sh's rules: 127.0.0.1 only, a free
port below the ephemeral range, a temp dir of their own (no RDB, no AOF,
a unix socket there), `--enable-debug-command local`; each is killed by
its pid when its fixture ends.
"""
from __future__ import annotations

import itertools
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Iterator

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(PKG))
sys.path.insert(0, PKG)

if not os.environ.get("DLOCK_LIBRARY"):
    for d in ("build/plain", "build/dev"):
        p = os.path.join(ROOT, d, "libdlock.so")
        if os.path.exists(p):
            os.environ["DLOCK_LIBRARY"] = p
            break

import dlock  # noqa: E402


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _pick_port() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except OSError:
        low = 32768
    if low <= 12000:
        low = 32768
    for _ in range(50):
        p = random.randrange(10000, low)
        if not _port_open(p):
            return p
    raise RuntimeError("no free port found")


class RedisServer:
    """One redis-server: url, unix_url, port, dir, pid; stop() kills it."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="dlock-py-redis-")
        self.sock = os.path.join(self.dir, "redis.sock")
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.skip("redis-server not installed (scripts/deps.sh)")
        for _ in range(5):
            self.port = _pick_port()
            self.proc = subprocess.Popen(
                [exe, "--port", str(self.port), "--bind", "127.0.0.1",
                 "--dir", self.dir, "--save", "", "--appendonly", "no",
                 "--unixsocket", self.sock, "--unixsocketperm", "700",
                 "--enable-debug-command", "local", "--daemonize", "no",
                 "--logfile", os.path.join(self.dir, "redis.log")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.proc.poll() is None:
                if _port_open(self.port):
                    break
                time.sleep(0.02)
            if self.proc.poll() is None and _port_open(self.port):
                break
            self._kill()  # the port was taken meanwhile: another one
        else:
            raise RuntimeError("redis-server did not start")
        self.pid = self.proc.pid
        self.url = "redis://127.0.0.1:%d" % self.port
        self.unix_url = "unix://" + self.sock

    def _kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def stop(self) -> None:
        self._kill()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def server() -> Iterator[RedisServer]:
    """A redis-server shared by the session's tests (each test works
    under its own key prefix or names)."""
    s = RedisServer()
    yield s
    s.stop()


@pytest.fixture
def fresh_server() -> Iterator[RedisServer]:
    """A redis-server of the test's own."""
    s = RedisServer()
    yield s
    s.stop()


_seq = itertools.count()


@pytest.fixture
def prefix() -> str:
    """A key prefix no other test uses."""
    return "t%d_%d" % (os.getpid(), next(_seq))


@pytest.fixture
def client(server: RedisServer, prefix: str) -> Iterator[dlock.Client]:
    c = dlock.Client(server.url, prefix=prefix, env=False)
    yield c
    c.close()


@pytest.fixture
def rpy(server: RedisServer):
    """A redis-py client of the shared server."""
    redis = pytest.importorskip("redis")
    r = redis.Redis.from_url(server.url)
    yield r
    r.close()


class Topology:
    """A Sentinel deployment or a Redis Cluster from tests/fixtures/
    topology.sh (the CLI tests' fixture), run by topo_driver.sh in a
    bash process of its own: its servers die with that process. cmd()
    sends one driver command and returns its answer's value (a failed
    command fails the test)."""

    def __init__(self, kind: str) -> None:
        if shutil.which("redis-server") is None or \
                shutil.which("redis-cli") is None:
            pytest.skip("redis-server or redis-cli not installed")
        self.kind = kind
        self.proc = subprocess.Popen(
            ["bash", os.path.join(HERE, "topo_driver.sh"), kind],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, bufsize=1)
        first = self._line(120)
        if not first.startswith("ready "):
            self.stop()
            raise RuntimeError("%s did not start: %s" % (kind, first))
        parts = first.split()[1:]
        if kind == "sentinel":
            self.sentinel_ports = [int(p) for p in parts[1].split(",")]
            self.data_ports = [int(p) for p in parts[2].split(",")]
            self.url = "redis+sentinel://%s/dlock" % ",".join(
                "127.0.0.1:%d" % p for p in self.sentinel_ports)
        else:
            self.ports = [int(p) for p in parts[0].split(",")]
            self.url = "redis+cluster://%s" % ",".join(
                "127.0.0.1:%d" % p for p in self.ports[:2])

    def _line(self, limit: float) -> str:
        import select
        assert self.proc.stdout is not None
        r, _, _ = select.select([self.proc.stdout], [], [], limit)
        if not r:
            return "fail: no answer in %g s" % limit
        return self.proc.stdout.readline().strip() or "fail: driver ended"

    def cmd(self, line: str, limit: float = 90) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        ans = self._line(limit)
        assert ans.startswith("ok"), "topology %r: %s" % (line, ans)
        return ans[2:].strip()

    def master_port(self) -> int:
        return int(self.cmd("master"))

    def key_port(self, key: str) -> int:
        return int(self.cmd("key_port " + key))

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
                self.proc.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(5)


@pytest.fixture(scope="module")
def sentinel() -> Iterator[Topology]:
    """A master, 2 replicas and 3 sentinels (master name "dlock") for the
    module's tests, which run in order on it."""
    t = Topology("sentinel")
    yield t
    t.stop()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Topology]:
    """A 6-node Redis Cluster (3 masters, 3 replicas) for the module."""
    t = Topology("cluster")
    yield t
    t.stop()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "topology: needs a Sentinel deployment or a Redis "
        "Cluster (test_topology.py; about a minute)")
