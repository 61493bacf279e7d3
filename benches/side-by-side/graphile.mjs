// The graphile-worker contestant of benches/side_by_side.rs. The bench runs it with node, with
// SIDE_BY_SIDE_NODE_DIR at the directory where run.sh installed graphile-worker (outside the
// repository): ES modules ignore NODE_PATH, so both packages are required from there.
//
// Roles (the same protocol as the bench's own `ours-*` roles and the apalis peer's):
//   worker  <url> <concurrency> <default|batched> <throughput|latency>
//       connects, prints "ready", waits for a line on stdin, then runs until stdin closes;
//       prints "handled=N" (and, in latency mode, "latency_us=a,b,…": handler start minus the
//       enqueue time carried in the payload).
//   enqueue <url> <n>     migrates, then queues n no-op jobs in one addJobs call; prints
//                         "enqueue_s=…".
//   trickle <url> <n> <gap_ms>   queues n jobs one addJob call at a time, gap_ms apart, each
//                         carrying its enqueue time.
//
// "batched" is graphile-worker's documented batching: a local queue of 500 jobs fetched per
// round trip and completions batched (completeJobBatchDelay 0).
import { createInterface } from "node:readline";
import { performance } from "node:perf_hooks";
import { createRequire } from "node:module";

const require = createRequire(`${process.env.SIDE_BY_SIDE_NODE_DIR}/`);
const pg = require("pg");
const { Logger, makeWorkerUtils, run } = require("graphile-worker");

const nowUs = () => Math.round((performance.timeOrigin + performance.now()) * 1000);
const quiet = new Logger(() => (level, message) => {
  if (level === "error" || process.env.SIDE_BY_SIDE_DEBUG) console.error(level, message);
});
const [role, url, ...rest] = process.argv.slice(2);

async function worker(concurrency, variant, mode) {
  const pgPool = new pg.Pool({ connectionString: url, max: Math.max(10, concurrency + 4) });
  pgPool.on("error", (error) => console.error(error));
  pgPool.on("connect", (client) => client.on("error", (error) => console.error(error)));
  (await pgPool.connect()).release();
  const latencies = [];
  let handled = 0;
  const taskList = {
    noop: async (payload) => {
      if (mode === "latency") latencies.push(nowUs() - payload.t);
      handled += 1;
    },
  };
  const worker =
    variant === "batched"
      ? { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 }
      : {};
  const lines = createInterface({ input: process.stdin });
  const it = lines[Symbol.asyncIterator]();
  console.log("ready");
  await it.next(); // "go"
  const runner = await run({
    pgPool,
    concurrency,
    noHandleSignals: true,
    logger: quiet,
    taskList,
    preset: { worker },
  });
  // Runs until the bench closes stdin.
  for (;;) {
    const { done } = await it.next();
    if (done) break;
  }
  await runner.stop();
  await pgPool.end();
  console.log(`handled=${handled}`);
  if (mode === "latency") console.log(`latency_us=${latencies.join(",")}`);
}

async function enqueue(n) {
  const utils = await makeWorkerUtils({ connectionString: url, logger: quiet });
  await utils.migrate();
  const specs = [];
  for (let i = 0; i < n; i++) specs.push({ identifier: "noop", payload: { i } });
  const start = performance.now();
  await utils.addJobs(specs);
  const seconds = (performance.now() - start) / 1000;
  await utils.release();
  console.log(`enqueue_s=${seconds.toFixed(4)}`);
}

async function trickle(n, gapMs) {
  const utils = await makeWorkerUtils({ connectionString: url, logger: quiet });
  for (let i = 0; i < n; i++) {
    const next = performance.now() + gapMs;
    await utils.addJob("noop", { t: nowUs() });
    const wait = next - performance.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
  }
  await utils.release();
  console.log(`trickled=${n}`);
}

const main = {
  worker: () => worker(Number(rest[0]), rest[1] ?? "default", rest[2] ?? "throughput"),
  enqueue: () => enqueue(Number(rest[0])),
  trickle: () => trickle(Number(rest[0]), Number(rest[1])),
}[role];
if (!main) {
  console.error("usage: graphile.mjs worker|enqueue|trickle <url> …");
  process.exit(2);
}
await main();
