#!/usr/bin/env python3
"""client.py - raw HTTP/1.1 client for tests/cli/gateway/gateway.sh.

  client.py burst ADDR[,ADDR...] N KEY [KEY...]
      N concurrent requests for every KEY (each on its own connection,
      the connections spread over the ADDRs), all sent at once; prints one
      line per response: KEY STATUS BODY (BODY with no newline).
  client.py raw ADDR TEXT
      send TEXT (Python escapes: \\r \\n \\x00 ...) on one connection and
      print every response's status line, one a line, then "closed" when
      the server closed the connection (within 10 s).
"""
import socket
import sys
import threading


def connect(addr):
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=30)
    return s


def read_response(s, buf):
    """One response from socket s; buf holds bytes already read.
    Returns (status, body, rest) or (None, None, buf) on close."""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            return None, None, buf
        buf += d
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    cl = 0
    for h in lines[1:]:
        name, _, value = h.partition(":")
        if name.strip().lower() == "content-length":
            cl = int(value.strip())
    while len(rest) < cl:
        d = s.recv(65536)
        if not d:
            return None, None, buf
        rest += d
    return status, rest[:cl], rest[cl:]


def burst(addrs, n, keys):
    addrs = addrs.split(",")
    out = []
    lock = threading.Lock()
    gate = threading.Barrier(n * len(keys))
    socks = []
    for i in range(n * len(keys)):
        socks.append(connect(addrs[i % len(addrs)]))

    def one(i, key):
        s = socks[i]
        req = ("POST /pay HTTP/1.1\r\nHost: t\r\nIdempotency-Key: %s\r\n"
               "Content-Length: 2\r\n\r\n{}" % key).encode()
        gate.wait()
        s.sendall(req)
        status, body, _ = read_response(s, b"")
        with lock:
            out.append("%s %s %s" % (key, status,
                                     (body or b"").decode().strip()))
        s.close()

    ts = []
    i = 0
    for key in keys:
        for _ in range(n):
            t = threading.Thread(target=one, args=(i, key))
            t.start()
            ts.append(t)
            i += 1
    for t in ts:
        t.join()
    print("\n".join(out))


def raw(addr, text):
    data = text.encode("latin-1").decode("unicode_escape").encode("latin-1")
    s = connect(addr)
    s.settimeout(10)
    s.sendall(data)
    buf = b""
    try:
        while True:
            status, body, buf = read_response(s, buf)
            if status is None:
                print("closed")
                return
            print(status)
    except socket.timeout:
        print("open")


if __name__ == "__main__":
    if sys.argv[1] == "burst":
        burst(sys.argv[2], int(sys.argv[3]), sys.argv[4:])
    elif sys.argv[1] == "raw":
        raw(sys.argv[2], sys.argv[3])
    else:
        sys.exit(2)
