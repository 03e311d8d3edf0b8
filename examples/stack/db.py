#!/usr/bin/env python3
"""A stand-in database: a key-value store over TCP, one line per command
(`GET key`, `SET key value`), on $DB_PORT of every interface ($HOST when set:
in a pod its readiness probe comes to the pod's IP, not to 127.0.0.1). It
takes half a second to start, as a real one takes a while, so the stack's
start order shows."""
import os
import signal
import socket
import socketserver
import sys
import time

PORT = int(os.environ.get("DB_PORT", "7400"))
HOST = os.environ.get("HOST", "0.0.0.0")
data = {}


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        for raw in self.rfile:
            words = raw.decode(errors="replace").split()
            if len(words) == 2 and words[0] == "GET":
                reply = data.get(words[1], "")
            elif len(words) == 3 and words[0] == "SET":
                data[words[1]] = words[2]
                reply = "OK"
            else:
                reply = "ERR"
            self.wfile.write((reply + "\n").encode())


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    time.sleep(0.5)
    with Server((HOST, PORT), Handler) as server:
        print(f"db: listening on {HOST}:{PORT}", flush=True)
        server.serve_forever()


if __name__ == "__main__":
    main()
