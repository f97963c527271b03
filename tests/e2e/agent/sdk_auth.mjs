// POST /init, the access token, /envs, /metrics, /health (e2b-compat.md §3, §7), against the
// second agent (its token stays set).
import { assert, assertEq, rejects } from './helpers.mjs';

export async function run({ e2b, check, env, authAgentUrl, sandboxAt }) {
  const { AuthenticationError } = e2b;
  const init = (body, token) =>
    fetch(`${authAgentUrl}/init`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(token ? { 'x-access-token': token } : {}) },
      body: JSON.stringify(body),
    });

  await check('init: sets env vars, token and CA bundle (204)', async () => {
    const r = await init({
      envVars: { INIT_VAR: 'from-init' },
      accessToken: 'secret-token',
      caBundle: '-----BEGIN CERTIFICATE-----\nTEST\n-----END CERTIFICATE-----\n',
      timestamp: new Date().toISOString(),
    });
    assertEq(r.status, 204, 'status');
  });

  await check('token: missing or wrong token -> AuthenticationError', async () => {
    await rejects(sandboxAt(authAgentUrl).commands.run('true'), AuthenticationError, 'no token');
    await rejects(sandboxAt(authAgentUrl, 'wrong').commands.run('true'), AuthenticationError, 'wrong token');
    const r = await fetch(`${authAgentUrl}/envs`);
    assertEq(r.status, 401, 'raw /envs without token');
    const body = await r.json();
    assertEq(body, {
      code: 401,
      message: 'unauthorized access, please provide a valid access token or method signing if supported',
    }, '401 body');
  });

  await check('token: the right token works; init env and CA bundle apply', async () => {
    const r = await sandboxAt(authAgentUrl, 'secret-token').commands.run(
      'echo "$INIT_VAR|$SSL_CERT_FILE|$CURL_CA_BUNDLE"; cat "$SSL_CERT_FILE"');
    const lines = r.stdout.split('\n');
    assertEq(lines[0], `from-init|${env.EXTRA_CA_FILE}|${env.EXTRA_CA_FILE}`, 'env');
    assert(r.stdout.includes('# system bundle') && r.stdout.includes('TEST'), `bundle: ${r.stdout}`);
  });

  await check('health: no token needed; isRunning', async () => {
    assertEq((await fetch(`${authAgentUrl}/health`)).status, 204, 'status');
    assertEq(await sandboxAt(authAgentUrl).isRunning(), true, 'isRunning');
  });

  await check('init: once a token is set, /init needs it', async () => {
    assertEq((await init({ accessToken: 'mine' })).status, 401, 'without token');
    assertEq((await init({ envVars: { MORE: '1' } }, 'secret-token')).status, 204, 'with token');
  });

  await check('envs and metrics', async () => {
    const h = { 'x-access-token': 'secret-token' };
    const envs = await (await fetch(`${authAgentUrl}/envs`, { headers: h })).json();
    assertEq(envs, { INIT_VAR: 'from-init', MORE: '1' }, '/envs');
    const m = await (await fetch(`${authAgentUrl}/metrics`, { headers: h })).json();
    for (const k of ['ts', 'cpu_count', 'cpu_used_pct', 'mem_total', 'mem_used', 'disk_used', 'disk_total']) {
      assert(typeof m[k] === 'number', `metrics.${k} is a number: ${JSON.stringify(m)}`);
    }
    assert(m.mem_total > m.mem_used && m.cpu_count >= 1, 'plausible metrics');
  });

  await check('unknown path: 404 JSON', async () => {
    const r = await fetch(`${authAgentUrl}/nope`, { headers: { 'x-access-token': 'secret-token' } });
    assertEq(r.status, 404, 'status');
    assertEq((await r.json()).code, 404, 'body code');
  });
}
