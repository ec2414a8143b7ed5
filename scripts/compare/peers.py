"""The comparison's Python peers (scripts/compare.sh), each run through the loops of
`dlock bench` (crates/dlock-cli/src/cmd/bench/measure.rs): seq (one worker, one key, take
and give back), the hand-off (4 workers, hold 1 ms, work 1 ms) and the semaphore hand-off
(16 workers, 4 permits; none of these peers has a semaphore, so it says so). Prints one
JSON line per loop.

Usage: python3 peers.py --url URL --duration SECS --peer NAME
(NAME: redis-py, redis-py-1ms, python-redis-lock, pottery, redis-fifo-lock)
"""

import argparse
import asyncio
import json
import os
import sys
import threading
import time

import redis

TTL_S = 10  # the lease, as in `dlock bench`
HOLD_S = WORK_S = 0.001


SCRIPT_CALLS = {f"cmdstat_{c}" for c in ("eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro")}


def total_calls(client):
    """Every command the server ran (script-internal ones included), INFO left out, and
    of them the script calls."""
    stats = client.info("commandstats")
    every = sum(v["calls"] for k, v in stats.items() if k != "cmdstat_info")
    return every, sum(v["calls"] for k, v in stats.items() if k in SCRIPT_CALLS)


def handoff_summary(holds, workers, permits, started, duration):
    """measure.rs's `handoff` figures from (acquired, released, worker) holds."""
    wall = time.perf_counter() - started
    holds.sort(key=lambda h: h[0])
    per_worker = [0] * workers
    for h in holds:
        per_worker[h[2]] += 1
    held = sum(max(0.0, r - a) for a, r, _ in holds)
    row = {
        "acquisitions": len(holds),
        "acquisitions_per_s": len(holds) / duration,
        "busy_fraction": held / (wall * permits),
        "per_worker": per_worker,
        "workers": workers,
        "permits": permits,
    }
    if permits == 1:
        gaps = sorted(
            max(0.0, b[0] - a[1]) * 1000.0
            for a, b in zip(holds, holds[1:])
            if a[2] != b[2]
        )
        pct = lambda p: gaps[int((len(gaps) - 1) * p)] if gaps else 0.0
        row["gap_p50_ms"] = pct(0.5)
        row["gap_p99_ms"] = pct(0.99)
    return row


class ThreadedPeer:
    """A blocking library: `take(name, wait)` returns a release function; the hand-off's
    workers are threads (the library's own concurrency model)."""

    def seq(self, name, duration):
        deadline = time.perf_counter() + duration
        cycles = 0
        while time.perf_counter() < deadline:
            self.take(name, wait=False)()
            cycles += 1
        return {"acquisitions": cycles, "cycles_per_s": cycles / duration}

    def handoff(self, name, workers, permits, duration):
        holds, errors = [], []
        started = time.perf_counter()
        deadline = started + duration

        def worker(index):
            try:
                while time.perf_counter() < deadline:
                    release = self.take(name, wait=True)
                    acquired = time.perf_counter()
                    time.sleep(HOLD_S)
                    released = time.perf_counter()
                    release()
                    holds.append((acquired, released, index))
                    time.sleep(WORK_S)
            except Exception as err:  # reported once the loop ends
                errors.append(err)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return handoff_summary(holds, workers, permits, started, duration)


class RedisPy(ThreadedPeer):
    """redis-py's `Lock` (`Redis.lock`): a blocking acquire polls every `sleep` seconds
    (0.1 by default)."""

    def __init__(self, client, sleep=None):
        self.client, self.sleep = client, sleep

    def take(self, name, wait):
        options = {"timeout": TTL_S}
        if self.sleep is not None:
            options["sleep"] = self.sleep
        lock = self.client.lock(name, **options)
        if not lock.acquire(blocking=wait):
            raise RuntimeError(f"{name} not taken")
        return lock.release


class PythonRedisLock(ThreadedPeer):
    """python-redis-lock: a waiter blocks on BLPOP of a signal list the release pushes."""

    def __init__(self, client):
        import redis_lock

        self.client, self.module = client, redis_lock

    def take(self, name, wait):
        lock = self.module.Lock(self.client, name, expire=TTL_S)
        if not lock.acquire(blocking=wait):
            raise RuntimeError(f"{name} not taken")
        return lock.release


class Pottery(ThreadedPeer):
    """pottery's `Redlock` on the one server (a quorum of one); a blocking acquire retries
    after a random 0-200 ms."""

    def __init__(self, client):
        from pottery import Redlock

        self.client, self.redlock = client, Redlock

    def take(self, name, wait):
        lock = self.redlock(key=name, masters={self.client}, auto_release_time=TTL_S)
        if not lock.acquire(blocking=wait):
            raise RuntimeError(f"{name} not taken")
        return lock.release


class FifoPeer:
    """redis-fifo-lock (asyncio): a strict-FIFO queue with fencing; waiters are tasks of
    one event loop sharing one client, with the library's default settings."""

    def __init__(self, url):
        self.url = url

    async def _seq(self, name, duration):
        import redis.asyncio
        from redis_fifo_lock import FifoLock

        client = redis.asyncio.Redis.from_url(self.url)
        lock = FifoLock(client, name)
        deadline = time.perf_counter() + duration
        cycles = 0
        while time.perf_counter() < deadline:
            await lock.release(await lock.acquire())
            cycles += 1
        await client.aclose()
        return {"acquisitions": cycles, "cycles_per_s": cycles / duration}

    async def _handoff(self, name, workers, permits, duration):
        import redis.asyncio
        from redis_fifo_lock import FifoLock

        client = redis.asyncio.Redis.from_url(self.url)
        lock = FifoLock(client, name)
        holds = []
        started = time.perf_counter()
        deadline = started + duration

        async def worker(index):
            while time.perf_counter() < deadline:
                lease = await lock.acquire()
                acquired = time.perf_counter()
                await asyncio.sleep(HOLD_S)
                released = time.perf_counter()
                await lock.release(lease)
                holds.append((acquired, released, index))
                await asyncio.sleep(WORK_S)

        await asyncio.gather(*(worker(i) for i in range(workers)))
        await client.aclose()
        return handoff_summary(holds, workers, permits, started, duration)

    def seq(self, name, duration):
        return asyncio.run(self._seq(name, duration))

    def handoff(self, name, workers, permits, duration):
        return asyncio.run(self._handoff(name, workers, permits, duration))


PEERS = {
    "redis-py": lambda url, c: ("redis-py Lock", RedisPy(c)),
    "redis-py-1ms": lambda url, c: ("redis-py Lock, sleep=1ms", RedisPy(c, sleep=0.001)),
    "python-redis-lock": lambda url, c: ("python-redis-lock", PythonRedisLock(c)),
    "pottery": lambda url, c: ("pottery Redlock", Pottery(c)),
    "redis-fifo-lock": lambda url, c: ("redis-fifo-lock", FifoPeer(url)),
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--peer", required=True, choices=sorted(PEERS))
    args = parser.parse_args()
    client = redis.Redis.from_url(args.url)
    label, peer = PEERS[args.peer](args.url, client)
    prefix = f"compare:{args.peer}:{os.getpid()}:"
    for loop in ("seq", "handoff", "semaphore"):
        before = total_calls(client)
        if loop == "seq":
            row = peer.seq(prefix + loop, args.duration)
        elif loop == "handoff":
            row = peer.handoff(prefix + loop, 4, 1, args.duration)
        else:
            row = {"unsupported": "the library has no semaphore"}
        after = total_calls(client)
        if "acquisitions" in row:
            taken = max(1, row["acquisitions"])
            row["commands_per_acquisition"] = (after[0] - before[0]) / taken
            row["scripts_per_acquisition"] = (after[1] - before[1]) / taken
        row["impl"], row["loop"] = label, loop
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
