#!/usr/bin/env python3
"""A small HTTP worker for supervise, using only Python's standard library.

It serves on the listening socket the supervisor passes as fd 3 (systemd's
socket-activation protocol: LISTEN_FDS, and LISTEN_PID must be our own pid);
without one it binds $PORT (default 8080) itself.

On SIGTERM it drains: it stops accepting, finishes requests in flight, answers
any further request on a kept-alive connection with `Connection: close` (so the
client reconnects to a sibling instead of hitting a closed socket), gives idle
connections a short window, and exits.
"""
import os
import signal
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

INSTANCE = os.environ.get("SUPERVISE_INSTANCE", "0")
GREETING = os.environ.get("GREETING", "hello")
DRAIN_WINDOW_SECONDS = 1.0
draining = threading.Event()
served = 0
served_lock = threading.Lock()


def inherited_listener():
    """The socket passed by the supervisor, if it was passed to *this* process."""
    if os.environ.get("LISTEN_PID") != str(os.getpid()):
        return None
    if int(os.environ.get("LISTEN_FDS", "0")) < 1:
        return None
    return socket.socket(fileno=3)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # An idle kept-alive connection is closed after this long; it bounds the drain.
    timeout = DRAIN_WINDOW_SECONDS

    def do_GET(self):
        global served
        with served_lock:
            served += 1
            count = served
        body = f"{GREETING} from instance {INSTANCE} (pid {os.getpid()}, request {count})\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        if draining.is_set():
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):
        pass


def main():
    listener = inherited_listener()
    if listener is None:
        port = int(os.environ.get("PORT", "8080"))
        server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    else:
        server = ThreadingHTTPServer(listener.getsockname(), Handler, bind_and_activate=False)
        server.socket.close()
        server.socket = listener
    server.daemon_threads = False  # server_close() waits for requests in flight

    def stop(signum, frame):
        draining.set()
        # shutdown() waits for serve_forever() to return: call it off this thread.
        threading.Thread(target=server.shutdown).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"instance {INSTANCE} serving on {server.socket.getsockname()}", flush=True)
    server.serve_forever(poll_interval=0.5)
    server.socket.close()
    server.server_close()
    print(f"instance {INSTANCE} drained after {served} requests", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
