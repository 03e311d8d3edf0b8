#!/usr/bin/env python3
"""A small HTTP worker for supervise, using only Python's standard library.

It serves on the listening socket the supervisor passes as fd 3 (systemd's
socket-activation protocol: LISTEN_FDS, and LISTEN_PID must be our own pid);
without one (in a container, say) it binds $PORT (default 8080) itself, on
every interface ($HOST when set): in a pod the Service and the kubelet's
probes reach it on the pod's IP, not on 127.0.0.1.

On SIGTERM it drains, so a rolling reload loses no request:
1. it stops accepting (its siblings share the socket and take new connections);
2. requests in flight finish;
3. a further request on a kept-alive connection is answered with
   `Connection: close`, so the client reconnects — to a sibling — instead of
   writing into a closed socket;
4. connections still idle after DRAIN_WINDOW are closed;
5. it exits once every connection is done.

It never blocks in accept(): every instance waits on the one shared socket, so
one connection wakes them all and only one gets it. A blocking accept() would
leave the others stuck in the kernel, deaf to their own SIGTERM (Python
retries an interrupted accept() after running the handler) until the next
connection or SIGKILL. So the listener is non-blocking (see main()).
"""
import os
import signal
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

INSTANCE = os.environ.get("SUPERVISE_INSTANCE", "0")
GREETING = os.environ.get("GREETING", "hello")
KEEPALIVE_SECONDS = 5.0
DRAIN_WINDOW_SECONDS = 1.0
draining = threading.Event()
connections = set()
connections_lock = threading.Lock()
served = 0


def inherited_listener():
    """The socket passed by the supervisor, if it was passed to *this* process."""
    if os.environ.get("LISTEN_PID") != str(os.getpid()):
        return None
    if int(os.environ.get("LISTEN_FDS", "0")) < 1:
        return None
    return socket.socket(fileno=3)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = KEEPALIVE_SECONDS  # an idle kept-alive connection closes after this
    busy = False

    def setup(self):
        super().setup()
        try:
            # Headers and body are separate writes: without this, Nagle's
            # algorithm and delayed ACKs add ~40 ms to every kept-alive request.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass  # a Unix socket
        with connections_lock:
            connections.add(self)

    def finish(self):
        with connections_lock:
            connections.discard(self)
        super().finish()

    def do_GET(self):
        global served
        self.busy = True
        with connections_lock:
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
        self.busy = False

    def log_message(self, format, *args):
        pass


def close_idle_connections():
    """After the drain window: close what is still open and not mid-request."""
    with connections_lock:
        idle = [c for c in connections if not c.busy]
    for connection in idle:
        try:
            connection.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def main():
    listener = inherited_listener()
    if listener is None:
        port = int(os.environ.get("PORT", "8080"))
        server = ThreadingHTTPServer((os.environ.get("HOST", "0.0.0.0"), port), Handler)
    else:
        server = ThreadingHTTPServer(listener.getsockname(), Handler, bind_and_activate=False)
        server.socket.close()
        server.socket = listener
    server.daemon_threads = False  # server_close() waits for every connection
    # serve_forever() waits in select() and then calls accept(), assuming a
    # readable socket means a connection is there for us. On a shared socket it
    # is not: a sibling may have taken it in between. Non-blocking, that
    # accept() fails with EAGAIN (an OSError, which socketserver ignores) and we
    # go back to select(), where shutdown() can reach us.
    #
    # O_NONBLOCK is a flag of the open file description, which every instance
    # shares (and supervise keeps across reloads), so this sets it for all of
    # them. That is fine: they are all this program, and supervise never
    # accepts on it. A program sharing a socket cannot count on it being
    # blocking anyway: Node (libuv), Go, asyncio and gunicorn all make an
    # inherited listener non-blocking the same way.
    server.socket.setblocking(False)

    def stop(signum, frame):
        draining.set()
        # shutdown() waits for serve_forever() to return: call it off this thread.
        threading.Thread(target=server.shutdown).start()
        threading.Timer(DRAIN_WINDOW_SECONDS, close_idle_connections).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"instance {INSTANCE} serving on {server.socket.getsockname()}", flush=True)
    server.serve_forever(poll_interval=0.05)
    server.socket.close()  # our copy of the listener: siblings keep accepting
    server.server_close()
    print(f"instance {INSTANCE} drained after {served} requests", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
