#!/usr/bin/env bash
# fair-share.sh — the farm's fair share as issue 46's bar checks it, at full size.
#
#   scripts/fair-share.sh            # the admission queue on (the default)
#   scripts/fair-share.sh off        # today's first come first served (--fair-share=false)
#
# Runs serve/fairshare_test.go's TestFairShareInteractiveBesideASubagentFlood with
# WARDEN_FAIR_SHARE_FULL=1: `warden serve --engine sim --dp 2 --max-num-seqs 4 --
# --max-model-len 16384 --sim-time-scale 10`; three interactive Claude-Code-like
# conversations (streamed /v1/messages, X-Claude-Code-Session-Id) alone for 40 s,
# then for 60 s beside one session whose sixteen subagents (x-claude-code-agent-id)
# send 2,500-token prompts without pause. It passes when the interactive turns'
# time to first token (p95) beside the flood is at most 0.3 x the flood's own and
# the flood finishes at least 8 requests; the log line gives the numbers.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "off" ]; then
  export WARDEN_FAIR_SHARE=false
fi
WARDEN_FAIR_SHARE_FULL=1 exec go test ./serve/ -run '^TestFairShareInteractiveBesideASubagentFlood$' -count=1 -v -timeout 10m
