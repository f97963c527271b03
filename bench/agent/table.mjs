// Prints run_bench.sh's side-by-side table from sdk_bench.mjs's RESULT json and the runsc json.
//   node table.mjs SDK_JSON RUNSC_JSON
import { readFileSync } from 'node:fs';

const sdk = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const rs = JSON.parse(readFileSync(process.argv[3], 'utf8'));
const pct = (xs, p) => xs.slice().sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];
const mbps = (bytes, us) => bytes / 1e6 / (us / 1e6);
const runsc = rs.missing ? null : {
  p50: pct(rs.exec_us, 0.5) / 1000,
  p99: pct(rs.exec_us, 0.99) / 1000,
  n: rs.exec_us.length,
  up: mbps(rs.bytes, Math.min(...rs.up_us)),
  down: mbps(rs.bytes, Math.min(...rs.down_us)),
  rss: rs.rss_kib,
};
const na = (why) => ({ text: why, value: null });
const ms = (v) => ({ text: `${v.toFixed(2)} ms`, value: v });
const mb = (v) => ({ text: `${v.toFixed(0)} MB/s`, value: v });
const kib = (v) => ({ text: `${(v / 1024).toFixed(1)} MiB`, value: v });
const missing = na(rs.missing ? 'n/a' : '');

// [metric, SDK + agent, runsc exec, host fork+exec, goal, goal met?]
const rows = [
  ["run('true') p50", ms(sdk.sdk_run.p50), runsc ? ms(runsc.p50) : missing, ms(sdk.host_true.p50), '<= 3 ms',
    sdk.sdk_run.p50 <= 3],
  ["run('true') p99", ms(sdk.sdk_run.p99), runsc ? ms(runsc.p99) : missing, ms(sdk.host_true.p99), '', null],
  ['upload 100 MiB', mb(sdk.sdk_write_stream_octet.mbps), runsc ? mb(runsc.up) : missing, mb(sdk.host_pipe_up.mbps),
    '>= 300 MB/s', sdk.sdk_write_stream_octet.mbps >= 300],
  ['download 100 MiB', mb(sdk.sdk_read_stream.mbps), runsc ? mb(runsc.down) : missing, mb(sdk.host_pipe_down.mbps),
    '>= 300 MB/s', sdk.sdk_read_stream.mbps >= 300],
  ['idle RSS', kib(sdk.idle_rss_kib), runsc ? kib(runsc.rss) : missing, na('-'), '<= 8 MiB',
    sdk.idle_rss_kib <= 8192],
];
const ratio = (a, b, higherIsBetter) => {
  if (a.value == null || b.value == null || !b.value) return '-';
  const r = higherIsBetter ? b.value / a.value : a.value / b.value;  // >1 = SDK is that many times worse
  return `${r.toFixed(2)}x`;
};
const head = ['metric', 'SDK + agent', 'runsc exec', 'host fork+exec', 'SDK/runsc', 'SDK/host', 'goal', 'met'];
const lines = [head];
for (const [name, a, r, h, goal, met] of rows) {
  const hib = name.includes('load');
  lines.push([name, a.text, r.text, h.text, ratio(a, r, hib), ratio(a, h, hib), goal,
    met == null ? '' : met ? 'yes' : 'NO']);
}
const widths = head.map((_, i) => Math.max(...lines.map((l) => l[i].length)));
const print = (l) => console.log(`| ${l.map((c, i) => c.padEnd(widths[i])).join(' | ')} |`);
console.log('');
print(lines[0]);
console.log(`|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`);
lines.slice(1).forEach(print);
console.log('ratios: how many times slower / bigger the SDK + agent is (1.00x = same).');
console.log('upload = files.write(stream, useOctetStream), download = files.read(format stream);');
console.log('runsc exec = `runsc exec C sh -c "cat > f"` fed from a file / `runsc exec C cat f | wc -c`;');
console.log('host = the same through /bin/sh + cat with node pipes. Other SDK variants:');
for (const k of ['sdk_write_buffer', 'sdk_write_octet', 'sdk_write_stream_octet', 'sdk_read_bytes', 'sdk_read_stream',
  'curl_post_octet', 'curl_get', 'curl_get_gzip', 'fetch_get_identity']) {
  if (sdk[k]) console.log(`  ${k.padEnd(24)} ${sdk[k].mbps.toFixed(0)} MB/s`);
}
if (rs.missing) console.log(`runsc column missing: ${rs.missing}`);
else console.log(`runsc sandbox start (run --detach): ${rs.start_ms} ms; exec n=${runsc.n}`);
console.log("\nrun('true') breakdown (p50):");
const b = [
  ['GET /health round trip (fetch)', sdk.health.p50],
  ['raw Start /bin/true: response head', sdk.raw_start_true.head.p50],
  ['raw Start /bin/true: end event', sdk.raw_start_true.end.p50],
  ['raw Start bash -l -c true: response head', sdk.raw_start_bash.head.p50],
  ['raw Start bash -l -c true: end event', sdk.raw_start_bash.end.p50],
  ["SDK commands.run('true') (= bash -l -c true)", sdk.sdk_run.p50],
  ['host spawnSync /bin/true', sdk.host_true.p50],
  ['host spawnSync bash -c true (uid 1000)', sdk.host_bash.p50],
  ['host spawnSync bash -l -c true (uid 1000)', sdk.host_bash_l.p50],
];
for (const [k, v] of b) console.log(`  ${k.padEnd(46)} ${v.toFixed(2)} ms`);
if (rs.shell_us) {
  const names = ['/bin/true', 'bash -c true', 'bash --noprofile -l -c true', 'bash -l -c true'];
  const cell = (v) => (v == null ? 'failed' : `${(v / 1000).toFixed(2)} ms`);
  console.log('\nin the base template, per run, started by a shell already there (uid 1000):');
  console.log(`  ${''.padEnd(30)} ${'native (chroot)'.padEnd(16)} gVisor (runsc exec'd loop)`);
  names.forEach((n, i) => console.log(`  ${n.padEnd(30)} ${cell(rs.shell_us[i]).padEnd(16)} ${cell(rs.shell_us[i + 4])}`));
}
