// The E2B JS SDK (e2b@2.51.0) against `cordon serve --api-listen`, driven by e2b_e2e.sh, which
// sets E2B_API_URL = E2B_SANDBOX_URL = the API address, E2B_API_KEY, E2B_MODULE (the SDK's
// dist/index.mjs), SECRET (the credential the gateway injects), UPSTREAM_LOG (the fake
// upstream's request log) and IDS_FILE (every sandbox id made here, one a line, for the
// script's audit check and cleanup). Prints one PASS/FAIL line per check.
import { appendFileSync, readFileSync } from 'node:fs';

const e2b = await import(process.env.E2B_MODULE);
const { Sandbox, CommandExitError, AuthenticationError } = e2b;
const secret = process.env.SECRET;
let failed = 0;

function result(ok, name, detail) {
  if (!ok) failed++;
  console.log(`${ok ? 'PASS' : 'FAIL'}: ${name}${!ok && detail ? ` (${detail})` : ''}`);
  return ok;
}
// Runs one check; an exception fails it with its message.
async function check(name, fn) {
  try {
    const r = await fn();
    const ok = r === true || (r && r.ok === true);
    return result(ok, name, ok ? '' : (r && r.detail) || JSON.stringify(r));
  } catch (e) {
    return result(false, name, `${e?.name}: ${e?.message}`);
  }
}
const fail = (detail) => ({ ok: false, detail });
const remember = (id) => appendFileSync(process.env.IDS_FILE, `${id}\n`);

// ---- create ----
const marker = `e2e-${process.pid}`;
let sbx;
await check('Sandbox.create(): 20-char id and a semver envdVersion', async () => {
  sbx = await Sandbox.create({ timeoutMs: 120000, metadata: { suite: marker } });
  remember(sbx.sandboxId);
  const v = sbx.envdApi?.version;
  if (!/^[a-z0-9]{20}$/.test(sbx.sandboxId)) return fail(`id ${sbx.sandboxId}`);
  if (!/^\d+\.\d+\.\d+/.test(v ?? '')) return fail(`envdVersion ${v}`);
  return true;
});
if (!sbx) {
  console.log('(no sandbox: the remaining checks need one)');
  process.exit(1);
}
const id = sbx.sandboxId;

// ---- commands ----
await check('commands.run("echo hello"): stdout and exit code 0', async () => {
  const r = await sbx.commands.run('echo hello');
  return r.exitCode === 0 && r.stdout === 'hello\n' ? true : fail(JSON.stringify(r));
});
await check('commands.run(... exit 3) throws CommandExitError with exitCode 3 and stderr', async () => {
  try {
    await sbx.commands.run('echo out; echo err 1>&2; exit 3');
    return fail('no error');
  } catch (e) {
    if (!(e instanceof CommandExitError)) return fail(`${e?.name}: ${e?.message}`);
    return e.exitCode === 3 && e.stdout === 'out\n' && e.stderr === 'err\n' ? true : fail(JSON.stringify(e));
  }
});

// ---- files ----
// As root, then as the SDK's default user ('user'): the agent acts as each for file access.
const root = { user: 'root' };
await check('files.write then files.read gives the content back (user root)', async () => {
  await sbx.files.write('/tmp/e2e/a.txt', 'hello from the sdk\n', root);
  const got = await sbx.files.read('/tmp/e2e/a.txt', root);
  return got === 'hello from the sdk\n' ? true : fail(JSON.stringify(got));
});
await check('files.list shows the written file (user root)', async () => {
  const entries = await sbx.files.list('/tmp/e2e', root);
  const e = entries.find((x) => x.name === 'a.txt');
  return e && e.type === 'file' && e.path === '/tmp/e2e/a.txt' ? true : fail(JSON.stringify(entries));
});
await check('files.write/read/list as the default user: the file is theirs', async () => {
  await sbx.files.write('/home/user/u.txt', 'mine');
  const got = await sbx.files.read('/home/user/u.txt');
  const entries = await sbx.files.list('/home/user');
  const e = entries.find((x) => x.name === 'u.txt');
  return got === 'mine' && e && e.owner === 'user' ? true : fail(`${JSON.stringify(got)} ${JSON.stringify(e)}`);
});

// ---- list, getInfo, setTimeout ----
await check('Sandbox.list().nextItems() contains the sandbox', async () => {
  const items = await Sandbox.list().nextItems();
  const it = items.find((x) => x.sandboxId === id);
  return it && it.state === 'running' && it.metadata?.suite === marker ? true : fail(JSON.stringify(items));
});
await check('Sandbox.list({query: {metadata}}) filters by metadata', async () => {
  const hit = await Sandbox.list({ query: { metadata: { suite: marker } } }).nextItems();
  const miss = await Sandbox.list({ query: { metadata: { suite: `${marker}-other` } } }).nextItems();
  return hit.length === 1 && hit[0].sandboxId === id && miss.length === 0
    ? true : fail(`hit ${JSON.stringify(hit)} miss ${JSON.stringify(miss)}`);
});
let endBefore;
await check('getInfo: id, state running, metadata, endAt, envdVersion', async () => {
  const info = await sbx.getInfo();
  endBefore = info.endAt;
  return info.sandboxId === id && info.state === 'running' && info.metadata?.suite === marker &&
    info.endAt instanceof Date && /^\d+\.\d+\.\d+/.test(info.envdVersion ?? '')
    ? true : fail(JSON.stringify(info));
});
await check('setTimeout(600 s) moves endAt', async () => {
  await sbx.setTimeout(600000);
  const info = await sbx.getInfo();
  const ahead = (info.endAt - Date.now()) / 1000;
  return ahead > 500 && ahead <= 601 && info.endAt > endBefore ? true : fail(`endAt ${info.endAt.toISOString()}`);
});

// ---- egress through the gateway ----
const curl = (url) =>
  sbx.commands.run(`curl -sS -w '\\n%{http_code}' --max-time 10 ${url}`, { timeoutMs: 30000 })
    .then((r) => r.stdout, (e) => (e instanceof CommandExitError ? `${e.stdout}\n${e.stderr}` : Promise.reject(e)));
await check('a command curls https://api.allowed.test: 200, the upstream got the injected credential', async () => {
  const out = await curl('https://api.allowed.test/e2b-hello');
  if (!/\n200$/.test(out.trim())) return fail(out);
  const log = readFileSync(process.env.UPSTREAM_LOG, 'utf8');
  const line = log.split('\n').find((l) => l.includes('/e2b-hello'));
  if (!line || !line.includes(`Bearer ${secret}`)) return fail(`upstream log: ${line}`);
  return out.includes(secret) ? fail('the response the sandbox saw holds the secret') : true;
});
await check('  ... the secret is nowhere in the sandbox (env, /proc/1/environ, files)', async () => {
  const r = await sbx.commands.run(
    `{ env; cat /proc/1/environ; grep -rls '${secret}' /etc /root /tmp /home /var /usr/local; } 2>/dev/null; true`,
    { user: 'root' });
  return r.stdout.includes(secret) ? fail('found') : true;
});
await check('a command curls https://api.denied.test: refused, nothing reached the upstream', async () => {
  const out = await curl('https://api.denied.test/e2b-denied');
  const code = out.split('\n').find((l) => /^\d{3}$/.test(l));
  const log = readFileSync(process.env.UPSTREAM_LOG, 'utf8');
  if (log.includes('/e2b-denied')) return fail('the upstream got the request');
  return code === '000' ? true : fail(out);
});
// ---- PUT network: a tightening ends what is open ----
// A response from the allowed host that streams for 60 s (the fake upstream's /slow), in the
// background; then the sandbox's network is narrowed to refuse that host.
await check('PUT network tightening cuts an open connection', async () => {
  // The ticks are watched on the command's own stdout (a stat of the file that curl is writing
  // fails with EINVAL inside this runsc's overlay, so a file is no witness here).
  const slow = await sbx.commands.run(
    'curl -sS -N --max-time 90 "https://api.allowed.test/slow?seconds=60"',
    { background: true, timeoutMs: 120000 });
  let flowing = false;  // until bytes arrive (a line every 250 ms)
  for (let i = 0; i < 75 && !flowing; i++) {
    await new Promise((r) => setTimeout(r, 200));
    flowing = slow.stdout.includes('tick');
  }
  if (!flowing) {
    await slow.kill();
    return fail(`the slow response never started (curl: ${JSON.stringify(slow.stderr)})`);
  }
  const t0 = Date.now();
  await sbx.updateNetwork({ denyOut: ['api.allowed.test'] });
  let exitCode;
  try {
    exitCode = (await slow.wait()).exitCode;
  } catch (e) {
    if (!(e instanceof CommandExitError)) throw e;
    exitCode = e.exitCode;
  }
  const took = Date.now() - t0;
  if (exitCode === 0) return fail(`curl finished normally, ${took} ms after the update`);
  // Well before the 60 s the response would have taken.
  return took < 10000 ? true : fail(`curl (exit ${exitCode}) ended ${took} ms after the update`);
});
await check('  ... the narrowed host is refused to new requests, and allowed again once widened', async () => {
  const denied = await curl('https://api.allowed.test/e2b-after-narrowing');
  const code = denied.split('\n').find((l) => /^\d{3}$/.test(l));
  if (code !== '000') return fail(`after narrowing: ${denied}`);
  const log = readFileSync(process.env.UPSTREAM_LOG, 'utf8');
  if (log.includes('/e2b-after-narrowing')) return fail('the upstream got the request');
  await sbx.updateNetwork({});  // back to the profile as it is
  const again = await curl('https://api.allowed.test/e2b-after-widening');
  return /\n200$/.test(again.trim()) ? true : fail(`after widening: ${again}`);
});

// ---- pause and resume ----
await check('betaPause() then Sandbox.connect(id) resumes it; the file written before is there', async () => {
  // Written and read back by commands: this check is about pause, not the files API.
  await sbx.commands.run('mkdir -p /tmp/e2e-pause && printf "still here" > /tmp/e2e-pause/before-pause.txt');
  const paused = await sbx.betaPause();
  if (paused !== true) return fail(`betaPause returned ${paused}`);
  const info = await Sandbox.getInfo(id);
  if (info.state !== 'paused') return fail(`state after pause: ${info.state}`);
  const again = await Sandbox.connect(id);
  const got = (await again.commands.run('cat /tmp/e2e-pause/before-pause.txt')).stdout;
  const r = await again.commands.run('echo resumed');
  const after = await Sandbox.getInfo(id);
  return got === 'still here' && r.stdout === 'resumed\n' && after.state === 'running'
    ? true : fail(`read ${JSON.stringify(got)} run ${JSON.stringify(r)} state ${after.state}`);
});

// ---- a field cordon does not carry out is refused, never ignored ----
await check('Sandbox.create({network: {egressProxy}}) is refused by name and makes no sandbox', async () => {
  const before = (await Sandbox.list().nextItems()).length;
  try {
    const s = await Sandbox.create({ network: { egressProxy: { address: 'proxy.example:1080' } } });
    remember(s.sandboxId);
    return fail(`created ${s.sandboxId}`);
  } catch (e) {
    const after = (await Sandbox.list().nextItems()).length;
    return /egressProxy/.test(e?.message ?? '') && after === before
      ? true : fail(`${e?.name}: ${e?.message}; listed ${before} -> ${after}`);
  }
});
await check('betaPause({keepMemory: false}) is refused by name; the sandbox keeps running', async () => {
  try {
    await sbx.betaPause({ keepMemory: false });
    return fail('paused');
  } catch (e) {
    const info = await Sandbox.getInfo(id);
    return /memory/.test(e?.message ?? '') && info.state === 'running'
      ? true : fail(`${e?.name}: ${e?.message}; state ${info.state}`);
  }
});

// ---- auth ----
await check('a wrong API key: AuthenticationError', async () => {
  try {
    await Sandbox.list({ apiKey: 'e2b_wrong_key_0000000000000000' }).nextItems();
    return fail('no error');
  } catch (e) {
    return e instanceof AuthenticationError ? true : fail(`${e?.name}: ${e?.message}`);
  }
});

// ---- kill ----
await check('sbx.kill() → true, then Sandbox.kill(id) again → false', async () => {
  const first = await sbx.kill();
  const second = await Sandbox.kill(id);
  return first === true && second === false ? true : fail(`first ${first} second ${second}`);
});
await check('  ... and it is no longer listed', async () => {
  const items = await Sandbox.list().nextItems();
  return items.some((x) => x.sandboxId === id) ? fail(JSON.stringify(items)) : true;
});

process.exit(failed ? 1 : 0);
