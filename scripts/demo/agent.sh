#!/usr/bin/env bash
# A stand-in for an AI agent inside the sandbox (scripts/demo-egress.sh runs it in the sandbox's
# network namespace). It has no proxy settings and no secrets: names resolve through the
# sandbox's hosts file to an arbitrary address, and the host steers port 443 into the gateway.
# It holds only the gateway's root certificate and, for GitHub, a revocable proxy token.
# Usage: agent.sh ACTION   (ACTION: model | github | github-no-token | delete | other-host |
#                           fronting | upload)
# Prints one line "HTTP <code>" (000 when the connection was refused) and keeps the response
# body in $AGENT_OUT/<action>.body.
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
  other-host)  # a host in no destination of the profile
    curl "${args[@]}" https://pastebin.com/api/api_post.php ;;
  fronting)  # TLS to an allowed name, HTTP Host of another (domain fronting)
    curl "${args[@]}" -X POST -H 'Host: api.anthropic.com' -H 'content-type: application/json' \
      -d '{"model":"demo","messages":[]}' https://api.github.com/v1/messages ;;
  upload)  # an explicitly denied route on an allowed host
    curl "${args[@]}" -X POST -F 'file=@/etc/hostname' https://api.anthropic.com/v1/files ;;
  *) echo "agent.sh: unknown action $action" >&2; exit 2 ;;
esac
exit 0
