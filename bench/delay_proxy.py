#!/usr/bin/env python3
"""delay_proxy.py -- a TCP proxy that models a slow link (issue 22: netem is not
available on these machines, so latency between ring groups comes from here).

    delay_proxy.py --listen PORT --to HOST:PORT [--delay-ms D] [--rate BYTES_PER_S]
                   [--max-buffer BYTES] [--ready-file F]

Every connection to 127.0.0.1:PORT is forwarded to HOST:PORT. Each direction is a
link of its own: a chunk read at time t is serialised behind the chunks read before
it on that direction (of every connection: one shared bottleneck per direction) at
--rate bytes/s (0: no cap), then delivered --delay-ms after it left the bottleneck,
in order. So a request/reply crossing the proxy costs 2 x D of round trip plus its
bytes / rate each way.

What it models: a fixed one-way propagation delay and a bandwidth cap per direction
(FIFO, like a token bucket with no burst). What it does NOT model: loss,
retransmission, jitter, reordering, a queue that drops (the buffer is bounded by
--max-buffer per connection and direction: the reader stops reading, TCP's own flow
control pushes back), or the sender's congestion window.

Signals: SIGTERM/SIGINT stop it (exit 0, after printing its byte counts);
SIGUSR1 lifts the cap (rate unlimited from now on), SIGUSR2 restores --rate.
Prints "delay_proxy: listening on P -> HOST:PORT" once ready (and writes P to
--ready-file if given) and, at exit, "delay_proxy: bytes up U down D connections C"
(up: client -> target)."""

import argparse
import asyncio
import os
import signal
import sys
import time


class Link:
    """One direction: a FIFO bottleneck of 'rate' bytes/s followed by 'delay' seconds."""

    def __init__(self, delay, rate):
        self.delay, self.rate, self.base_rate = delay, rate, rate
        self.free_at = 0.0  # when the bottleneck has sent everything queued on it
        self.bytes = 0

    def schedule(self, n, now):
        """Delivery time of n bytes read at 'now'."""
        self.bytes += n
        if self.rate > 0:
            start = max(now, self.free_at)
            self.free_at = start + n / self.rate
            return self.free_at + self.delay
        return now + self.delay


async def pump(reader, writer, link, max_buffer):
    """Reads from 'reader', delivers to 'writer' through 'link', in order."""
    q = asyncio.Queue()
    queued = [0]
    dead = [False]  # the receiving side failed: stop reading too
    room = asyncio.Event()
    room.set()

    async def deliver():
        loop = asyncio.get_running_loop()
        try:
            while True:
                at, data = await q.get()
                wait = at - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if data is None:
                    break
                writer.write(data)
                await writer.drain()
                queued[0] -= len(data)
                if queued[0] <= max_buffer:
                    room.set()
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError):
            dead[0] = True
            room.set()

    task = asyncio.ensure_future(deliver())
    loop = asyncio.get_running_loop()
    try:
        while True:
            await room.wait()
            if dead[0]:
                break
            data = await reader.read(65536)
            if not data:
                break
            q.put_nowait((link.schedule(len(data), loop.time()), data))
            queued[0] += len(data)
            if queued[0] > max_buffer:
                room.clear()
    except (ConnectionError, OSError):
        pass
    q.put_nowait((loop.time() + link.delay, None))
    try:
        await task
    except (ConnectionError, OSError):
        pass


async def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen", type=int, required=True, help="port on 127.0.0.1 (0: any)")
    ap.add_argument("--to", required=True, help="HOST:PORT to forward to")
    ap.add_argument("--delay-ms", type=float, default=0.0, help="one-way delay per direction")
    ap.add_argument("--rate", type=float, default=0.0, help="bytes/s per direction (0: no cap)")
    ap.add_argument("--max-buffer", type=int, default=4 << 20,
                    help="bytes held per connection and direction before reading stops")
    ap.add_argument("--ready-file", help="write the listening port here once ready")
    a = ap.parse_args()
    if a.delay_ms < 0 or a.rate < 0 or a.max_buffer < 1:
        ap.error("--delay-ms and --rate must be >= 0, --max-buffer >= 1")
    host, _, port = a.to.rpartition(":")
    if not host or not port.isdigit():
        ap.error("--to must be HOST:PORT")
    up, down = Link(a.delay_ms / 1e3, a.rate), Link(a.delay_ms / 1e3, a.rate)
    conns = [0]
    tasks = set()

    async def handle(creader, cwriter):
        conns[0] += 1
        try:
            sreader, swriter = await asyncio.open_connection(host, int(port))
        except OSError:
            cwriter.close()
            return
        t = asyncio.gather(pump(creader, swriter, up, a.max_buffer),
                           pump(sreader, cwriter, down, a.max_buffer))
        tasks.add(t)
        try:
            await t
        finally:
            tasks.discard(t)
            for w in (cwriter, swriter):
                w.close()

    server = await asyncio.start_server(handle, "127.0.0.1", a.listen)
    lport = server.sockets[0].getsockname()[1]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)

    def set_rate(r):
        up.rate = down.rate = r
        now = loop.time()
        up.free_at = min(up.free_at, now)  # chunks already scheduled keep their times
        down.free_at = min(down.free_at, now)
        print("delay_proxy: rate %s" % ("unlimited" if r == 0 else "%g bytes/s" % r), flush=True)

    loop.add_signal_handler(signal.SIGUSR1, set_rate, 0.0)
    loop.add_signal_handler(signal.SIGUSR2, lambda: set_rate(up.base_rate))
    print("delay_proxy: listening on %d -> %s (delay %g ms each way, rate %s)" %
          (lport, a.to, a.delay_ms, "%g bytes/s" % a.rate if a.rate else "unlimited"),
          flush=True)
    if a.ready_file:
        tmp = a.ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % lport)
        os.replace(tmp, a.ready_file)
    t0 = time.monotonic()
    await stop.wait()
    server.close()
    for t in list(tasks):
        t.cancel()
    print("delay_proxy: bytes up %d down %d connections %d in %.1f s" %
          (up.bytes, down.bytes, conns[0], time.monotonic() - t0), flush=True)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    sys.exit(0)
