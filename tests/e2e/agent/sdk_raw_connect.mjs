// Connect-protocol details checked with raw fetch (what the SDK relies on but cannot show):
// keepalive frames, error shapes of unary and streaming calls.
import { assert, assertEq } from './helpers.mjs';

function envelope(obj, flags = 0) {
  const payload = Buffer.from(JSON.stringify(obj));
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(payload.length, 1);
  return Buffer.concat([head, payload]);
}

function frames(buf) {
  const out = [];
  let i = 0;
  while (i + 5 <= buf.length) {
    const len = buf.readUInt32BE(i + 1);
    out.push({ flags: buf[i], json: JSON.parse(buf.subarray(i + 5, i + 5 + len).toString()) });
    i += 5 + len;
  }
  assertEq(i, buf.length, 'frames cover the body');
  return out;
}

export async function run({ check, agentUrl }) {
  const stream = async (method, body, headers = {}) => {
    const r = await fetch(`${agentUrl}/process.Process/${method}`, {
      method: 'POST',
      headers: { 'content-type': 'application/connect+json', 'connect-protocol-version': '1', ...headers },
      body,
    });
    return { status: r.status, type: r.headers.get('content-type'), frames: frames(Buffer.from(await r.arrayBuffer())) };
  };
  const unary = async (method, body) => {
    const r = await fetch(`${agentUrl}/process.Process/${method}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'connect-protocol-version': '1' },
      body,
    });
    return { status: r.status, type: r.headers.get('content-type'), json: await r.json() };
  };

  await check('raw: keepalive at Keepalive-Ping-Interval while the command is quiet', async () => {
    const r = await stream('Start', envelope({ process: { cmd: '/bin/bash', args: ['-c', 'sleep 2.5; echo x'] } }),
      { 'keepalive-ping-interval': '1' });
    assertEq(r.status, 200, 'status');
    assertEq(r.type, 'application/connect+json', 'content type');
    const kinds = r.frames.map((f) => (f.flags === 2 ? 'eos' : Object.keys(f.json.event)[0]));
    assertEq(kinds[0], 'start', 'first event');
    const keepalives = kinds.filter((k) => k === 'keepalive').length;
    assert(keepalives >= 2 && keepalives <= 3, `2-3 keepalives in ${kinds}`);
    assertEq(kinds.slice(-3), ['data', 'end', 'eos'], 'tail');
    assertEq(r.frames.at(-1).json, {}, 'end-of-stream body');
    assertEq(r.frames.at(-2).json.event.end, { exited: true, status: 'exit status 0' }, 'end event');
  });

  await check('raw: malformed stream request -> 200 with invalid_argument in end-of-stream', async () => {
    const r = await stream('Start', Buffer.from([0, 0, 0, 0, 3, 0x7b, 0x7b, 0x7b]));
    assertEq(r.status, 200, 'status');
    assertEq(r.frames.length, 1, 'one frame');
    assertEq(r.frames[0].flags, 2, 'end-of-stream flag');
    assertEq(r.frames[0].json.error.code, 'invalid_argument', 'code');
  });

  await check('raw: connect to an unknown pid -> not_found in end-of-stream', async () => {
    const r = await stream('Connect', envelope({ process: { pid: 999999 } }));
    assertEq(r.frames.at(-1).json.error.code, 'not_found', 'code');
  });

  await check('raw: unary bad JSON -> 400 application/json invalid_argument', async () => {
    const r = await unary('List', '{"x":');
    assertEq(r.status, 400, 'status');
    assert(r.type.startsWith('application/json'), `content type ${r.type}`);
    assertEq(r.json.code, 'invalid_argument', 'code');
  });

  await check('raw: unary SendSignal unknown pid -> 404 not_found', async () => {
    const r = await unary('SendSignal', JSON.stringify({ process: { pid: 999999 }, signal: 'SIGNAL_SIGKILL' }));
    assertEq(r.status, 404, 'status');
    assertEq(r.json.code, 'not_found', 'code');
  });

  await check('raw: unknown method -> 501 unimplemented', async () => {
    const r = await unary('Nope', '{}');
    assertEq(r.status, 501, 'status');
    assertEq(r.json.code, 'unimplemented', 'code');
  });
}
