// The comparison's npm peer (scripts/compare.sh): redis-semaphore's Mutex and Semaphore
// over ioredis, with the library's default settings or a 1 ms retry, run through the
// loops of `dlock bench` (crates/dlock-cli/src/cmd/bench/measure.rs): seq, the hand-off
// (4 workers, hold 1 ms, work 1 ms) and the semaphore hand-off (16 workers, 4 permits).
// Workers are async tasks of one event loop sharing one client. Prints one JSON line per
// loop.
//
// Usage: NODE_PATH=DIR/node_modules node peers.mjs --url URL --duration SECS --peer NAME
// (NAME: redis-semaphore, redis-semaphore-1ms)
import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';

// The packages live in the temp dir the script installed them into (NODE_PATH), which
// an ES module's `import` does not consult; `require` does.
const require = createRequire(import.meta.url);
const Redis = require('ioredis');
const { Mutex, Semaphore } = require('redis-semaphore');

const TTL_MS = 10_000; // the lease, as in `dlock bench` (and redis-semaphore's default)
const HOLD_MS = 1;
const WORK_MS = 1;

function arg(flag) {
  const i = process.argv.indexOf(flag);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

const SCRIPT_CALLS = new Set(['eval', 'evalsha', 'eval_ro', 'evalsha_ro', 'fcall', 'fcall_ro']);

// Every command the server ran (script-internal ones included), INFO left out, and of
// them the script calls.
async function totalCalls(client) {
  const info = await client.info('commandstats');
  let calls = 0;
  let scripts = 0;
  for (const line of info.split('\n')) {
    const m = line.match(/^cmdstat_([^:]+):calls=(\d+)/);
    if (m && m[1] !== 'info') calls += Number(m[2]);
    if (m && SCRIPT_CALLS.has(m[1])) scripts += Number(m[2]);
  }
  return [calls, scripts];
}

function handoffSummary(holds, workers, permits, started, seconds) {
  const wall = (performance.now() - started) / 1000;
  holds.sort((a, b) => a[0] - b[0]);
  const perWorker = new Array(workers).fill(0);
  let held = 0;
  for (const [acquired, released, worker] of holds) {
    perWorker[worker] += 1;
    held += Math.max(0, released - acquired) / 1000;
  }
  const row = {
    acquisitions: holds.length,
    acquisitions_per_s: holds.length / seconds,
    busy_fraction: held / (wall * permits),
    per_worker: perWorker,
    workers,
    permits,
  };
  if (permits === 1) {
    const gaps = [];
    for (let i = 1; i < holds.length; i++) {
      if (holds[i - 1][2] !== holds[i][2]) gaps.push(Math.max(0, holds[i][0] - holds[i - 1][1]));
    }
    gaps.sort((a, b) => a - b);
    const pct = (p) => (gaps.length ? gaps[Math.floor((gaps.length - 1) * p)] : 0);
    row.gap_p50_ms = pct(0.5);
    row.gap_p99_ms = pct(0.99);
  }
  return row;
}

async function seq(client, name, options, seconds) {
  const deadline = performance.now() + seconds * 1000;
  let cycles = 0;
  while (performance.now() < deadline) {
    const mutex = new Mutex(client, name, options);
    if (!(await mutex.tryAcquire())) throw new Error(`${name} not taken`);
    await mutex.release();
    cycles += 1;
  }
  return { acquisitions: cycles, cycles_per_s: cycles / seconds };
}

async function handoff(client, name, options, workers, permits, seconds) {
  const holds = [];
  const started = performance.now();
  const deadline = started + seconds * 1000;
  async function worker(index) {
    while (performance.now() < deadline) {
      const lock =
        permits > 1 ? new Semaphore(client, name, permits, options) : new Mutex(client, name, options);
      await lock.acquire();
      const acquired = performance.now();
      await sleep(HOLD_MS);
      const released = performance.now();
      await lock.release();
      holds.push([acquired, released, index]);
      await sleep(WORK_MS);
    }
  }
  await Promise.all(Array.from({ length: workers }, (_, i) => worker(i)));
  return handoffSummary(holds, workers, permits, started, seconds);
}

const PEERS = {
  'redis-semaphore': ['redis-semaphore', { lockTimeout: TTL_MS }],
  'redis-semaphore-1ms': ['redis-semaphore, retryInterval 1ms', { lockTimeout: TTL_MS, retryInterval: 1 }],
};

async function main() {
  const url = arg('--url');
  const seconds = Number(arg('--duration') ?? 5);
  const peer = PEERS[arg('--peer')];
  if (!url || !peer) {
    console.error(`usage: node peers.mjs --url URL --duration SECS --peer ${Object.keys(PEERS).join('|')}`);
    process.exit(2);
  }
  const [label, options] = peer;
  const client = new Redis(url);
  const stats = new Redis(url);
  const prefix = `compare:${arg('--peer')}:${process.pid}:`;
  for (const loop of ['seq', 'handoff', 'semaphore']) {
    const before = await totalCalls(stats);
    let row;
    if (loop === 'seq') row = await seq(client, prefix + loop, options, seconds);
    else if (loop === 'handoff') row = await handoff(client, prefix + loop, options, 4, 1, seconds);
    else row = await handoff(client, prefix + loop, options, 16, 4, seconds);
    const after = await totalCalls(stats);
    const taken = Math.max(1, row.acquisitions);
    row.commands_per_acquisition = (after[0] - before[0]) / taken;
    row.scripts_per_acquisition = (after[1] - before[1]) / taken;
    console.log(JSON.stringify({ ...row, impl: label, loop }));
  }
  client.disconnect();
  stats.disconnect();
}

main().catch((err) => {
  console.error(String(err?.stack ?? err));
  process.exit(1);
});
