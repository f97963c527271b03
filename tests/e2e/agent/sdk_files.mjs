// files.* through the real SDK (e2b-compat.md §6, §7): /files upload and download (multipart,
// octet-stream, gzip), filesystem.Filesystem (list, exists, getInfo, makeDir, rename, remove,
// watchDir), signed URLs, and ownership of what a user writes.
import { gzipSync } from 'node:zlib';

import { assert, assertEq, rejects, sleep } from './helpers.mjs';

// Waits until `pred(events)` holds (events as {type, name}).
async function waitFor(events, pred, what, ms = 5000) {
  const t0 = Date.now();
  while (Date.now() - t0 < ms) {
    if (pred(events)) return;
    await sleep(25);
  }
  throw new Error(`${what}: events were ${JSON.stringify(events)}`);
}
const has = (events, type, name) => events.some((e) => e.type === type && e.name === name);

export async function run({ e2b, check, env, authAgentUrl, sandboxAt }) {
  const { Sandbox, FileNotFoundError, InvalidArgumentError, AuthenticationError } = e2b;
  const sbx = await Sandbox.create();
  const base = `${env.AGENT_HOME}/sdkfiles`;
  await sbx.files.makeDir(base);

  await check('write/read: a string, multipart', async () => {
    const info = await sbx.files.write(`${base}/a.txt`, 'hello world');
    assertEq(info.path, `${base}/a.txt`, 'path');
    assertEq(info.name, 'a.txt', 'name');
    assertEq(await sbx.files.read(`${base}/a.txt`), 'hello world', 'text');
  });

  await check('write/read: bytes 00 01 02 ff pass untouched', async () => {
    await sbx.files.write(`${base}/b.bin`, new Uint8Array([0, 1, 2, 255]).buffer);
    const got = await sbx.files.read(`${base}/b.bin`, { format: 'bytes' });
    assertEq(Array.from(got), [0, 1, 2, 255], 'bytes');
    const blob = await sbx.files.read(`${base}/b.bin`, { format: 'blob' });
    assertEq(blob.size, 4, 'blob size');
  });

  await check('write: several files in one request (paths from the filenames)', async () => {
    const infos = await sbx.files.write([
      { path: `${base}/multi/one.txt`, data: 'one' },
      { path: `${base}/multi/deeper/two.txt`, data: 'two' },
      { path: 'relative.txt', data: 'rel' },
    ]);
    assertEq(infos.map((i) => i.path), [`${base}/multi/one.txt`, `${base}/multi/deeper/two.txt`,
      `${env.AGENT_HOME}/relative.txt`], 'paths');
    assertEq(await sbx.files.read(`${base}/multi/deeper/two.txt`), 'two', 'second file');
    assertEq(await sbx.files.read('relative.txt'), 'rel', 'relative to home');
  });

  await check('write: octet-stream, plain and gzip; read gzip and stream', async () => {
    const big = 'x'.repeat(300000) + 'end';
    await sbx.files.write(`${base}/o.txt`, big, { useOctetStream: true });
    assertEq((await sbx.files.read(`${base}/o.txt`)).length, big.length, 'octet-stream length');
    await sbx.files.write(`${base}/g.txt`, big, { gzip: true });
    assertEq(await sbx.files.read(`${base}/g.txt`, { gzip: true }), big, 'gzip round trip');
    const stream = await sbx.files.read(`${base}/g.txt`, { format: 'stream' });
    let n = 0;
    for await (const piece of stream) n += piece.length;
    assertEq(n, big.length, 'streamed length');
  });

  await check('raw POST /files with a gzip multipart body', async () => {
    const boundary = 'b0undary';
    const body = `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${base}/rawgz.txt"\r\n\r\nzipped\r\n--${boundary}--\r\n`;
    const r = await fetch(`http://127.0.0.1:49983/files?username=user`, {
      method: 'POST',
      headers: { 'content-type': `multipart/form-data; boundary=${boundary}`, 'content-encoding': 'gzip' },
      body: gzipSync(body),
    });
    assertEq(r.status, 200, 'status');
    assertEq((await r.json())[0].path, `${base}/rawgz.txt`, 'reply');
    assertEq(await sbx.files.read(`${base}/rawgz.txt`), 'zipped', 'content');
  });

  await check('write: metadata headers stored and reported (xattrs)', async () => {
    const info = await sbx.files.write(`${base}/meta.txt`, 'm', { metadata: { owner: 'alice' } });
    assertEq(info.metadata, { owner: 'alice' }, 'write reply');
    assertEq((await sbx.files.getInfo(`${base}/meta.txt`)).metadata, { owner: 'alice' }, 'getInfo');
    await sbx.files.write(`${base}/meta.txt`, 'm2');  // an overwrite without metadata clears it
    assertEq((await sbx.files.getInfo(`${base}/meta.txt`)).metadata, undefined, 'cleared');
  });

  await check('list: depth 1 and 2, absolute paths, types', async () => {
    const l1 = await sbx.files.list(`${base}/multi`);
    assertEq(l1.map((e) => [e.name, e.type]), [['deeper', 'dir'], ['one.txt', 'file']], 'depth 1');
    assertEq(l1[1].path, `${base}/multi/one.txt`, 'absolute path');
    const l2 = await sbx.files.list(`${base}/multi`, { depth: 2 });
    assertEq(l2.map((e) => e.path), [`${base}/multi/deeper`, `${base}/multi/deeper/two.txt`,
      `${base}/multi/one.txt`], 'depth 2');
    await rejects(sbx.files.list(`${base}/nope`), FileNotFoundError, 'list missing');
  });

  await check('exists and getInfo', async () => {
    assertEq(await sbx.files.exists(`${base}/a.txt`), true, 'exists');
    assertEq(await sbx.files.exists(`${base}/nope`), false, 'missing');
    const i = await sbx.files.getInfo(`${base}/a.txt`);
    assertEq([i.name, i.type, i.size, i.mode, i.permissions, i.owner, i.group],
      ['a.txt', 'file', 11, 0o644, '-rw-r--r--', 'user', 'user'], 'fields');
    assert(i.modifiedTime instanceof Date && Math.abs(Date.now() - i.modifiedTime) < 600000, 'modifiedTime');
    const d = await sbx.files.getInfo(base);
    assertEq([d.type, d.permissions], ['dir', 'drwxr-xr-x'], 'dir fields');
    await rejects(sbx.files.getInfo(`${base}/nope`), FileNotFoundError, 'getInfo missing');
  });

  await check('makeDir: true, then false when it exists', async () => {
    assertEq(await sbx.files.makeDir(`${base}/nd/x/y`), true, 'first');
    assertEq(await sbx.files.makeDir(`${base}/nd/x/y`), false, 'second');
    assertEq((await sbx.files.getInfo(`${base}/nd/x`)).type, 'dir', 'parents created');
  });

  await check('rename and remove', async () => {
    await sbx.files.write(`${base}/r1.txt`, 'r');
    const info = await sbx.files.rename(`${base}/r1.txt`, `${base}/r2.txt`);
    assertEq(info.path, `${base}/r2.txt`, 'renamed entry');
    assertEq(await sbx.files.exists(`${base}/r1.txt`), false, 'old gone');
    await sbx.files.remove(`${base}/r2.txt`);
    await sbx.files.remove(`${base}/nd`);  // recursive
    assertEq(await sbx.files.exists(`${base}/nd/x/y`), false, 'tree gone');
    await rejects(sbx.files.rename(`${base}/nope`, `${base}/x`), FileNotFoundError, 'rename missing');
  });

  await check('read: FileNotFoundError on a missing path, InvalidArgumentError on a dir', async () => {
    await rejects(sbx.files.read(`${base}/missing.txt`), FileNotFoundError, 'read missing');
    await rejects(sbx.files.read(base), InvalidArgumentError, 'read dir');
  });

  await check('watchDir: create, write, rename, remove events', async () => {
    const dir = `${base}/w`;
    await sbx.files.makeDir(dir);
    const events = [];
    const h = await sbx.files.watchDir(dir, (e) => events.push({ type: e.type, name: e.name }));
    await sbx.files.write(`${dir}/x.txt`, 'one');
    await sbx.files.rename(`${dir}/x.txt`, `${dir}/y.txt`);
    await sbx.commands.run(`echo more >> ${dir}/y.txt; rm ${dir}/y.txt`);
    await waitFor(events, (ev) => has(ev, 'remove', 'y.txt'), 'remove event');
    for (const [t, n] of [['create', 'x.txt'], ['rename', 'x.txt'], ['create', 'y.txt'], ['write', 'y.txt']])
      assert(has(events, t, n), `${t} ${n} in ${JSON.stringify(events)}`);
    await h.stop();
  });

  await check('watchDir: recursive, including a directory created later; includeEntry', async () => {
    const dir = `${base}/wr`;
    await sbx.files.makeDir(dir);
    const events = [];
    const h = await sbx.files.watchDir(dir, (e) => events.push({ type: e.type, name: e.name, entry: e.entry }),
      { recursive: true, includeEntry: true });
    await sbx.files.makeDir(`${dir}/sub`);
    await waitFor(events, (ev) => has(ev, 'create', 'sub'), 'sub created');
    await sbx.files.write(`${dir}/sub/inner.txt`, 'in');
    await waitFor(events, (ev) => has(ev, 'write', 'sub/inner.txt'), 'nested write');
    const withEntry = events.find((e) => e.name === 'sub/inner.txt' && e.entry);
    assert(withEntry && withEntry.entry.path === `${dir}/sub/inner.txt`, `entry in ${JSON.stringify(events)}`);
    await h.stop();
  });

  await check('watchDir: a missing directory -> FileNotFoundError', async () => {
    await rejects(sbx.files.watchDir(`${base}/nope`, () => {}), FileNotFoundError, 'watch missing');
  });

  await check('ownership: files of user vs root', async () => {
    await sbx.files.write(`${base}/own-user.txt`, 'u');
    await sbx.files.write(`/tmp/sdkfiles-own-root.txt`, 'r', { user: 'root' });
    const r = await sbx.commands.run(`stat -c '%u:%g:%a' ${base}/own-user.txt /tmp/sdkfiles-own-root.txt ${base}/multi/deeper`,
      { user: 'root' });
    assertEq(r.stdout.trim().split('\n'), ['1000:1000:644', '0:0:644', '1000:1000:755'], 'uid:gid:mode');
    assertEq((await sbx.files.getInfo('/tmp/sdkfiles-own-root.txt', { user: 'root' })).owner, 'root', 'owner');
    await sbx.files.remove('/tmp/sdkfiles-own-root.txt', { user: 'root' });
  });

  await check('permissions: the user cannot write into root-owned directories', async () => {
    await sbx.commands.run('mkdir -p /tmp/sdkfiles-rootdir && chmod 755 /tmp/sdkfiles-rootdir', { user: 'root' });
    let err;
    try {
      await sbx.files.write('/tmp/sdkfiles-rootdir/x.txt', 'no');
    } catch (e) {
      err = e;
    }
    assert(err && /403/.test(err.message), `expected a 403 error, got ${err && err.message}`);
    await rejects(sbx.files.makeDir('/tmp/sdkfiles-rootdir/d'), null, 'makeDir as user');
    await sbx.commands.run('rm -rf /tmp/sdkfiles-rootdir', { user: 'root' });
  });

  await check('signed URLs: uploadUrl/downloadUrl with fetch; wrong or expired refused', async () => {
    // Make sure the second agent has the token (sdk_auth.mjs may or may not have run).
    await fetch(`${authAgentUrl}/init`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-access-token': 'secret-token' },
      body: JSON.stringify({ accessToken: 'secret-token' }),
    });
    const secured = sandboxAt(authAgentUrl, 'secret-token');
    const path = `${env.AGENT_HOME}/signed.txt`;
    const up = await secured.uploadUrl(path, { useSignatureExpiration: 60 });
    assert(/signature=v1_/.test(up) && /signature_expiration=/.test(up), `upload url ${up}`);
    const form = new FormData();
    form.append('file', new Blob(['signed data']), path);
    const r = await fetch(up, { method: 'POST', body: form });
    assertEq(r.status, 200, `upload status ${await r.clone().text()}`);
    const down = await secured.downloadUrl(path);
    const g = await fetch(down);
    assertEq([g.status, await g.text()], [200, 'signed data'], 'download');
    assertEq((await fetch(down.replace('signed.txt', 'other.txt'))).status, 401, 'signature of another path');
    assertEq((await fetch(up.replace(/signature_expiration=\d+/, 'signature_expiration=1'))).status, 401,
      'tampered expiration');
    assertEq((await fetch(`${authAgentUrl}/files?path=${encodeURIComponent(path)}`)).status, 401, 'unsigned');
    await rejects(sandboxAt(authAgentUrl).files.read(path), AuthenticationError, 'SDK without token');
    assertEq(await secured.files.read(path), 'signed data', 'SDK with token');
  });
}
