#!/usr/bin/env python3
"""The migration: brings the database's schema to version 2, then exits 0.
supervise starts it once db is ready, and starts api and worker once it has
completed; edit this app in the file and it runs again."""
import os
import socket

PORT = int(os.environ.get("DB_PORT", "7400"))

with socket.create_connection(("127.0.0.1", PORT), timeout=5) as db:
    db.sendall(b"SET schema_version 2\n")
    if db.makefile().readline().strip() != "OK":
        raise SystemExit("migrate: the database refused the migration")
print("migrate: schema version 2", flush=True)
