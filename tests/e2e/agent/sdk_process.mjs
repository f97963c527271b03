// process.Process through the real SDK: commands.* and pty.* (e2b-compat.md §5).
import { assert, assertEq, rejects, sleep } from './helpers.mjs';

// A shell test that prints "gone" once PID no longer runs (a zombie waiting for the host's
// init to reap it counts as gone: it was killed).
const goneScript = (pid) =>
  `for i in $(seq 60); do kill -0 ${pid} 2>/dev/null || { echo gone; exit; }; ` +
  `[ "$(cut -d' ' -f3 /proc/${pid}/stat 2>/dev/null)" = Z ] && { echo gone; exit; }; sleep 0.05; done; echo alive`;

export async function run({ e2b, check, env }) {
  const { Sandbox, CommandExitError, TimeoutError, InvalidArgumentError } = e2b;
  const sbx = await Sandbox.create();

  await check('run: stdout and exit code 0', async () => {
    const r = await sbx.commands.run('echo hello');
    assertEq(r.exitCode, 0, 'exitCode');
    assertEq(r.stdout, 'hello\n', 'stdout');
    assertEq(r.stderr, '', 'stderr');
  });

  await check('run: non-zero exit throws CommandExitError with its fields', async () => {
    const e = await rejects(sbx.commands.run('echo out; echo err 1>&2; exit 3'), CommandExitError);
    assertEq(e.exitCode, 3, 'exitCode');
    assertEq(e.stdout, 'out\n', 'stdout');
    assertEq(e.stderr, 'err\n', 'stderr');
    assertEq(e.error, 'exit status 3', 'error');
    assertEq(e.message, 'exit status 3', 'message');
  });

  await check('run: onStdout streams while the command runs', async () => {
    const seen = [];
    const t0 = Date.now();
    const r = await sbx.commands.run('for i in 1 2 3; do echo $i; sleep 0.4; done', {
      onStdout: (d) => seen.push([Date.now() - t0, d]),
    });
    const total = Date.now() - t0;
    assertEq(r.stdout, '1\n2\n3\n', 'stdout');
    assert(seen.length >= 3, `3 pieces, got ${JSON.stringify(seen)}`);
    assert(seen[0][0] < total - 600, `first piece at ${seen[0][0]} ms of ${total} ms`);
  });

  await check('run: stderr callback and large output', async () => {
    let errText = '';
    const r = await sbx.commands.run('head -c 300000 /dev/zero | tr "\\0" a; echo x >&2', {
      onStderr: (d) => (errText += d),
    });
    assertEq(r.stdout.length, 300000, 'stdout length');
    assertEq(errText, 'x\n', 'stderr via callback');
  });

  await check('run: a 4-byte character split across chunks decodes', async () => {
    const r = await sbx.commands.run("printf '\\xf0\\x9f'; sleep 0.3; printf '\\x98\\x80\\n'");
    assertEq(r.stdout, '\u{1F600}\n', 'stdout');
  });

  await check('stdin: sendStdin then closeStdin', async () => {
    const h = await sbx.commands.run('cat; echo done', { background: true, stdin: true });
    await sbx.commands.sendStdin(h.pid, 'abc\n');
    await h.sendStdin('def\n');
    await sbx.commands.closeStdin(h.pid);
    const r = await h.wait();
    assertEq(r.stdout, 'abc\ndef\ndone\n', 'stdout');
  });

  await check('stdin: without stdin:true the command reads EOF', async () => {
    const r = await sbx.commands.run('cat; echo eof');
    assertEq(r.stdout, 'eof\n', 'stdout');
  });

  await check('kill: a background command ends with signal: killed', async () => {
    const h = await sbx.commands.run('sleep 30', { background: true });
    assert(h.pid > 0, 'pid');
    assertEq(await sbx.commands.kill(h.pid), true, 'kill result');
    const e = await rejects(h.wait(), CommandExitError);
    assertEq(e.exitCode, -1, 'exitCode');
    assertEq(e.error, 'signal: killed', 'error');
  });

  await check('kill: the whole process group goes', async () => {
    const h = await sbx.commands.run('sleep 30 & echo $!; wait', { background: true });
    let child = '';
    for (let i = 0; i < 50 && !child.trim(); i++) {
      await sleep(20);
      child = h.stdout;
    }
    assert(child.trim().length > 0, 'child pid printed');
    await sbx.commands.kill(h.pid);
    await h.wait().catch(() => {});
    await sleep(100);
    const r = await sbx.commands.run(goneScript(child.trim()), { user: 'root' });
    assertEq(r.stdout, 'gone\n', 'grandchild');
  });

  await check('kill: unknown pid returns false', async () => {
    assertEq(await sbx.commands.kill(999999), false, 'kill result');
  });

  await check('list: shows running commands with their config', async () => {
    const h = await sbx.commands.run('sleep 30', { background: true, envs: { LISTED: '1' }, cwd: '/tmp' });
    const list = await sbx.commands.list();
    const me = list.find((p) => p.pid === h.pid);
    assert(me, `pid ${h.pid} in ${JSON.stringify(list)}`);
    assertEq(me.cmd, '/bin/bash', 'cmd');
    assertEq(me.args, ['-l', '-c', 'sleep 30'], 'args');
    assertEq(me.envs.LISTED, '1', 'envs');
    assertEq(me.cwd, '/tmp', 'cwd');
    await h.kill();
    await h.wait().catch(() => {});
    await sleep(50);
    const after = await sbx.commands.list();
    assert(!after.find((p) => p.pid === h.pid), 'gone from the list after it ended');
  });

  await check('connect: by pid after a disconnect gets later output', async () => {
    const h = await sbx.commands.run('sleep 0.5; echo late; exit 4', { background: true });
    await h.disconnect();
    const c = await sbx.commands.connect(h.pid);
    const e = await rejects(c.wait(), CommandExitError);
    assertEq(e.stdout, 'late\n', 'stdout');
    assertEq(e.exitCode, 4, 'exitCode');
  });

  await check('connect: output produced while nobody listened is kept', async () => {
    const h = await sbx.commands.run('sleep 0.4; echo early; sleep 0.8', { background: true });
    await h.disconnect();
    await sleep(700);
    const c = await sbx.commands.connect(h.pid);
    const r = await c.wait();
    assertEq(r.stdout, 'early\n', 'stdout');
  });

  await check('connect: unknown pid fails', async () => {
    await rejects(sbx.commands.connect(999999), Error);
  });

  await check('background: the process survives its client', async () => {
    const marker = `${env.AGENT_HOME}/bg-${Date.now()}`;
    const h = await sbx.commands.run(`sleep 0.5; echo ok > ${marker}`, { background: true });
    await h.disconnect();
    await sleep(900);
    const r = await sbx.commands.run(`cat ${marker}`);
    assertEq(r.stdout, 'ok\n', 'file written after the disconnect');
  });

  await check('timeoutMs: the process is killed at the deadline', async () => {
    const h = await sbx.commands.run('sleep 30', { background: true, timeoutMs: 1000 });
    const pid = h.pid;
    await rejects(h.wait(), TimeoutError, 'wait');
    await sleep(300);
    const r = await sbx.commands.run(goneScript(pid), { user: 'root' });
    assertEq(r.stdout, 'gone\n', 'process after the deadline');
    assert(!(await sbx.commands.list()).find((p) => p.pid === pid), 'not listed');
  });

  await check('timeoutMs: foreground run throws TimeoutError', async () => {
    const t0 = Date.now();
    await rejects(sbx.commands.run('sleep 30', { timeoutMs: 800 }), TimeoutError);
    assert(Date.now() - t0 < 5000, 'returned promptly');
  });

  await check('user: default user vs root', async () => {
    assertEq((await sbx.commands.run('id -u')).stdout, '1000\n', 'default user uid');
    assertEq((await sbx.commands.run('id -u', { user: 'root' })).stdout, '0\n', 'root uid');
    assertEq((await sbx.commands.run('id -G')).stdout, '1000 2000\n', 'supplementary groups');
    assertEq((await sbx.commands.run('echo $HOME $USER')).stdout, `${env.AGENT_HOME} user\n`, 'HOME USER');
  });

  await check('user: unknown user is rejected naming it', async () => {
    const e = await rejects(sbx.commands.run('true', { user: 'nosuchuser' }), InvalidArgumentError);
    assert(e.message.includes('nosuchuser'), `message names the user: ${e.message}`);
  });

  await check('env: request envs, template env, CA variables, no agent env', async () => {
    const r = await sbx.commands.run(
      'echo "$FOO|$TEMPLATE_VAR|$SSL_CERT_FILE|$NODE_EXTRA_CA_CERTS|${E2B_API_KEY:-unset}"',
      { envs: { FOO: 'bar baz' } });
    assertEq(r.stdout, `bar baz|from-template|${env.SYSTEM_CA_FILE}|${env.SYSTEM_CA_FILE}|unset\n`, 'env');
  });

  await check('cwd: default is the home, cwd option is honoured', async () => {
    assertEq((await sbx.commands.run('pwd')).stdout, `${env.AGENT_HOME}\n`, 'default cwd');
    assertEq((await sbx.commands.run('pwd', { cwd: '/tmp' })).stdout, '/tmp\n', 'cwd');
    await rejects(sbx.commands.run('pwd', { cwd: '/does/not/exist' }), Error, 'missing cwd');
  });

  await check('pty: create, input, resize, output', async () => {
    let out = '';
    const dec = new TextDecoder();
    const h = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => (out += dec.decode(d, { stream: true })) });
    const waitFor = async (needle) => {
      for (let i = 0; i < 200 && !out.includes(needle); i++) await sleep(25);
      assert(out.includes(needle), `pty output has ${JSON.stringify(needle)}: ${JSON.stringify(out.slice(-300))}`);
    };
    const enc = new TextEncoder();
    await sbx.pty.sendInput(h.pid, enc.encode('stty size; tty; echo pty-$((40+2))\n'));
    await waitFor('pty-42');
    assert(out.includes('24 80'), `initial size in ${JSON.stringify(out.slice(-300))}`);
    assert(out.includes('/dev/pts/'), 'a real terminal');
    await sbx.pty.resize(h.pid, { cols: 100, rows: 40 });
    await sbx.pty.sendInput(h.pid, enc.encode('stty size\n'));
    await waitFor('40 100');
    await sbx.pty.sendInput(h.pid, enc.encode('exit 0\n'));
    const r = await h.wait();
    assertEq(r.exitCode, 0, 'exitCode');
  });

  await check('pty: kill', async () => {
    const h = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} });
    assertEq(await sbx.pty.kill(h.pid), true, 'kill');
    await h.wait().catch(() => {});
  });

  await check('many commands in parallel', async () => {
    const rs = await Promise.all(Array.from({ length: 20 }, (_, i) => sbx.commands.run(`echo ${i}`)));
    rs.forEach((r, i) => assertEq(r.stdout, `${i}\n`, `command ${i}`));
  });
}
