// The E2B SDK (e2b@2.51.0) against `cordon serve --api-listen --warm-pool base=N`, driven by
// bench/e2b/run.sh (which sets E2B_MODULE, E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY, POOL_DB =
// the manager's sandboxes.db, POOL_SIZE, ROUNDS, ROUNDS_N, CONC, RUNS, RUNSC_JSON).
//   create -> first output: Sandbox.create() then commands.run('echo hi') until it resolves;
//     the sandbox is killed afterwards (kill timed on its own, not in the figure);
//   agent only: commands.run('echo hi') against a sandbox that already exists;
//   concurrency 1: ROUNDS rounds one at a time; concurrency CONC: ROUNDS_N rounds of CONC at once.
// Before each round the warm pool is allowed to refill (the figure is a claim from a full pool,
// not a race with the refill). Then the table beside `runsc run` (RUNSC_JSON, from run.sh).
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

const { Sandbox } = await import(process.env.E2B_MODULE);
const env = (k, d) => Number(process.env[k] ?? d);
const ROUNDS = env('ROUNDS', 30), ROUNDS_N = env('ROUNDS_N', 3), CONC = env('CONC', 50);
const RUNS = env('RUNS', 20), POOL = env('POOL_SIZE', CONC);
const now = () => performance.now();

function pooled() {
  const r = spawnSync('sqlite3', [process.env.POOL_DB, "SELECT count(*) FROM sandboxes WHERE phase='pooled'"],
    { encoding: 'utf8' });
  return Number(r.stdout.trim() || 0);
}
async function waitPool(want, timeoutS = 600) {
  const t0 = now();
  while (pooled() < want) {
    if (now() - t0 > timeoutS * 1000) throw new Error(`warm pool: ${pooled()} of ${want} after ${timeoutS} s`);
    await new Promise((r) => setTimeout(r, 200));
  }
  return now() - t0;
}
const pct = (xs, p) => {
  if (!xs.length) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(s.length * p))];
};
const summary = (xs) => ({ n: xs.length, p50: pct(xs, 0.5), p99: pct(xs, 0.99) });

// One sandbox: create -> first output, then RUNS agent-only round trips (RUNS / CONC when many
// run at once, at least 3), then kill.
async function one(res, runs) {
  const t0 = now();
  const sbx = await Sandbox.create({ timeoutMs: 600000 });
  const t1 = now();
  const r = await sbx.commands.run('echo hi');
  const t2 = now();
  if (r.stdout !== 'hi\n') throw new Error(`echo hi gave ${JSON.stringify(r.stdout)}`);
  res.create.push(t1 - t0);
  res.first.push(t2 - t1);
  res.total.push(t2 - t0);
  for (let i = 0; i < runs; i++) {
    const a = now();
    await sbx.commands.run('echo hi');
    res.run.push(now() - a);
  }
  return sbx;
}
async function killAll(res, sbxs) {
  await Promise.all(sbxs.map(async (s) => {
    const a = now();
    if ((await s.kill()) !== true) throw new Error(`kill ${s.sandboxId}`);
    res.kill.push(now() - a);
  }));
}
const fresh = () => ({ create: [], first: [], total: [], run: [], kill: [], refill: [], failed: 0 });

// The first create of a cold process is not the figure: node's module and connection warm-up.
console.error(`warm pool: waiting for ${POOL} pooled sandboxes`);
const fillMs = await waitPool(POOL);
console.error(`warm pool full after ${(fillMs / 1000).toFixed(1)} s`);
await killAll(fresh(), [await one(fresh(), 3)]);

const c1 = fresh();
for (let i = 0; i < ROUNDS; i++) {
  c1.refill.push(await waitPool(POOL));
  await killAll(c1, [await one(c1, RUNS)]);
}
console.error(`concurrency 1: ${ROUNDS} rounds done`);
const cN = fresh();
for (let i = 0; i < ROUNDS_N; i++) {
  cN.refill.push(await waitPool(Math.min(POOL, CONC)));
  const got = await Promise.allSettled(Array.from({ length: CONC }, () => one(cN, Math.max(3, Math.ceil(RUNS / 5)))));
  const ok = got.filter((g) => g.status === 'fulfilled').map((g) => g.value);
  for (const g of got) if (g.status === 'rejected') { cN.failed++; console.error(`create failed: ${g.reason?.message}`); }
  await killAll(cN, ok);
  console.error(`concurrency ${CONC}: round ${i + 1} of ${ROUNDS_N} done (${ok.length} ok)`);
}

const runsc = JSON.parse(readFileSync(process.env.RUNSC_JSON, 'utf8'));
const out = {};
for (const [k, v] of Object.entries({ c1, cN })) {
  out[k] = Object.fromEntries(Object.entries(v).map(([m, xs]) => [m, Array.isArray(xs) ? summary(xs) : xs]));
}
console.log(`RESULT ${JSON.stringify({ out, runsc: { c1: summary(runsc.c1), cN: summary(runsc.cN), failed: runsc.failed } })}`);

// ---- the table ----
const f = (x) => (x == null ? 'n/a' : `${x.toFixed(1)} ms`);
const ratio = (a, b) => (a == null || b == null || !b ? 'n/a' : `${(a / b).toFixed(2)}x`);
const rs = { c1: summary(runsc.c1), cN: summary(runsc.cN) };
const rows = [];
for (const [k, label] of [['c1', 'concurrency 1'], ['cN', `concurrency ${CONC}`]]) {
  for (const p of ['p50', 'p99']) {
    const goal = k === 'cN' ? (p === 'p50' ? 80 : 250) : null;
    const v = out[k].total[p];
    rows.push([`${label} ${p}`, f(v), f(out[k].run[p]), f(rs[k][p]), ratio(v, rs[k][p]), ratio(out[k].run[p], rs[k][p]),
      goal ? `<= ${goal} ms` : '', goal ? (v != null && v <= goal ? 'yes' : 'NO') : '']);
  }
}
const head = ['', 'SDK create->output', 'SDK run only', 'runsc run', 'create/runsc', 'run/runsc', 'goal', 'met'];
const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
const line = (r) => `| ${r.map((c, i) => c.padEnd(w[i])).join(' | ')} |`;
console.log('\n' + line(head));
console.log(`|${w.map((n) => '-'.repeat(n + 2)).join('|')}|`);
for (const r of rows) console.log(line(r));
console.log('\nwhere create->output goes (p50 / p99, ms):');
for (const [k, label] of [['c1', 'concurrency 1'], ['cN', `concurrency ${CONC}`]]) {
  const s = out[k];
  console.log(`  ${label.padEnd(16)} Sandbox.create() ${f(s.create.p50)} / ${f(s.create.p99)};` +
    ` first commands.run ${f(s.first.p50)} / ${f(s.first.p99)}; kill() ${f(s.kill.p50)} / ${f(s.kill.p99)};` +
    ` pool refill wait ${f(s.refill.p50)}; n=${s.total.n}, failed ${s.failed}`);
}
console.log(`  runsc run failures: ${runsc.failed}`);
