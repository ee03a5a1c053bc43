#!/usr/bin/env node
// redlock_peer.js - node-redlock (5.0.0-beta.2, over ioredis) measured like
// dlock_bench, one JSON line on stdout. Run by bench/run after `npm ci` in
// bench/peers (package-lock.json pins the versions).
//
//   node redlock_peer.js w1 -s URL [-s URL...] [-n CYCLES]
//       One client: redlock.acquire([key], 10000) + lock.release(), CYCLES
//       times, each cycle timed (warm-up cycles untimed); cycles/s =
//       1 / mean cycle. With several -s, one Redlock over one ioredis
//       client per server (a quorum of them).
//   node redlock_peer.js w2 -s URL [-s URL...] [-p PROCS] [-t SECONDS]
//       PROCS child processes (child_process.fork) on one key, each
//       looping: acquire, GET counter, SET counter+1 (own ioredis
//       connection to the first server), release, until the deadline.
//       Lost updates = acquisitions - final counter.
//
// Waiting: Redlock retries a taken lock retryCount times, retryDelay ms
// apart (+- retryJitter ms): defaults 200 +- 100 ms here as in the library,
// with retryCount 50 so an acquire waits about 10 s like the other clients
// (the library's default gives up after 10 retries); --retry-delay,
// --retry-jitter, --retry-count change them. Redis CPU (INFO cpu) and Redis
// commands (INFO commandstats, script internals counted, INFO excluded) are
// deltas over every server around the timed part, as in dlock_bench.
// Exit status: 0 when the run completed, 1 when it could not run, 3 when
// updates were lost.
"use strict";

const path = require("path");
const { fork } = require("child_process");
const Redis = require("ioredis");
const Redlock = require("redlock").default;

const LEASE_MS = 10000;

function parseArgs(argv) {
  const a = {
    mode: argv[0],
    servers: [],
    cycles: 10000,
    procs: 8,
    seconds: 5,
    retryDelay: 200,
    retryJitter: 100,
    retryCount: 50,
  };
  for (let i = 1; i < argv.length; i++) {
    const k = argv[i];
    const v = argv[++i];
    if (v === undefined) usage();
    if (k === "-s") a.servers.push(v);
    else if (k === "-n") a.cycles = parseInt(v, 10);
    else if (k === "-p") a.procs = parseInt(v, 10);
    else if (k === "-t") a.seconds = parseFloat(v);
    else if (k === "--retry-delay") a.retryDelay = parseInt(v, 10);
    else if (k === "--retry-jitter") a.retryJitter = parseInt(v, 10);
    else if (k === "--retry-count") a.retryCount = parseInt(v, 10);
    else usage();
  }
  if (!["w1", "w2", "worker"].includes(a.mode) || a.servers.length === 0)
    usage();
  return a;
}

function usage() {
  process.stderr.write(
    "usage: redlock_peer.js w1|w2 -s URL [-s URL...] [-n cycles] " +
      "[-p procs] [-t seconds] [--retry-delay MS] [--retry-jitter MS] " +
      "[--retry-count N]\n",
  );
  process.exit(1);
}

function client(url) {
  return new Redis(url, { lazyConnect: false, maxRetriesPerRequest: 1 });
}

function makeRedlock(a, clients) {
  return new Redlock(clients, {
    driftFactor: 0.01,
    retryCount: a.retryCount,
    retryDelay: a.retryDelay,
    retryJitter: a.retryJitter,
  });
}

const nowNs = () => process.hrtime.bigint(); // CLOCK_MONOTONIC

// Summed over the servers: [CPU µs, commands], INFO calls excluded.
async function redisStats(servers) {
  let cpu = 0;
  let calls = 0;
  for (const url of servers) {
    const c = client(url);
    const info = await c.info("cpu");
    const cs = await c.info("commandstats");
    await c.quit();
    for (const f of ["used_cpu_sys", "used_cpu_user"]) {
      const m = info.match(new RegExp("^" + f + ":([0-9.]+)", "m"));
      if (m) cpu += parseFloat(m[1]) * 1e6;
    }
    for (const m of cs.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm))
      if (m[1] !== "info") calls += parseInt(m[2], 10);
  }
  return [cpu, calls];
}

const pct = (v, q) =>
  v.length ? v[Math.min(v.length - 1, Math.floor(q * v.length))] : 0;
const r1 = (x, d = 1) => Math.round(x * 10 ** d) / 10 ** d;

async function runW1(a) {
  const clients = a.servers.map(client);
  const redlock = makeRedlock(a, clients);
  redlock.on("error", () => {}); // failed attempts are counted below
  const key = "bench:node:w1:" + process.pid;
  let errors = 0;
  const cycle = async () => {
    let lock;
    try {
      lock = await redlock.acquire([key], LEASE_MS);
    } catch (e) {
      errors++;
      return;
    }
    await lock.release();
  };
  const warm = Math.floor(a.cycles / 20) + 10;
  for (let i = 0; i < warm; i++) await cycle();
  const lat = [];
  const [cpu0, calls0] = await redisStats(a.servers);
  for (let i = 0; i < a.cycles; i++) {
    const t0 = nowNs();
    await cycle();
    lat.push(Number(nowNs() - t0));
  }
  const [cpu1, calls1] = await redisStats(a.servers);
  await Promise.all(clients.map((c) => c.quit()));
  const total = lat.reduce((s, x) => s + x, 0);
  const n = lat.length;
  lat.sort((x, y) => x - y);
  console.log(
    JSON.stringify({
      mode: "w1",
      peer: "node-redlock",
      strategy: "node-redlock",
      nodes: a.servers.length,
      floor: false,
      paired: false,
      cycles: n,
      cycles_per_s: r1((n * 1e9) / total),
      p50_us: r1(pct(lat, 0.5) / 1e3),
      p99_us: r1(pct(lat, 0.99) / 1e3),
      mean_us: r1(total / n / 1e3),
      redis_cpu_us_per_cycle: r1((cpu1 - cpu0) / n),
      redis_commands_per_cycle: r1((calls1 - calls0) / n, 2),
      retry: [a.retryCount, a.retryDelay, a.retryJitter],
      errors,
    }),
  );
  return 0;
}

// A W2 worker (a forked child): connect, say ready, wait for "go" with
// the deadline, loop, report.
async function runWorker(a) {
  const clients = a.servers.map(client);
  const redlock = makeRedlock(a, clients);
  redlock.on("error", () => {});
  const rc = client(a.servers[0]);
  await Promise.all(clients.concat([rc]).map((c) => c.ping()));
  const { key, counter } = JSON.parse(process.env.PEER_KEYS);
  const go = new Promise((resolve) => process.once("message", resolve));
  process.send({ ready: true });
  const { endNs } = await go;
  const end = BigInt(endNs);
  let acq = 0;
  let errors = 0;
  while (nowNs() < end) {
    let lock;
    try {
      lock = await redlock.acquire([key], LEASE_MS);
    } catch (e) {
      errors++;
      continue;
    }
    const v = await rc.get(counter);
    await rc.set(counter, parseInt(v || "0", 10) + 1);
    try {
      await lock.release();
    } catch (e) {
      errors++;
    }
    acq++;
  }
  const finishNs = nowNs().toString();
  await Promise.all(clients.concat([rc]).map((c) => c.quit()));
  process.send({ acq, errors, finishNs }, () => process.exit(0));
}

async function runW2(a) {
  const key = "bench:node:w2:" + process.pid;
  const counter = "bench:node:counter:" + process.pid;
  const rc = client(a.servers[0]);
  await rc.del(counter, key);
  const env = { ...process.env, PEER_KEYS: JSON.stringify({ key, counter }) };
  const args = ["worker"];
  for (const s of a.servers) args.push("-s", s);
  args.push("--retry-delay", String(a.retryDelay));
  args.push("--retry-jitter", String(a.retryJitter));
  args.push("--retry-count", String(a.retryCount));
  const kids = [];
  const ready = [];
  const done = [];
  for (let i = 0; i < a.procs; i++) {
    const k = fork(__filename, args, { env, stdio: ["ignore", "ignore", "inherit", "ipc"] });
    kids.push(k);
    let report;
    ready.push(
      new Promise((resolve, reject) => {
        k.once("message", resolve);
        k.once("exit", () => reject(new Error("worker died")));
      }),
    );
    done.push(
      new Promise((resolve) => {
        k.on("message", (m) => {
          if (m.finishNs) report = m;
        });
        k.once("exit", () => resolve(report));
      }),
    );
  }
  await Promise.all(ready);
  const [cpu0, calls0] = await redisStats(a.servers);
  const t0 = nowNs();
  const endNs = (t0 + BigInt(Math.round(a.seconds * 1e9))).toString();
  for (const k of kids) k.send({ endNs });
  const per = (await Promise.all(done)).filter((r) => r);
  const [cpu1, calls1] = await redisStats(a.servers);
  const final = parseInt((await rc.get(counter)) || "0", 10);
  await rc.del(counter);
  await rc.quit();
  const acqs = per.map((r) => r.acq);
  const acq = acqs.reduce((s, x) => s + x, 0);
  const errors = per.reduce((s, r) => s + r.errors, 0);
  let t1 = t0;
  for (const r of per) if (BigInt(r.finishNs) > t1) t1 = BigInt(r.finishNs);
  const secs = Number(t1 - t0) / 1e9 || a.seconds;
  const d = acq || 1;
  const mx = Math.max(0, ...acqs);
  console.log(
    JSON.stringify({
      mode: "w2",
      peer: "node-redlock",
      strategy: "node-redlock",
      nodes: a.servers.length,
      floor: false,
      procs: a.procs,
      seconds: r1(secs, 3),
      acquisitions: acq,
      acq_per_s: r1(acq / secs),
      redis_cpu_us_per_acq: r1((cpu1 - cpu0) / d, 2),
      redis_commands_per_acq: r1((calls1 - calls0) / d, 2),
      fairness_min_over_max: mx ? r1(Math.min(...acqs) / mx, 3) : 0,
      workers_reported: per.length,
      lost_updates: acq - final,
      errors,
      hung: a.procs - per.length,
      retry: [a.retryCount, a.retryDelay, a.retryJitter],
    }),
  );
  return acq !== final ? 3 : 0;
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  if (a.mode === "worker") return runWorker(a);
  return a.mode === "w1" ? runW1(a) : runW2(a);
}

main().then(
  (rc) => {
    if (rc !== undefined) process.exit(rc);
  },
  (e) => {
    process.stderr.write("redlock_peer: " + (e && e.stack ? e.stack : e) + "\n");
    process.exit(1);
  },
);
