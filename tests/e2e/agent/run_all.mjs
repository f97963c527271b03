// Runs every sdk_*.mjs beside this file (optionally only those whose name contains
// $SDK_PATTERN). Each exports `async function run(ctx)`, where ctx = { e2b, check, env, ... }
// (see makeContext). Prints one line per check and "N passed, N failed"; exit 1 on a failure.
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { sleep } from './helpers.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const e2b = await import(pathToFileURL(process.env.E2B_MODULE).href);

let passed = 0;
let failed = 0;

async function check(name, fn, timeoutMs = 30000) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    await Promise.race([fn(), timeout]);
    passed++;
    console.log(`PASS ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
  } finally {
    clearTimeout(timer);
  }
}

const agentUrl = 'http://127.0.0.1:49983';
// Wait for both agents.
for (const url of [agentUrl, process.env.AUTH_AGENT_URL]) {
  let ok = false;
  for (let i = 0; i < 100 && !ok; i++) {
    try {
      const r = await fetch(`${url}/health`);
      ok = r.status === 204;
    } catch {
      await sleep(50);
    }
  }
  if (!ok) {
    console.log(`FAIL agent at ${url} did not come up`);
    console.log('0 passed, 1 failed');
    process.exit(1);
  }
}

const ctx = {
  e2b,
  check,
  env: process.env,
  agentUrl,
  authAgentUrl: process.env.AUTH_AGENT_URL,
  // A Sandbox bound to another agent URL, optionally with an envd access token (debug mode
  // never gets one from a control plane, so the constructor is given it directly).
  sandboxAt: (url, envdAccessToken) =>
    new e2b.Sandbox({
      sandboxId: 'debug_sandbox_id',
      envdVersion: '0.6.13',
      envdAccessToken,
      sandboxUrl: url,
      apiKey: 'x',
      debug: true,
    }),
};

const files = readdirSync(here)
  .filter((f) => /^sdk_.*\.mjs$/.test(f))
  .filter((f) => !process.env.SDK_PATTERN || f.includes(process.env.SDK_PATTERN))
  .sort();
for (const f of files) {
  console.log(`# ${f}`);
  const mod = await import(pathToFileURL(join(here, f)).href);
  try {
    await mod.run(ctx);
  } catch (e) {
    failed++;
    console.log(`FAIL ${f} aborted: ${e && e.stack ? e.stack : e}`);
  }
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 && passed > 0 ? 0 : 1);
