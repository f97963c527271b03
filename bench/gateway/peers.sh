#!/usr/bin/env bash
# cordon against its peers, side by side in one run (issue 4, "Benchmark with peers"): the same
# nginx TLS upstream (a test CA made here; 1 KiB and 64 KiB responses), the same transparent
# topology, the same wrk load, for
#   direct     the sandbox talks to nginx itself (the gateway namespace only routes): the limit
#   cordon     `cordon serve`, transparent listener fed by nftables TPROXY, TLS intercepted,
#              every request checked and a credential injected, audit log written
#   nginx      nginx as a plain TLS-terminating reverse proxy (nftables redirect): one worker,
#              one static certificate, upstream keep-alive and TLS session reuse, no policy, no
#              audit: the floor for a proxy that terminates TLS both ways (the same nginx setup
#              as the nginx-h2 column, start_nginx_proxy)
#   squid      Squid 5 ssl_bump (Debian squid-openssl), intercepting (nftables redirect)
#   mitmproxy  mitmdump --mode transparent, intercepting (nftables redirect)
# plus, for cordon: new TLS connections per second (warm leaf cache, `Connection: close` on
# every request) and RSS per idle intercepted connection with IDLE (10,000) of them open.
# And an HTTP/2 table in the same run (H2=1): h2load, H2_CONNS connections with H2_STREAMS
# concurrent streams each, 1 KiB and 64 KiB, for
#   direct     h2 to nginx itself
#   cordon     h2 from the sandbox, h2 to nginx (cordon offers h2 upstream and nginx takes it)
#   nginx-h2   nginx as an h2 TLS-terminating proxy (its own CA; HTTP/1.1 keep-alive upstream,
#              the only upstream protocol nginx's proxy speaks)
# with CPU per request computed as for wrk, and the goals: cordon's CPU per h2 request <= its
# CPU per HTTP/1.1 request (same size, from the wrk run), h2 req/s >= 0.5x direct.
# CPU goals against the peers (HTTP/1.1): cordon's CPU per request <= 1.15x nginx's at 1 KiB and
# <= 1.0x at 64 KiB, and <= 1/3 of Squid's at 64 KiB.
#
# CPU per request: around each throughput run the script reads user+sys time from /proc/PID/stat
# of the proxy (all its threads, all its child processes such as Squid's certificate helpers),
# of nginx (master and workers) and of wrk, and divides by the requests wrk completed. The
# proxy's figure hardly depends on what shares its cores; req/s does. Also shown: how long the
# proxy waited for a CPU (schedstat), softirq time, and other processes' CPU time (/proc/stat).
#
# CPU layout (CPUS): split (default) pins wrk and nginx to the first CPU and the proxy under test
# to the second (a gateway host has its own cores; sandboxes and upstreams are elsewhere), so the
# direct column runs on one CPU; shared lets wrk, nginx and the proxy share every CPU. Fewer
# than 2 CPUs: shared, with a note.
#
# Topology (design.md §6; no namespace has a route to the machine's real interfaces):
#   sandbox 192.0.2.2 (+ 192.0.2.100-149 for the idle test) --veth-- gateway 192.0.2.1 |
#   198.51.100.1 --veth-- internet 198.51.100.10 (nginx :443, "api.bench")
# Everything it creates (namespaces, nft tables, /etc/netns/<ns>, processes, temp files) is
# removed on exit, also on failure or Ctrl-C. A peer that is not installed is printed SKIPPED.
#
# Usage (root): bench/gateway/peers.sh PATH/TO/cordon
#   env: DURATION=10 (s per throughput run)  CONNS=32  THREADS=2 (wrk)  LAT_DURATION=5 (s, 1 conn)
#        IDLE=10000 (0 = skip)  PEERS="direct cordon nginx squid mitmproxy"  CPUS=split|shared
#        GW_THREADS (cordon io threads; default: the CPUs the proxy gets, 1 in split)
#        PERF_OUT=/tmp/cordon.perf (perf record of cordon during its throughput runs:
#          PERF_OUT-1k, PERF_OUT-64k for HTTP/1.1, PERF_OUT-h2-1k, PERF_OUT-h2-64k for h2)
#        SYSCALLS=1 (perf stat of each proxy during its throughput runs: syscalls and context
#          switches per request, two more rows; 0 = off)
#        H2=1 (0 = no HTTP/2 table)  H2_CONNS=4  H2_STREAMS=32 (h2load -c, -m)
#        SKIP_DEPS=1 (do not run scripts/install-deps.sh --bench first)
set -euo pipefail
export LC_ALL=C  # numbers with a decimal point (awk, `times`)
here=$(cd "$(dirname "$0")" && pwd)
cordon=$(realpath "${1:?usage: peers.sh PATH/TO/cordon}")
DURATION=${DURATION:-10} CONNS=${CONNS:-32} THREADS=${THREADS:-2} LAT_DURATION=${LAT_DURATION:-5}
IDLE=${IDLE:-10000} PEERS=${PEERS:-"direct cordon nginx squid mitmproxy"} CPUS=${CPUS:-split}
H2=${H2:-1} H2_CONNS=${H2_CONNS:-4} H2_STREAMS=${H2_STREAMS:-32}
case $CPUS in
  split | shared) ;;
  *) echo "peers.sh: CPUS=split or CPUS=shared, not '$CPUS'" >&2; exit 1 ;;
esac
[ "$(id -u)" -eq 0 ] || { echo "peers.sh: needs root (network namespaces, nftables)" >&2; exit 1; }
[ "${SKIP_DEPS:-0}" = 1 ] || bash "$here/../../scripts/install-deps.sh" --bench || echo "peers.sh: could not install every peer; missing ones are SKIPPED" >&2
for t in ip nft openssl curl wrk nginx python3 taskset; do
  command -v "$t" >/dev/null || { echo "peers.sh: $t is not installed (scripts/install-deps.sh)" >&2; exit 1; }
done
ulimit -n "$(ulimit -Hn)"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- CPU layout --------------------------------------------------------------------------------
# ep_pin: prefix for wrk, nginx and every other sandbox-side client; px_pin: for the proxy under
# test. Empty: not pinned (shared). Arrays, not functions: taskset and `ip netns exec` exec, so
# `"${px_pin[@]}" ip netns exec ... &` leaves in $! the process itself.
read -r -a cpu_list <<<"$(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0)))')"
ep_pin=() px_pin=() LAYOUT_NOTE=""
if [ "$CPUS" = split ] && [ "${#cpu_list[@]}" -lt 2 ]; then
  LAYOUT_NOTE="CPUS=split needs 2 CPUs, this machine gives ${#cpu_list[@]}: ran shared"
  echo "peers.sh: $LAYOUT_NOTE" >&2
  CPUS=shared
fi
if [ "$CPUS" = split ]; then
  ep_pin=(taskset -c "${cpu_list[0]}") px_pin=(taskset -c "${cpu_list[1]}")
  GW_THREADS=${GW_THREADS:-1}
  LAYOUT="split: wrk + nginx on CPU ${cpu_list[0]}, proxy under test on CPU ${cpu_list[1]}"
  LAYOUT+=" (direct: CPU ${cpu_list[0]} only)"
else
  GW_THREADS=${GW_THREADS:-${#cpu_list[@]}}
  LAYOUT="shared: wrk, nginx and the proxy under test share the CPUs $(IFS=,; echo "${cpu_list[*]}")"
fi

id=$$
sb=cbench-sb-$id gw=cbench-gw-$id inet=cbench-in-$id
tmp=$(mktemp -d /tmp/cordon-peers.XXXXXX)
chmod 755 "$tmp"  # nginx workers (www-data) and squid (proxy) read their files here
pids=()
cleanup() {
  local rc=$?
  set +e
  for pid in "${pids[@]}"; do kill_wait "$pid"; done
  # Deleting a namespace removes its veths, addresses, routes and nft tables with it.
  for ns in "$sb" "$gw" "$inet"; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "/etc/netns/$sb" "/etc/netns/$gw" "$tmp"
  rmdir /etc/netns 2>/dev/null
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM
die() { echo "peers.sh: $*" >&2; exit 1; }
note() { echo "-- $*" >&2; }
# (Background processes are started with `ip netns exec` itself, which execs, so that $! is the
# process to stop; a shell function run with & would be a subshell that outlives nothing.)
in_sb() { "${ep_pin[@]}" ip netns exec "$sb" "$@"; }  # every sandbox-side client runs beside wrk
in_gw() { ip netns exec "$gw" "$@"; }
wait_port() {  # wait_port NS ADDR:PORT: until something accepts there (max 10 s)
  for _ in $(seq 100); do
    ip netns exec "$1" bash -c "exec 3<>/dev/tcp/${2%:*}/${2##*:}" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}
kill_wait() {  # kill_wait PID: SIGTERM, then SIGKILL after 5 s
  kill "$1" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# ---- namespaces --------------------------------------------------------------------------------
note "namespaces $sb -> $gw -> $inet"
ip netns add "$sb"; ip netns add "$gw"; ip netns add "$inet"
ip -n "$sb" link add v-sb type veth peer name v-gw-sb netns "$gw"
ip -n "$gw" link add v-gw-in type veth peer name v-in netns "$inet"
ip -n "$sb" addr add 192.0.2.2/24 dev v-sb
idle_sources=()
for i in $(seq 100 149); do
  ip -n "$sb" addr add "192.0.2.$i/24" dev v-sb
  idle_sources+=("192.0.2.$i")
done
ip -n "$gw" addr add 192.0.2.1/24 dev v-gw-sb
ip -n "$gw" addr add 198.51.100.1/24 dev v-gw-in
ip -n "$inet" addr add 198.51.100.10/24 dev v-in
for l in "$sb lo" "$sb v-sb" "$gw lo" "$gw v-gw-sb" "$gw v-gw-in" "$inet lo" "$inet v-in"; do
  set -- $l; ip -n "$1" link set "$2" up
done
ip -n "$sb" route add default via 192.0.2.1
ip -n "$inet" route add 192.0.2.0/24 via 198.51.100.1  # replies for the direct runs
in_gw sysctl -qw net.ipv4.ip_forward=1                 # direct runs are routed, not proxied
ip -n "$gw" rule add fwmark 0x1 lookup 100             # TPROXY'd packets are delivered locally
ip -n "$gw" route add local 0.0.0.0/0 dev lo table 100
# Names: `ip netns exec` bind-mounts /etc/netns/NAME/hosts over /etc/hosts.
for ns in "$sb" "$gw"; do
  mkdir -p "/etc/netns/$ns"
  printf '127.0.0.1 localhost\n198.51.100.10 api.bench\n' >"/etc/netns/$ns/hosts"
done

# ---- upstream: nginx over TLS with a test CA -----------------------------------------------------
note "test CA and nginx upstream"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -subj '/CN=bench internet CA' -keyout "$tmp/up-ca.key" -out "$tmp/up-ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj '/CN=api.bench' \
  -keyout "$tmp/up.key" -out "$tmp/up.csr" 2>/dev/null
printf 'subjectAltName=DNS:api.bench\n' >"$tmp/up.ext"
openssl x509 -req -in "$tmp/up.csr" -CA "$tmp/up-ca.pem" -CAkey "$tmp/up-ca.key" -CAcreateserial \
  -days 1 -extfile "$tmp/up.ext" -out "$tmp/up.pem" 2>/dev/null
mkdir -p "$tmp/www"
head -c 1024 /dev/zero | tr '\0' a >"$tmp/www/1k"
head -c 65536 /dev/zero | tr '\0' b >"$tmp/www/64k"
chmod 644 "$tmp/www/"*; chmod 755 "$tmp/www"
cat >"$tmp/nginx.conf" <<EOF
worker_processes 2;
pid $tmp/nginx.pid;
error_log $tmp/nginx.err warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 10000000;
  keepalive_timeout 300s;
  default_type application/octet-stream;
  client_body_temp_path $tmp/nginx-tmp;
  proxy_temp_path $tmp/nginx-tmp; fastcgi_temp_path $tmp/nginx-tmp;
  uwsgi_temp_path $tmp/nginx-tmp; scgi_temp_path $tmp/nginx-tmp;
  server {
    listen 198.51.100.10:443 ssl http2;  # h2 for h2 clients (ALPN); wrk still gets HTTP/1.1
    server_name api.bench;
    ssl_certificate $tmp/up.pem;
    ssl_certificate_key $tmp/up.key;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:bench:4m;
    root $tmp/www;
  }
}
EOF
"${ep_pin[@]}" ip netns exec "$inet" nginx -c "$tmp/nginx.conf" -g 'daemon off;' 2>"$tmp/nginx.log" &
nginx_pid=$!
pids+=("$nginx_pid")
wait_port "$inet" 198.51.100.10:443 || die "nginx did not start: $(cat "$tmp/nginx.log" "$tmp/nginx.err" 2>/dev/null)"

# ---- cordon state: CA, vault secret, sandboxes, rules ----------------------------------------------
export CORDON_HOME=$tmp/cordon
"$cordon" init >"$tmp/cordon-init.log" 2>&1 || die "cordon init: $(cat "$tmp/cordon-init.log")"
printf 'bench-secret-value-0123456789' | "$cordon" vault put bench-key --stdin >/dev/null 2>&1 ||
  die "cordon vault put"
"$cordon" sandbox register sb-main --profile bench --address 192.0.2.2 >/dev/null 2>&1 ||
  die "cordon sandbox register"
# The idle test spreads its connections over 50 sandboxes (the per-sandbox connection limit,
# 256 by default, is a fairness limit: each sandbox stays under it, none is raised).
for i in $(seq 100 149); do
  "$cordon" sandbox register "sb-idle-$i" --profile bench --address "192.0.2.$i" >/dev/null 2>&1 ||
    die "cordon sandbox register sb-idle-$i"
done
"$cordon" ca export >"$tmp/cordon-ca.pem"
cat >"$tmp/rules.yaml" <<'EOF'
version: 1
credentials:
  - {name: bench, secret: bench-key, inject: {header: Authorization, format: "Bearer {secret}"}}
destinations:
  - id: api
    hosts: [api.bench]
    routes:
      - {id: files, methods: [GET], path: {prefix: /}, credential: bench}
profiles:
  bench: {destinations: [api]}
EOF
cordon_pid=""
start_cordon() {
  "${px_pin[@]}" ip netns exec "$gw" "$cordon" serve --rules "$tmp/rules.yaml" --transparent-listen 127.0.0.1:15001 \
    --admin-listen 127.0.0.1:15002 --resolve api.bench=198.51.100.10 \
    --upstream-ca "$tmp/up-ca.pem" --no-system-trust --threads "$GW_THREADS" 2>>"$tmp/serve.log" &
  cordon_pid=$!
  pids+=("$cordon_pid")
  wait_port "$gw" 127.0.0.1:15002 || die "cordon serve did not start: $(cat "$tmp/serve.log")"
}
stop_cordon() { kill_wait "$cordon_pid"; cordon_pid=""; }

# ---- steering ----------------------------------------------------------------------------------
steer_tproxy() {  # steer_tproxy PORT: sandbox TCP 443 -> 127.0.0.1:PORT (IP_TRANSPARENT listener)
  in_gw nft -f - <<EOF
table ip bench_steer {
  chain pre { type filter hook prerouting priority mangle;
    iifname "v-gw-sb" meta l4proto tcp tcp dport 443 tproxy to 127.0.0.1:$1 meta mark set 1 accept; }
  chain forward_drop { type filter hook forward priority 0; iifname "v-gw-sb" drop; }
}
EOF
}
steer_redirect() {  # steer_redirect PORT: sandbox TCP 443 -> local PORT via NAT (SO_ORIGINAL_DST)
  in_gw nft -f - <<EOF
table ip bench_steer {
  chain pre { type nat hook prerouting priority dstnat;
    iifname "v-gw-sb" tcp dport 443 redirect to :$1; }
  chain forward_drop { type filter hook forward priority 0; iifname "v-gw-sb" drop; }
}
EOF
}
unsteer() { in_gw nft delete table ip bench_steer 2>/dev/null || true; }

# ---- measurement -------------------------------------------------------------------------------
declare -A RPS MBS P50 P99 LAT SKIP REQS PX_CPU PX_WAIT WRK_CPU NG_CPU WALL TASKS IRQ STEAL PX_SYS PX_CS
proxy_pid=""  # the process (tree) of the proxy under test; empty for direct
clk_tck=$(getconf CLK_TCK)
tree_pids() {  # tree_pids PID: PID and all its descendants (Squid's helpers, nginx's workers)
  { cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v root="$1" '
    { s = $0; pid = s + 0; sub(/^.*\) /, "", s); split(s, f, " "); parent[pid] = f[2] }
    END { tree[root] = 1
      do { grew = 0
        for (p in parent) if (!(p in tree) && (parent[p] in tree)) { tree[p] = 1; grew = 1 }
      } while (grew)
      for (p in tree) print p }'
}
cpu_s() {  # cpu_s PID: user+sys seconds of PID's tree so far, every thread, reaped children too
  local p  # (fields after "(comm) ": utime stime cutime cstime are 12-15)
  for p in $(tree_pids "$1"); do cat "/proc/$p/stat" 2>/dev/null || true; done |
    awk -v hz="$clk_tck" '{ sub(/^.*\) /, ""); t += $12 + $13 + $14 + $15 } END { printf "%.2f", t / hz }'
}
waited_s() {  # waited_s PID: seconds PID's tree's threads have been runnable but not running so far
  local p
  for p in $(tree_pids "$1"); do cat /proc/"$p"/task/*/schedstat 2>/dev/null || true; done |
    awk '{ s += $2 } END { printf "%.3f", s / 1e9 }'
}
now_s() { date +%s.%N; }
machine_s() {  # machine_s CPU...: CPU seconds of these CPUs so far: "TASKS IRQ STEAL" (/proc/stat)
  # TASKS: user+nice+system of every process; IRQ: irq+softirq (packets through veth, nft,
  # forwarding: charged to no process); STEAL: taken by the hypervisor (a VM)
  awk -v hz="$clk_tck" -v cpus=" $* " 'index(cpus, " " substr($1, 4) " ") && $1 ~ /^cpu[0-9]/ {
      t += $2 + $3 + $4; i += $7 + $8; st += $9 }
    END { printf "%.2f %.2f %.2f", t / hz, i / hz, st / hz }' /proc/stat
}
column_cpus() {  # column_cpus NAME: the CPUs a column's processes may run on
  if [ "$CPUS" = split ] && [ "$1" = direct ]; then echo "${cpu_list[0]}"
  elif [ "$CPUS" = split ]; then echo "${cpu_list[0]} ${cpu_list[1]}"
  else echo "${cpu_list[*]}"; fi
}
to_us() {  # wrk duration ("812.00us", "1.20ms", "2.00s") -> microseconds
  awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) m = 1; else if (v ~ /ms$/) m = 1000;
    else if (v ~ /s$/) m = 1000000; else m = 1; printf "%.0f", n * m }'
}
to_mbs() {  # wrk transfer ("12.3MB") -> MB/s
  awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /GB$/) m = 1024; else if (v ~ /MB$/) m = 1;
    else if (v ~ /KB$/) m = 1 / 1024; else m = 1 / 1048576; printf "%.1f", n * m }'
}
wrk_run() {  # wrk_run OUTFILE CONNS THREADS SECONDS URL [wrk args...]; wrk's CPU s -> OUTFILE.cpu
  local out=$1 c=$2 t=$3 d=$4 url=$5 sub; shift 5
  # In a subshell whose only child is wrk, `times` (2nd line) is wrk's user and sys time. Both
  # run in the background and are waited for: Ctrl-C then reaches the INT trap at once (a
  # foreground wrk handles SIGINT itself, and bash then ignores it and goes on with dead
  # servers); cleanup's SIGTERM to the subshell is passed on to wrk.
  (
    "${ep_pin[@]}" ip netns exec "$sb" wrk -t"$t" -c"$c" -d"${d}s" --latency "$@" "$url" >"$out" 2>&1 &
    w=$!
    trap 'kill "$w" 2>/dev/null; exit 143' TERM
    wait "$w" || true
    times >"$out.times"
  ) &
  sub=$!
  pids+=("$sub")
  wait "$sub" || true
  awk 'NR == 2 { for (i = 1; i <= 2; i++) { split($i, a, "m"); s += a[1] * 60 + a[2] } }
    END { printf "%.2f", s }' "$out.times" >"$out.cpu"
}
diff_s() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }  # diff_s A B: B - A
add_s() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a + b }'; }
pct() {  # pct SECONDS WALL_SECONDS: % of one CPU, as top shows it
  awk -v s="$1" -v w="$2" 'BEGIN { if (s != "" && w > 0) printf "%.0f", 100 * s / w; else print "-" }'
}
per_req_us() {  # per_req_us SECONDS REQUESTS
  awk -v s="$1" -v n="$2" 'BEGIN { if (s != "" && n > 0) printf "%.1f", s * 1e6 / n; else print "-" }'
}
check_path() {  # check_path NAME CA: one request with the CA the answer must chain to
  local got
  got=$(in_sb curl -s -o /dev/null -w '%{http_code} %{size_download}' --max-time 10 \
    --cacert "$2" https://api.bench/1k || true)
  [ "$got" = "200 1024" ] || die "$1: a check request through the path failed ($got)"
}
perf_start() {  # perf_start TAG: profile cordon for DURATION s into PERF_OUT-TAG (sets perf_pid)
  if [ -n "${PERF_OUT:-}" ] && command -v perf >/dev/null; then
    perf record -q -g -o "$PERF_OUT-$1" -p "$cordon_pid" -- sleep "$DURATION" 2>/dev/null &
    perf_pid=$!
  fi
}
stat_start() {  # stat_start OUT: count the proxy tree's syscalls and context switches (sets stat_pid)
  if [ "${SYSCALLS:-1}" = 1 ] && [ -n "$proxy_pid" ] && command -v perf >/dev/null; then
    perf stat -x, -e raw_syscalls:sys_enter,context-switches -o "$1" \
      -p "$(tree_pids "$proxy_pid" | paste -sd,)" -- sleep "$DURATION" 2>/dev/null &
    stat_pid=$!
  fi
}
stat_read() {  # stat_read OUT EVENT: the count perf stat wrote for EVENT, or empty
  awk -F, -v e="$2" '$3 == e { print $1; exit }' "$1" 2>/dev/null || true
}
measure() {  # measure NAME: throughput (CONNS) and latency (1 connection) for both sizes
  local name=$1 size f
  for size in 1k 64k; do
    f="$tmp/wrk-$name-$size"
    local perf_pid=""
    if [ "$name" = cordon ]; then perf_start "$size"; fi
    local stat_pid=""
    stat_start "$f.stat"
    local ng0 px0="" pw0="" t0 b0 ng1 px1="" pw1="" t1 b1
    ng0=$(cpu_s "$nginx_pid")
    [ -n "$proxy_pid" ] && px0=$(cpu_s "$proxy_pid") && pw0=$(waited_s "$proxy_pid")
    t0=$(now_s); b0=$(machine_s $(column_cpus "$name"))
    wrk_run "$f" "$CONNS" "$THREADS" "$DURATION" "https://api.bench/$size"
    b1=$(machine_s $(column_cpus "$name")); t1=$(now_s)
    ng1=$(cpu_s "$nginx_pid")
    [ -n "$proxy_pid" ] && px1=$(cpu_s "$proxy_pid") && pw1=$(waited_s "$proxy_pid")
    [ -n "$perf_pid" ] && wait "$perf_pid" 2>/dev/null
    [ -n "$stat_pid" ] && wait "$stat_pid" 2>/dev/null
    PX_SYS[$name,$size]=$(stat_read "$f.stat" raw_syscalls:sys_enter)
    PX_CS[$name,$size]=$(stat_read "$f.stat" context-switches)
    REQS[$name,$size]=$(awk '/ requests in / { print $1; exit }' "$f")
    WALL[$name,$size]=$(diff_s "$t0" "$t1")
    WRK_CPU[$name,$size]=$(cat "$f.cpu")
    read -r TASKS[$name,$size] IRQ[$name,$size] STEAL[$name,$size] < <(awk -v a="$b0" -v b="$b1" \
      'BEGIN { split(a, x, " "); split(b, y, " ")
        printf "%.2f %.2f %.2f\n", y[1] - x[1], y[2] - x[2], y[3] - x[3] }')
    NG_CPU[$name,$size]=$(diff_s "$ng0" "$ng1")
    PX_CPU[$name,$size]="" PX_WAIT[$name,$size]=""
    if [ -n "$proxy_pid" ]; then
      PX_CPU[$name,$size]=$(diff_s "$px0" "$px1") PX_WAIT[$name,$size]=$(diff_s "$pw0" "$pw1")
    fi
    wrk_run "$f.lat" 1 1 "$LAT_DURATION" "https://api.bench/$size"
    RPS[$name,$size]=$(awk '/^Requests\/sec:/ { printf "%.0f", $2 }' "$f")
    MBS[$name,$size]=$(to_mbs "$(awk '/^Transfer\/sec:/ { print $2 }' "$f")")
    P50[$name,$size]=$(to_us "$(awk '$1 == "50%" { print $2 }' "$f")")
    P99[$name,$size]=$(to_us "$(awk '$1 == "99%" { print $2 }' "$f")")
    LAT[$name,$size]=$(to_us "$(awk '$1 == "50%" { print $2 }' "$f.lat")")
    if grep -q "Non-2xx\|Socket errors" "$f"; then
      note "$name $size: $(grep -h "Non-2xx\|Socket errors" "$f" | tr '\n' ' ')"
    fi
    [ -n "${RPS[$name,$size]}" ] || { note "$name $size: wrk failed: $(tail -3 "$f")"; RPS[$name,$size]=0; }
    note "$name $size: ${RPS[$name,$size]} req/s, ${MBS[$name,$size]} MB/s, p50 ${P50[$name,$size]} us (c=$CONNS), p50 ${LAT[$name,$size]} us (c=1)"
    local n=${REQS[$name,$size]:-0}
    note "$name $size: CPU us/req: proxy $(per_req_us "${PX_CPU[$name,$size]}" "$n"), wrk $(per_req_us "${WRK_CPU[$name,$size]}" "$n"), nginx $(per_req_us "${NG_CPU[$name,$size]}" "$n")"
  done
}

run_direct() {
  proxy_pid=""
  check_path direct "$tmp/up-ca.pem"
  measure direct
  # New TLS connections per second, without a proxy, for reference.
  wrk_run "$tmp/wrk-direct-conn" "$CONNS" "$THREADS" "$DURATION" https://api.bench/1k \
    -H "Connection: close"
  CONN_DIRECT=$(awk '/^Requests\/sec:/ { printf "%.0f", $2 }' "$tmp/wrk-direct-conn")
}

run_cordon() {
  start_cordon
  proxy_pid=$cordon_pid
  steer_tproxy 15001
  check_path cordon "$tmp/cordon-ca.pem"
  measure cordon
  local c0 c1
  c0=$(cpu_s "$cordon_pid")
  wrk_run "$tmp/wrk-cordon-conn" "$CONNS" "$THREADS" "$DURATION" https://api.bench/1k \
    -H "Connection: close"
  c1=$(cpu_s "$cordon_pid")
  CONN_CORDON=$(awk '/^Requests\/sec:/ { printf "%.0f", $2 }' "$tmp/wrk-cordon-conn")
  CONN_CORDON_CPU=$(per_req_us "$(diff_s "$c0" "$c1")" \
    "$(awk '/ requests in / { print $1; exit }' "$tmp/wrk-cordon-conn")")
  note "cordon: $CONN_CORDON new TLS connections/s, $CONN_CORDON_CPU us cordon CPU each (direct: $CONN_DIRECT/s)"
  in_gw curl -s http://127.0.0.1:15002/metrics >"$tmp/cordon-metrics.txt" || true
  unsteer
  stop_cordon
}

# ---- nginx as a plain TLS-terminating reverse proxy (the nginx and nginx-h2 columns) -----------
# One worker, one static certificate (self-signed for api.bench: the client trusts it as its
# CA), HTTP/1.1 keep-alive to the upstream with TLS session reuse (the only upstream protocol
# nginx's proxy speaks), no policy, no audit.
nginx_proxy_pid=""
start_nginx_proxy() {  # start_nginx_proxy NAME LISTEN ("ssl", "ssl http2"): steered, proxy_pid set
  local name=$1 listen=$2 d=$tmp/$1
  mkdir -p "$d/tmp"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
    -subj '/CN=api.bench' -addext 'subjectAltName=DNS:api.bench' -keyout "$d/key.pem" \
    -out "$d/cert.pem" 2>/dev/null
  chmod 755 "$d"
  cat >"$d/nginx.conf" <<EOF
worker_processes 1;
pid $d/nginx.pid;
error_log $d/nginx.err warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $d/tmp; proxy_temp_path $d/tmp; fastcgi_temp_path $d/tmp;
  uwsgi_temp_path $d/tmp; scgi_temp_path $d/tmp;
  upstream origin { server 198.51.100.10:443; keepalive 64; }
  server {
    listen 15443 $listen;  # every address: nft redirect delivers to 192.0.2.1
    ssl_certificate $d/cert.pem;
    ssl_certificate_key $d/key.pem;
    keepalive_requests 10000000;
    keepalive_timeout 300s;
    location / {
      proxy_pass https://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host api.bench;
      proxy_ssl_server_name on;
      proxy_ssl_name api.bench;
      proxy_ssl_verify on;
      proxy_ssl_trusted_certificate $tmp/up-ca.pem;
      proxy_ssl_session_reuse on;
    }
  }
}
EOF
  "${px_pin[@]}" ip netns exec "$gw" nginx -c "$d/nginx.conf" -g 'daemon off;' 2>"$d/log" &
  nginx_proxy_pid=$!
  pids+=("$nginx_proxy_pid")
  if ! wait_port "$gw" 127.0.0.1:15443; then
    SKIP[$name]="nginx proxy did not start: $(cat "$d/log" "$d/nginx.err" 2>/dev/null | tail -1)"
    kill_wait "$nginx_proxy_pid"; nginx_proxy_pid=""; return 1
  fi
  proxy_pid=$nginx_proxy_pid
  steer_redirect 15443
}
stop_nginx_proxy() { unsteer; kill_wait "$nginx_proxy_pid"; nginx_proxy_pid="" proxy_pid=""; }

run_nginx() {
  start_nginx_proxy nginx ssl || return 0
  check_path nginx "$tmp/nginx/cert.pem"
  measure nginx
  stop_nginx_proxy
}

run_squid() {
  if ! command -v squid >/dev/null || [ ! -x /usr/lib/squid/security_file_certgen ] ||
    ! squid -v | grep -q -- '--with-openssl'; then
    SKIP[squid]="squid-openssl not installed"; return
  fi
  local d=$tmp/squid
  mkdir -p "$d"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
    -subj '/CN=squid bench CA' -keyout "$d/ca.key" -out "$d/ca.pem" 2>/dev/null
  /usr/lib/squid/security_file_certgen -c -s "$d/ssl_db" -M 16MB >/dev/null
  cat >"$d/squid.conf" <<EOF
http_port 127.0.0.1:3128
https_port 3130 intercept ssl-bump tls-cert=$d/ca.pem tls-key=$d/ca.key generate-host-certificates=on dynamic_cert_mem_cache_size=16MB
sslcrtd_program /usr/lib/squid/security_file_certgen -s $d/ssl_db -M 16MB
sslcrtd_children 4
acl step1 at_step SslBump1
ssl_bump peek step1
ssl_bump bump all
tls_outgoing_options cafile=$tmp/up-ca.pem
http_access allow all
cache deny all
cache_mem 8 MB
hosts_file /etc/hosts
dns_nameservers 127.0.0.1
access_log none
cache_log $d/cache.log
pid_filename $d/squid.pid
coredump_dir $d
cache_effective_user proxy
workers 1
shutdown_lifetime 0 seconds
EOF
  chown -R proxy:proxy "$d"
  "${px_pin[@]}" ip netns exec "$gw" squid -N -f "$d/squid.conf" 2>"$d/stderr.log" &
  local pid=$!
  pids+=("$pid")
  if ! wait_port "$gw" 127.0.0.1:3128; then
    SKIP[squid]="squid did not start (see its cache.log)"; kill_wait "$pid"; return
  fi
  proxy_pid=$pid
  steer_redirect 3130
  check_path squid "$d/ca.pem"
  measure squid
  unsteer
  kill_wait "$pid"
}

run_mitmproxy() {
  if ! command -v mitmdump >/dev/null; then SKIP[mitmproxy]="mitmproxy not installed"; return; fi
  local d=$tmp/mitm
  mkdir -p "$d"
  "${px_pin[@]}" ip netns exec "$gw" mitmdump --mode transparent --listen-port 8080 --set confdir="$d" \
    --set ssl_verify_upstream_trusted_ca="$tmp/up-ca.pem" --set block_global=false \
    --set connection_strategy=lazy -q >"$d/log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  if ! wait_port "$gw" 127.0.0.1:8080; then
    SKIP[mitmproxy]="mitmdump did not start: $(tail -1 "$d/log")"; kill_wait "$pid"; return
  fi
  proxy_pid=$pid
  steer_redirect 8080
  check_path mitmproxy "$d/mitmproxy-ca-cert.pem"
  measure mitmproxy
  unsteer
  kill_wait "$pid"
}

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
run_idle() {  # a fresh cordon, IDLE intercepted connections held open, RSS per connection
  IDLE_PER=""
  [ "$IDLE" -gt 0 ] || return 0
  start_cordon
  steer_tproxy 15001
  check_path cordon-idle "$tmp/cordon-ca.pem"
  local serve_pid=$cordon_pid  # `ip netns exec` execs: the same process
  local before after client
  before=$(rss_kib "$serve_pid")
  "${ep_pin[@]}" ip netns exec "$sb" python3 "$here/idle_conns.py" --addr 198.51.100.10 --host api.bench \
    --ca "$tmp/cordon-ca.pem" --count "$IDLE" --sources "$(IFS=,; echo "${idle_sources[*]}")" \
    >"$tmp/idle.out" 2>"$tmp/idle.err" &
  client=$!
  pids+=("$client")
  for _ in $(seq 1200); do
    grep -q '^open' "$tmp/idle.out" 2>/dev/null && break
    kill -0 "$client" 2>/dev/null || break
    sleep 0.25
  done
  sleep 1  # let the gateway settle (all handshakes done, buffers released)
  after=$(rss_kib "$serve_pid")
  IDLE_OPEN=$(awk '/^open/ { print $2 }' "$tmp/idle.out")
  IDLE_FAILED=$(awk '/^open/ { print $4 }' "$tmp/idle.out")
  IDLE_SECONDS=$(awk '/^open/ && $5 == "in" { print $6 }' "$tmp/idle.out")
  IDLE_ACTIVE=$(in_gw curl -s http://127.0.0.1:15002/metrics | awk '$1 == "cordon_connections_active" { print $2 }')
  # Divide by what the gateway itself holds open (the client's count can include connections
  # the gateway already closed, e.g. at its idle timeout while the client was still opening).
  IDLE_HELD=$IDLE_OPEN
  if [ -n "$IDLE_ACTIVE" ] && [ -n "$IDLE_OPEN" ] && [ "$IDLE_ACTIVE" -lt "$IDLE_OPEN" ]; then
    IDLE_HELD=$IDLE_ACTIVE
  fi
  if [ -n "$IDLE_HELD" ] && [ "$IDLE_HELD" -gt 0 ]; then
    IDLE_PER=$(awk -v a="$after" -v b="$before" -v n="$IDLE_HELD" 'BEGIN { printf "%.1f", (a - b) / n }')
  fi
  IDLE_RSS="$before KiB -> $after KiB"
  note "idle: ${IDLE_OPEN:-0} open in ${IDLE_SECONDS:-?} s (${IDLE_FAILED:-?} failed; gateway says $IDLE_ACTIVE active), RSS $IDLE_RSS"
  [ -s "$tmp/idle.err" ] && note "idle client: $(head -5 "$tmp/idle.err")"
  kill_wait "$client"
  unsteer
  stop_cordon
}

# ---- HTTP/2 (h2load) ------------------------------------------------------------------------------
declare -A H2RPS H2REQS H2PX_CPU H2LD_CPU H2NG_CPU H2FAIL
h2load_run() {  # h2load_run OUTFILE URL: H2_CONNS x H2_STREAMS for DURATION s; its CPU s -> OUTFILE.cpu
  local out=$1 url=$2 sub
  (
    "${ep_pin[@]}" ip netns exec "$sb" h2load -c "$H2_CONNS" -m "$H2_STREAMS" -t 1 -D "$DURATION" \
      --warm-up-time=1 "$url" >"$out" 2>&1 &
    w=$!
    trap 'kill "$w" 2>/dev/null; exit 143' TERM
    wait "$w" || true
    times >"$out.times"
  ) &
  sub=$!
  pids+=("$sub")
  wait "$sub" || true
  awk 'NR == 2 { for (i = 1; i <= 2; i++) { split($i, a, "m"); s += a[1] * 60 + a[2] } }
    END { printf "%.2f", s }' "$out.times" >"$out.cpu"
}
h2_measure() {  # h2_measure NAME (proxy_pid: the proxy under test, empty for direct)
  local name=$1 size f ng0 ng1 px0="" px1=""
  for size in 1k 64k; do
    f="$tmp/h2load-$name-$size"
    local perf_pid=""
    if [ "$name" = cordon ]; then perf_start "h2-$size"; fi
    ng0=$(cpu_s "$nginx_pid")
    [ -n "$proxy_pid" ] && px0=$(cpu_s "$proxy_pid")
    h2load_run "$f" "https://api.bench/$size"
    ng1=$(cpu_s "$nginx_pid")
    [ -n "$proxy_pid" ] && px1=$(cpu_s "$proxy_pid")
    [ -n "$perf_pid" ] && wait "$perf_pid" 2>/dev/null
    H2RPS[$name,$size]=$(awk '/^finished in/ { gsub(",", ""); printf "%.0f", $4 }' "$f")
    H2REQS[$name,$size]=$(awk '/^requests:/ { print $8; exit }' "$f")
    H2FAIL[$name,$size]=$(awk '/^requests:/ { print $10 + $12 + $14; exit }' "$f")
    H2LD_CPU[$name,$size]=$(cat "$f.cpu")
    H2NG_CPU[$name,$size]=$(diff_s "$ng0" "$ng1")
    H2PX_CPU[$name,$size]=""
    [ -n "$proxy_pid" ] && H2PX_CPU[$name,$size]=$(diff_s "$px0" "$px1")
    grep -q "Application protocol: h2" "$f" ||
      note "h2 $name $size: h2load did not negotiate h2: $(grep -i 'protocol' "$f" | head -1)"
    [ -n "${H2RPS[$name,$size]}" ] || { note "h2 $name $size: h2load failed: $(tail -3 "$f")"; H2RPS[$name,$size]=0; }
    note "h2 $name $size: ${H2RPS[$name,$size]} req/s, ${H2REQS[$name,$size]:-0} succeeded, ${H2FAIL[$name,$size]:-?} failed; CPU us/req proxy $(per_req_us "${H2PX_CPU[$name,$size]}" "${H2REQS[$name,$size]:-0}")"
  done
}
run_h2() {
  note "== h2 direct"
  proxy_pid=""
  h2_measure direct
  if [[ " $PEERS " == *" cordon "* ]]; then
    note "== h2 cordon"
    start_cordon
    proxy_pid=$cordon_pid
    steer_tproxy 15001
    h2_measure cordon
    in_gw curl -s http://127.0.0.1:15002/metrics >"$tmp/cordon-h2-metrics.txt" || true
    unsteer
    stop_cordon
  fi
  note "== h2 nginx-h2 (TLS-terminating h2 proxy)"
  start_nginx_proxy nginx-h2 "ssl http2" || return 0
  h2_measure nginx-h2
  stop_nginx_proxy
}

CONN_DIRECT=0 CONN_CORDON=0 CONN_CORDON_CPU="-"
for p in $PEERS; do
  note "== $p"
  case $p in
    direct) run_direct ;;
    cordon) run_cordon ;;
    nginx) run_nginx ;;
    squid) run_squid ;;
    mitmproxy) run_mitmproxy ;;
    *) die "unknown peer $p" ;;
  esac
done
if [ "$H2" = 1 ]; then
  if command -v h2load >/dev/null; then run_h2; else SKIP[h2]="h2load not installed (nghttp2-client)"; fi
fi
run_idle

# ---- table -------------------------------------------------------------------------------------
printf '\ncordon peers benchmark: keep-alive HTTPS GET through each path, wrk %s threads, %s connections, %s s\n' \
  "$THREADS" "$CONNS" "$DURATION"
printf 'latency (c=1): one connection, %s s; load average at start %s, at end %s\n' \
  "$LAT_DURATION" "$LOAD_START" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf 'CPU layout %s; cordon --threads %s; upstream nginx 2 workers, nginx proxy columns 1 worker\n' "$LAYOUT" "$GW_THREADS"
[ -n "$LAYOUT_NOTE" ] && printf 'note: %s\n' "$LAYOUT_NOTE"
printf 'CPU us/req: user+sys time of the process (tree) during the throughput run / requests completed;\n'
printf 'CPU %%: of one CPU over that run; proxy waited: runnable, not running. On the CPUs the column uses:\n'
printf 'softirq, packet work charged to no process; others+steal, every other process and the hypervisor\n'
printf '(how to read them: bench/gateway/README.md)\n\n'
cols=(direct cordon nginx squid mitmproxy)
printf '%-30s' ""; for c in "${cols[@]}"; do printf '%14s' "$c"; done; printf '\n'
row() {  # row LABEL FUNC
  printf '%-30s' "$1"
  for c in "${cols[@]}"; do
    if [ -n "${SKIP[$c]:-}" ] || ! [[ " $PEERS " == *" $c "* ]]; then printf '%14s' SKIPPED; continue; fi
    printf '%14s' "$($2 "$c")"
  done
  printf '\n'
}
for size in 1k 64k; do
  label=$([ $size = 1k ] && echo "1 KiB" || echo "64 KiB")
  f_rps() { echo "${RPS[$1,$size]:-0}"; }
  f_ratio() {
    awk -v a="${RPS[$1,$size]:-0}" -v b="${RPS[direct,$size]:-0}" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }'
  }
  f_mbs() { echo "${MBS[$1,$size]:-0}"; }
  f_p50() { echo "${P50[$1,$size]:-0}"; }
  f_p99() { echo "${P99[$1,$size]:-0}"; }
  f_lat() { echo "${LAT[$1,$size]:-0}"; }
  f_added() {
    if [ "$1" = direct ]; then echo "-"; else echo $(( ${LAT[$1,$size]:-0} - ${LAT[direct,$size]:-0} )); fi
  }
  row "$label req/s" f_rps
  row "$label ratio to direct" f_ratio
  row "$label MB/s" f_mbs
  row "$label p50 us (c=$CONNS)" f_p50
  row "$label p99 us (c=$CONNS)" f_p99
  row "$label p50 us (c=1)" f_lat
  row "$label added p50 us (c=1)" f_added
  f_pxcpu() { per_req_us "${PX_CPU[$1,$size]:-}" "${REQS[$1,$size]:-0}"; }
  f_pxbusy() { pct "${PX_CPU[$1,$size]:-}" "${WALL[$1,$size]:-0}"; }
  f_pxwait() { pct "${PX_WAIT[$1,$size]:-}" "${WALL[$1,$size]:-0}"; }
  f_wrkcpu() { per_req_us "${WRK_CPU[$1,$size]:-}" "${REQS[$1,$size]:-0}"; }
  f_ngcpu() { per_req_us "${NG_CPU[$1,$size]:-}" "${REQS[$1,$size]:-0}"; }
  f_ep_s() { add_s "${WRK_CPU[$1,$size]:-0}" "${NG_CPU[$1,$size]:-0}"; }
  f_epcpu() { per_req_us "$(f_ep_s "$1")" "${REQS[$1,$size]:-0}"; }
  f_epbusy() { pct "$(f_ep_s "$1")" "${WALL[$1,$size]:-0}"; }
  f_irq() { pct "${IRQ[$1,$size]:-}" "${WALL[$1,$size]:-0}"; }
  f_others() {  # other processes' time (compilers, kthreads) on the column's CPUs, plus VM steal
    awk -v m="${TASKS[$1,$size]:-}" -v st="${STEAL[$1,$size]:-0}" -v p="${PX_CPU[$1,$size]:-0}" \
      -v a="${WRK_CPU[$1,$size]:-0}" -v b="${NG_CPU[$1,$size]:-0}" -v w="${WALL[$1,$size]:-0}" \
      'BEGIN { if (m == "" || w <= 0) { print "-"; exit }
        o = 100 * (m - p - a - b + st) / w; printf "%.0f", (o < 0 ? 0 : o) }'
  }
  row "$label proxy CPU us/req" f_pxcpu
  f_count_per_req() {  # f_count_per_req COUNT REQUESTS (wrk's count over its whole run, perf's over DURATION)
    awk -v c="$1" -v n="$2" 'BEGIN { if (c != "" && n > 0) printf "%.1f", c / n; else print "-" }'
  }
  f_pxsys() { f_count_per_req "${PX_SYS[$1,$size]:-}" "${REQS[$1,$size]:-0}"; }
  f_pxcs() { f_count_per_req "${PX_CS[$1,$size]:-}" "${REQS[$1,$size]:-0}"; }
  if [ "${SYSCALLS:-1}" = 1 ]; then
    row "$label proxy syscalls/req" f_pxsys
    row "$label proxy ctx switches/req" f_pxcs
  fi
  row "$label endpoints CPU us/req" f_epcpu
  row "$label   wrk CPU us/req" f_wrkcpu
  row "$label   nginx CPU us/req" f_ngcpu
  row "$label proxy CPU %" f_pxbusy
  row "$label proxy waited for CPU %" f_pxwait
  row "$label endpoints CPU %" f_epbusy
  row "$label softirq CPU %" f_irq
  row "$label others+steal CPU %" f_others
done
for c in "${cols[@]}"; do [ -n "${SKIP[$c]:-}" ] && printf '%s: SKIPPED (%s)\n' "$c" "${SKIP[$c]}"; done
printf '\nnew TLS connections/s (Connection: close, warm leaf cache): cordon %s (%s us cordon CPU each), direct %s\n' \
  "$CONN_CORDON" "$CONN_CORDON_CPU" "$CONN_DIRECT"
if [ "$IDLE" -gt 0 ]; then
  printf 'idle intercepted connections: %s opened in %s s (%s failed), %s held by cordon, RSS %s = %s KiB per connection\n' \
    "${IDLE_OPEN:-0}" "${IDLE_SECONDS:-?}" "${IDLE_FAILED:-?}" "${IDLE_HELD:-?}" "${IDLE_RSS:-?}" "${IDLE_PER:-?}"
fi

# ---- goals (issue 4) -----------------------------------------------------------------------------
verdict() { if awk "BEGIN { exit !($1) }"; then echo PASS; else echo FAIL; fi; }
printf '\ngoals (CPU layout %s):\n' "$CPUS"
if [[ " $PEERS " == *" cordon "* && " $PEERS " == *" direct "* ]]; then
  for size in 1k 64k; do
    r=$(awk -v a="${RPS[cordon,$size]:-0}" -v b="${RPS[direct,$size]:-1}" 'BEGIN { printf "%.2f", a / b }')
    printf '  cordon >= 0.50x direct throughput, %-4s %6sx  %s\n' "$size" "$r" "$(verdict "$r >= 0.5")"
    a=$(( ${LAT[cordon,$size]:-0} - ${LAT[direct,$size]:-0} ))
    printf '  added median latency < 150 us,    %-4s %6s us %s\n' "$size" "$a" "$(verdict "$a < 150")"
  done
fi
if [[ " $PEERS " == *" squid "* && -z "${SKIP[squid]:-}" ]]; then
  for size in 1k 64k; do
    r=$(awk -v a="${RPS[cordon,$size]:-0}" -v b="${RPS[squid,$size]:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print 0 }')
    printf '  cordon >= 3x squid,               %-4s %6sx  %s\n' "$size" "$r" "$(verdict "$r >= 3")"
  done
fi
cpu_ratio() {  # cpu_ratio PEER SIZE: cordon's proxy CPU per request / PEER's ("" if unknown)
  local a b
  a=$(per_req_us "${PX_CPU[cordon,$2]:-}" "${REQS[cordon,$2]:-0}")
  b=$(per_req_us "${PX_CPU[$1,$2]:-}" "${REQS[$1,$2]:-0}")
  awk -v a="$a" -v b="$b" 'BEGIN { if (a != "-" && b != "-" && b > 0) printf "%.2f", a / b }'
}
if [[ " $PEERS " == *" cordon "* && " $PEERS " == *" nginx "* && -z "${SKIP[nginx]:-}" ]]; then
  for size in 1k 64k; do
    goal=$([ $size = 1k ] && echo 1.15 || echo 1.00)
    r=$(cpu_ratio nginx $size)
    printf '  cordon CPU/req <= %sx nginx CPU,  %-4s %6sx  %s\n' "$goal" "$size" "${r:--}" \
      "$(if [ -n "$r" ]; then verdict "$r <= $goal"; else echo -; fi)"
  done
fi
if [[ " $PEERS " == *" cordon "* && " $PEERS " == *" squid "* && -z "${SKIP[squid]:-}" ]]; then
  r=$(cpu_ratio squid 64k)
  printf '  cordon CPU/req <= 1/3 squid CPU,   64k  %6sx  %s\n' "${r:--}" \
    "$(if [ -n "$r" ]; then verdict "$r <= 1 / 3"; else echo -; fi)"
fi
if [ -n "${IDLE_PER:-}" ]; then
  printf '  idle connection < 64 KiB RSS,          %6s KiB %s\n' "$IDLE_PER" \
    "$(verdict "$IDLE_PER < 64 && ${IDLE_HELD:-0} >= $IDLE * 0.95")"
fi
for c in "${cols[@]}"; do  # a column that other processes disturbed: its req/s and latency are low
  [[ " $PEERS " == *" $c "* && -z "${SKIP[$c]:-}" ]] || continue
  for size in 1k 64k; do
    if [ "$c" = direct ]; then
      o=$(f_others direct)
      if [ "$o" != "-" ] && [ "$o" -ge 25 ]; then
        printf '  note: direct %s: other processes used %s%% of a CPU on its CPUs: direct understated\n' "$size" "$o"
      fi
    else
      # (it also waits for its own threads and for ksoftirqd: only with others busy is it theirs)
      w=$(f_pxwait "$c") o=$(f_others "$c")
      if [ "$w" != "-" ] && [ "$o" != "-" ] && [ "$w" -ge 10 ] && [ "$o" -ge 25 ]; then
        printf '  note: %s %s: the proxy waited for a CPU %s%% of the run while other processes used %s%% of one: understated\n' \
          "$c" "$size" "$w" "$o"
      fi
    fi
  done
done

# ---- HTTP/2 table ------------------------------------------------------------------------------
if [ "$H2" = 1 ] && [ -z "${SKIP[h2]:-}" ]; then
  printf '\nHTTP/2: h2load -c %s -m %s (%s streams in flight), %s s per run; CPU us/req as above\n' \
    "$H2_CONNS" "$H2_STREAMS" "$((H2_CONNS * H2_STREAMS))" "$DURATION"
  h2cols=(direct cordon nginx-h2)
  printf '%-32s' ""; for c in "${h2cols[@]}"; do printf '%14s' "$c"; done; printf '\n'
  h2row() {  # h2row LABEL FUNC
    printf '%-32s' "$1"
    for c in "${h2cols[@]}"; do
      if [ -n "${SKIP[$c]:-}" ] || { [ "$c" = cordon ] && ! [[ " $PEERS " == *" cordon "* ]]; }; then
        printf '%14s' SKIPPED; continue
      fi
      printf '%14s' "$($2 "$c")"
    done
    printf '\n'
  }
  for size in 1k 64k; do
    label=$([ $size = 1k ] && echo "1 KiB" || echo "64 KiB")
    g_rps() { echo "${H2RPS[$1,$size]:-0}"; }
    g_ratio() {
      awk -v a="${H2RPS[$1,$size]:-0}" -v b="${H2RPS[direct,$size]:-0}" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }'
    }
    g_fail() { echo "${H2FAIL[$1,$size]:-0}"; }
    g_pxcpu() { per_req_us "${H2PX_CPU[$1,$size]:-}" "${H2REQS[$1,$size]:-0}"; }
    g_ldcpu() { per_req_us "${H2LD_CPU[$1,$size]:-}" "${H2REQS[$1,$size]:-0}"; }
    g_ngcpu() { per_req_us "${H2NG_CPU[$1,$size]:-}" "${H2REQS[$1,$size]:-0}"; }
    g_h1cpu() {  # the same proxy's CPU per HTTP/1.1 request (the wrk run above)
      if [ "$1" = cordon ] && [ -n "${PX_CPU[cordon,$size]:-}" ]; then
        per_req_us "${PX_CPU[cordon,$size]}" "${REQS[cordon,$size]:-0}"
      else echo "-"; fi
    }
    g_cpuratio() {
      local a b
      a=$(g_pxcpu "$1") b=$(g_h1cpu "$1")
      awk -v a="$a" -v b="$b" 'BEGIN { if (a != "-" && b != "-" && b > 0) printf "%.2fx", a / b; else print "-" }'
    }
    h2row "$label h2 req/s" g_rps
    h2row "$label h2 ratio to direct" g_ratio
    h2row "$label h2 failed requests" g_fail
    h2row "$label h2 proxy CPU us/req" g_pxcpu
    h2row "$label HTTP/1.1 proxy CPU us/req" g_h1cpu
    h2row "$label h2 / HTTP/1.1 proxy CPU" g_cpuratio
    h2row "$label h2load CPU us/req" g_ldcpu
    h2row "$label nginx CPU us/req" g_ngcpu
  done
  [ -n "${SKIP[nginx-h2]:-}" ] && printf 'nginx-h2: SKIPPED (%s)\n' "${SKIP[nginx-h2]}"
  if [[ " $PEERS " == *" cordon "* ]]; then
    printf '\nh2 goals:\n'
    for size in 1k 64k; do
      r=$(awk -v a="${H2RPS[cordon,$size]:-0}" -v b="${H2RPS[direct,$size]:-1}" 'BEGIN { printf "%.2f", a / b }')
      printf '  cordon h2 >= 0.50x direct h2 req/s,     %-4s %6sx     %s\n' "$size" "$r" "$(verdict "$r >= 0.5")"
      a=$(per_req_us "${H2PX_CPU[cordon,$size]:-}" "${H2REQS[cordon,$size]:-0}")
      b=$(per_req_us "${PX_CPU[cordon,$size]:-}" "${REQS[cordon,$size]:-0}")
      if [ "$a" != "-" ] && [ "$b" != "-" ]; then v=$(verdict "$a <= $b"); else v="-"; fi
      printf '  cordon CPU per h2 req <= per HTTP/1.1,  %-4s %s vs %s us %s\n' "$size" "$a" "$b" "$v"
    done
  fi
elif [ -n "${SKIP[h2]:-}" ]; then
  printf '\nh2: SKIPPED (%s)\n' "${SKIP[h2]}"
fi
