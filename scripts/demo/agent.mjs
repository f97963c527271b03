// Step 6 of scripts/demo.sh: an agent platform's code, written against the real E2B JS SDK
// (e2b@2.51.0, unmodified), pointed at `cordon serve --api-listen` instead of E2B's cloud. It
// creates a gVisor sandbox of the `base` template, runs code in it that calls out through the
// gateway, and checks every outcome; it exits 1 on the first one that does not happen.
// The platform side (issuing and revoking the sandbox's proxy token, reading the audit log) is
// the `cordon` CLI. Environment (set by demo.sh): E2B_MODULE (the SDK's dist/index.mjs),
// E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY, CORDON (the CLI; CORDON_HOME is the state),
// UPSTREAM_LOG (every request the fake upstream received, one JSON line each), IDS_FILE (the
// sandbox id goes there, for demo.sh's cleanup), and for the checks only, never given to the
// sandbox: DEMO_MODEL_KEY and DEMO_PAT, the real secrets in the vault.
import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { appendFileSync, readFileSync } from 'node:fs';

const { Sandbox, CommandExitError } = await import(process.env.E2B_MODULE);
const modelKey = process.env.DEMO_MODEL_KEY;
const pat = process.env.DEMO_PAT;

const bold = (s) => console.log(`\n\x1b[1m-- ${s}\x1b[0m`);
const say = (s) => console.log(`   ${s}`);
const ok = (s) => console.log(`   ok: ${s}`);
class DemoFailure extends Error {}
const fail = (s) => {
  throw new DemoFailure(s);
};
// What the fake upstream answers for a credential header: the same fingerprint it computes.
const fingerprint = (v) => `sha256:${createHash('sha256').update(v).digest('hex').slice(0, 16)}`;
const upstreamLines = () =>
  readFileSync(process.env.UPSTREAM_LOG, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
// The upstream logs a request just after answering it: give it a moment.
async function upstreamRequest(n) {
  for (let i = 0; i < 50; i++) {
    const lines = upstreamLines();
    if (lines.length > n) return lines[n];
    await new Promise((r) => setTimeout(r, 20));
  }
  return null;
}
function cordon(...args) {
  const r = spawnSync(process.env.CORDON, args, { encoding: 'utf8' });
  if (r.status !== 0) fail(`cordon ${args.join(' ')}: ${r.stderr.trim()}`);
  return r;
}

let sbx;
const seen = [];  // everything the sandbox printed: no secret may be in it
// Runs a shell command in the sandbox; a non-zero exit is an outcome, not an exception.
async function run(cmd, opts = {}) {
  try {
    const r = await sbx.commands.run(cmd, { timeoutMs: 30000, ...opts });
    seen.push(r.stdout, r.stderr);
    return r;
  } catch (e) {
    if (!(e instanceof CommandExitError)) throw e;
    seen.push(e.stdout, e.stderr);
    return e;
  }
}
// curl in the sandbox: no proxy settings, no secrets, the gateway's CA from the template.
// Returns {code, body, err}; code "000" = no HTTP answer (refused before any HTTP).
async function curl(args, envs) {
  console.log(`   sandbox$ curl ${args}`);
  const r = await run(`curl -sS --max-time 10 -w '\\n%{http_code}' ${args}`, { envs });
  const out = r.stdout.trimEnd().split('\n');
  const code = out.pop();
  const err = r.stderr.trim();
  console.log(`   -> ${code === '000' ? `no HTTP answer: ${err}` : `HTTP ${code}`}`);
  return { code, body: out.join('\n'), err };
}
const echoed = (body, header) => {
  try {
    return JSON.parse(body).headers?.[header];
  } catch {
    return undefined;
  }
};

async function main() {
  bold('6b. Sandbox.create() with the E2B SDK: E2B_API_URL is cordon serve, not e2b.app');
  const t0 = performance.now();
  sbx = await Sandbox.create({ timeoutMs: 300000, metadata: { purpose: 'cordon-demo' } });
  const id = sbx.sandboxId;
  appendFileSync(process.env.IDS_FILE, `${id}\n`);
  say(`Sandbox.create() -> ${id} in ${Math.round(performance.now() - t0)} ms ` +
      `(template base, gVisor, envd ${sbx.envdApi?.version}, profile of the API key: coding-agent)`);
  const hi = await run('echo "hello from $(uname -sr) as $(id -un) in $(hostname)"');
  say(`commands.run(...) -> ${hi.stdout.trim()}`);
  if (hi.exitCode !== 0) fail(`the first command failed: ${hi.stderr}`);
  const issued = cordon('token', 'issue', '--credential', 'github', '--sandbox', id, '--ttl', '15m',
    '--note', 'demo');
  const token = issued.stdout.trim();
  const tokenId = /issued token (\S+)/.exec(issued.stderr)?.[1];
  if (!token || !tokenId) fail(`token issue: ${issued.stderr}`);
  say(`the platform issued a proxy token for this sandbox only: ${token.slice(0, 10)}… (id ${tokenId});`);
  say('it goes into the sandbox as $GITHUB_TOKEN. The real secrets stay in the vault.');
  const envs = { GITHUB_TOKEN: token };

  bold('6c. Allowed: the model API, with no key in the sandbox; the gateway injects it');
  let n = upstreamLines().length;
  let r = await curl(`-X POST -H 'content-type: application/json' -d '{"model":"demo"}' ` +
    'https://api.anthropic.com/v1/messages');
  if (r.code !== '200') fail(`expected HTTP 200, got ${r.code} ${r.err}`);
  let up = await upstreamRequest(n);
  if (up?.headers?.['x-api-key'] !== modelKey) fail(`the upstream got x-api-key=${up?.headers?.['x-api-key']}`);
  say(`the fake upstream's echo, as the sandbox got it: x-api-key ${echoed(r.body, 'x-api-key')}`);
  if (echoed(r.body, 'x-api-key') !== fingerprint(modelKey)) fail('the echoed key is not the real one');
  ok(`the upstream received x-api-key=${modelKey.slice(0, 14)}… (its log) = that fingerprint;`);
  say('    the sandbox never had the key');

  bold('6d. Allowed with the proxy token: the gateway swaps it for the real GitHub PAT');
  n = upstreamLines().length;
  r = await curl('-H "Authorization: Bearer $GITHUB_TOKEN" https://api.github.com/repos/acme/app', envs);
  if (r.code !== '200') fail(`expected HTTP 200, got ${r.code} ${r.err}`);
  up = await upstreamRequest(n);
  if (up?.headers?.authorization !== `Bearer ${pat}`) fail(`the upstream got Authorization=${up?.headers?.authorization}`);
  if (upstreamLines().some((l) => JSON.stringify(l).includes(token))) fail('the proxy token reached the upstream');
  ok(`the upstream received Authorization: Bearer ${pat.slice(0, 12)}…; the token never left the gateway`);
  n = upstreamLines().length;
  r = await curl('-X DELETE -H "Authorization: Bearer $GITHUB_TOKEN" https://api.github.com/repos/acme/app', envs);
  if (r.code !== '403') fail(`DELETE: expected HTTP 403, got ${r.code}`);
  r = await curl('https://api.github.com/repos/acme/app');
  if (r.code !== '403') fail(`without the token: expected HTTP 403, got ${r.code}`);
  if (upstreamLines().length !== n) fail('a refused request reached the upstream');
  ok('a DELETE (read-only rules) and a call without the token (token: required) are refused: HTTP 403');

  bold('6e. Denied: a host in no destination of the profile');
  n = upstreamLines().length;
  r = await curl('https://pastebin.com/api/api_post.php');
  if (r.code !== '000' || !/resolve/i.test(r.err)) fail(`expected no DNS answer, got ${r.code} ${r.err}`);
  r = await curl(`--resolve pastebin.com:443:198.51.100.10 https://pastebin.com/api/api_post.php`);
  if (r.code !== '000') fail(`a hard-coded address: expected a refused handshake, got HTTP ${r.code}`);
  r = await run('curl -sk --max-time 3 https://198.51.100.10:8443/ ; printf quic >/dev/udp/198.51.100.10/443; echo');
  if (upstreamLines().length !== n) fail('a denied request reached the upstream');
  ok('no DNS answer for it; at a hard-coded address the TLS handshake is refused (SNI not allowed);');
  say('    port 8443 and UDP 443 are dropped at the sandbox\'s interface (demo.sh checks the leak counter)');

  bold(`6f. Revoked: cordon token revoke ${tokenId}, then the same GitHub call`);
  cordon('token', 'revoke', tokenId);
  n = upstreamLines().length;
  r = await curl('-H "Authorization: Bearer $GITHUB_TOKEN" https://api.github.com/repos/acme/app', envs);
  if (r.code !== '403') fail(`a revoked token: expected HTTP 403, got ${r.code}`);
  if (upstreamLines().length !== n) fail('a request with a revoked token reached the upstream');
  ok('HTTP 403 at once: the running gateway checks the vault on every request');

  bold('6g. Did a secret ever reach the sandbox?');
  // (The check runs here on the host: a command that named the secrets would hand them in.)
  await run('env; tr "\\0" "\\n" </proc/1/environ', { user: 'root' });
  if (seen.some((s) => s && (s.includes(modelKey) || s.includes(pat)))) fail('a real secret is in what the sandbox saw');
  ok(`neither secret is in the sandbox's environment or in anything it received (${seen.length / 2} commands)`);

  bold(`6h. The audit log of this sandbox: cordon audit query --sandbox ${id}`);
  const q = cordon('audit', 'query', '--sandbox', id);
  console.log(q.stdout.replace(/^/gm, '   ').trimEnd());
  if (!/api\.anthropic\.com/.test(q.stdout) || !/pastebin\.com/.test(q.stdout)) fail('the audit lines are missing');
  if (q.stdout.includes(modelKey) || q.stdout.includes(pat) || q.stdout.includes(token)) fail('a secret is in the audit log');

  bold('6i. sbx.kill()');
  const killed = await sbx.kill();
  const listed = (await Sandbox.list().nextItems()).some((x) => x.sandboxId === id);
  if (killed !== true || listed) fail(`kill() returned ${killed}; still listed: ${listed}`);
  ok('killed; Sandbox.list() no longer has it');
}

try {
  await main();
} catch (e) {
  console.log(`   FAILED: ${e instanceof DemoFailure ? e.message : `${e?.name}: ${e?.message}`}`);
  process.exit(1);
}
