#!/usr/bin/env python3
"""A worker whose accept loop is greedy: asyncio accepts many connections per
wake-up, so with a shared accept queue one process of a pair can take most of
them. Serves HTTP/1.1 keep-alive on the socket passed as fd 3, with ~2 ms of
CPU work per request, and prints how many it served when stopped."""
import asyncio
import os
import signal
import socket

served = 0


def work():
    return sum(i * i for i in range(20000))


async def handle(reader, writer):
    global served
    try:
        while True:
            request = await reader.readuntil(b"\r\n\r\n")
            if not request:
                break
            served += 1
            body = f"{work()} from {os.getpid()}\n".encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main():
    listener = socket.socket(fileno=3)
    server = await asyncio.start_server(handle, sock=listener)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    server.close()
    print(f"drained after {served} requests", flush=True)


asyncio.run(main())
