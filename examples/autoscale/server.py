#!/usr/bin/env python3
"""A CPU-heavy HTTP server that serves one request at a time: the kind of
server `autoscale` is for.

Each request costs WORK_MS (default 20) of CPU, then SLEEP_MS (default 0)
of waiting, as for a database; the server takes the next
connection only when it has answered the last, so under load connections
wait in the listening socket's accept queue, which supervise reads. It
serves on the socket supervise passes as fd 3 (LISTEN_FDS, LISTEN_PID), or
binds $PORT (default 8080) on every interface ($HOST when set) when
started alone. It answers
`pid N` and closes the connection; SIGTERM ends it at once (Python's
default), which is all a server with no request in flight needs.
"""
import os
import signal
import socket
import time

WORK_SECONDS = int(os.environ.get("WORK_MS", "20")) / 1000.0
SLEEP_SECONDS = int(os.environ.get("SLEEP_MS", "0")) / 1000.0
REQUEST_LIMIT = 64 * 1024
ACCEPT_TIMEOUT_SECONDS = 0.2
stopping = False


def stop(_signal, _frame):
    global stopping
    stopping = True


def listener():
    if os.environ.get("LISTEN_PID") == str(os.getpid()) and int(os.environ.get("LISTEN_FDS", "0")) >= 1:
        return socket.socket(fileno=3)
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((os.environ.get("HOST", ""), int(os.environ.get("PORT", "8080"))))
    server.listen(128)
    return server


def burn(seconds):
    """Spend `seconds` of CPU (not of wall time: a busy machine takes longer)."""
    until = time.process_time() + seconds
    total = 0
    while time.process_time() < until:
        total += sum(range(1000))
    return total


def serve(connection):
    request = b""
    while b"\r\n\r\n" not in request and len(request) < REQUEST_LIMIT:
        chunk = connection.recv(4096)
        if not chunk:
            return
        request += chunk
    burn(WORK_SECONDS)
    if SLEEP_SECONDS:
        time.sleep(SLEEP_SECONDS)
    body = f"pid {os.getpid()}\n".encode()
    connection.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


def main():
    signal.signal(signal.SIGTERM, stop)
    server = listener()
    server.settimeout(ACCEPT_TIMEOUT_SECONDS)
    while not stopping:
        try:
            connection, _ = server.accept()
        except (socket.timeout, InterruptedError):
            continue
        connection.settimeout(None)
        with connection:
            try:
                serve(connection)
            except OSError:
                pass


if __name__ == "__main__":
    main()
