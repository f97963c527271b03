#!/usr/bin/env python3
"""Opens N TLS connections to ADDR:443 (SNI = HOST), spread over several source addresses,
makes one keep-alive GET on each (so that each is a fully set-up intercepted connection: TLS
terminated, request checked and forwarded), then holds them all open and idle until killed.

Prints "open N failed F in S s" on stdout once every connection is set up (or has failed), so
that a driver can measure the gateway's memory with N idle connections (S: how long opening
took). Used by peers.sh.

While the others are still being opened (slow on a busy machine), a connection unused for
--refresh seconds gets one more GET, so that the gateway's idle timeout (cordon: 60 s) does not
close it before the count is complete; a connection the gateway closed anyway counts as failed.
When "open" is printed no request is in flight: every held connection is idle.

usage: idle_conns.py --addr IP --host NAME --ca PEM --count N --sources IP1,IP2,...
                     [--path /1k] [--parallel 200] [--refresh 30]
"""
import argparse
import asyncio
import resource
import signal
import ssl
import sys
import time


async def get(args, reader, writer):
    """One keep-alive GET on an open connection; raises unless it answers 200 with its body."""
    writer.write(f"GET {args.path} HTTP/1.1\r\nHost: {args.host}\r\n\r\n".encode())
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(head.split(b"\r\n", 1)[0].decode(errors="replace"))
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    await asyncio.wait_for(reader.readexactly(length), timeout=30)


class Opening:
    """How many connections have settled (set up or failed); done once all have."""
    def __init__(self, count):
        self.count, self.settled, self.done = count, 0, asyncio.Event()

    def settle(self):
        self.settled += 1
        if self.settled == self.count:
            self.done.set()


async def hold_one(args, ctx, src, held, sem, failures, opening):
    conn = None
    async with sem:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(args.addr, 443, ssl=ctx, server_hostname=args.host,
                                        local_addr=(src, 0)),
                timeout=30)
            await get(args, reader, writer)
            conn = (reader, writer)
        except Exception as e:  # counted and reported; the driver decides what a failure means
            failures.append(repr(e))
    opening.settle()
    if conn is None:
        return
    # Until every connection has settled: one more GET whenever this one was unused for
    # args.refresh seconds (a request in flight when opening ends is finished first).
    while args.refresh > 0 and not opening.done.is_set():
        try:
            await asyncio.wait_for(opening.done.wait(), timeout=args.refresh)
        except asyncio.TimeoutError:
            try:
                await get(args, *conn)
            except Exception as e:
                failures.append("refresh: " + repr(e))
                conn[1].transport.abort()
                return
    held.append(conn[1])


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--addr", required=True)
    p.add_argument("--host", required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--count", type=int, default=10000)
    p.add_argument("--sources", required=True)
    p.add_argument("--path", default="/1k")
    p.add_argument("--parallel", type=int, default=200)
    p.add_argument("--refresh", type=float, default=30, help="seconds; 0: never")
    args = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < args.count + 100:
        print(f"open 0 failed {args.count} (RLIMIT_NOFILE {hard} too small)", flush=True)
        return 1
    ctx = ssl.create_default_context(cafile=args.ca)
    ctx.set_alpn_protocols(["http/1.1"])
    sources = args.sources.split(",")
    held, failures = [], []
    sem = asyncio.Semaphore(args.parallel)
    start = time.monotonic()
    opening = Opening(args.count)
    await asyncio.gather(*(hold_one(args, ctx, sources[i % len(sources)], held, sem, failures,
                                    opening)
                           for i in range(args.count)))
    print(f"open {len(held)} failed {len(failures)} in {time.monotonic() - start:.1f} s",
          flush=True)
    for f in sorted(set(failures))[:5]:
        print(f"  e.g. {f}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()
    for w in held:
        w.transport.abort()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
