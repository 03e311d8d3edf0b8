#!/usr/bin/env python3
"""The API: answers GET / with the schema version it reads from db.

It serves on the listening socket supervise passes as fd 3 (LISTEN_FDS, and
LISTEN_PID is our pid), shared with its sibling; without one (in a container)
it binds $PORT on every interface ($HOST when set), where a Service and the
kubelet's probes reach it. The socket is non-blocking
and waited on with a timeout, so a worker never sits in accept() deaf to its
SIGTERM; on SIGTERM it finishes the request in hand and exits."""
import os
import selectors
import signal
import socket
from http.server import BaseHTTPRequestHandler, HTTPServer

INSTANCE = os.environ.get("SUPERVISE_INSTANCE", "0")
DB_PORT = int(os.environ.get("DB_PORT", "7400"))
stopping = False


def schema_version():
    try:
        with socket.create_connection(("127.0.0.1", DB_PORT), timeout=2) as db:
            db.sendall(b"GET schema_version\n")
            return db.makefile().readline().strip() or "none"
    except OSError as error:
        return f"unknown (db: {error.strerror})"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # one request per connection: nothing kept open

    def do_GET(self):
        body = f"api {INSTANCE}: schema version {schema_version()}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_):
        pass


def main():
    global stopping
    if os.environ.get("LISTEN_PID") == str(os.getpid()):
        listener = socket.socket(fileno=3)
    else:
        address = (os.environ.get("HOST", "0.0.0.0"), int(os.environ.get("PORT", "8080")))
        listener = socket.create_server(address)
    listener.setblocking(False)
    server = HTTPServer(listener.getsockname()[:2], Handler, bind_and_activate=False)

    def stop(*_):
        global stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    while not stopping:
        if not selector.select(timeout=0.2):
            continue
        try:
            connection, address = listener.accept()
        except (BlockingIOError, InterruptedError):
            continue  # a sibling took it
        connection.setblocking(True)
        server.process_request(connection, address)


if __name__ == "__main__":
    main()
