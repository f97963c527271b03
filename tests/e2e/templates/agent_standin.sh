#!/bin/sh
# Stand-in for cordon-agent in template tests while the agent is not built: answers --version
# the way the agent does, and nothing else.
case "${1:-}" in
  --version) echo "cordon-agent stand-in (envd 0.6.13)" ;;
  *) echo "cordon-agent stand-in: only --version" >&2; exit 2 ;;
esac
