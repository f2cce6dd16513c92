#!/usr/bin/env bash
# agent-farm.sh — start a warden and N headless agent loops pointed at it.
#
#   scripts/agent-farm.sh -n 8 -p prompts.txt -- --model Qwen/Qwen3-4B-Instruct-2507 --dp 4
#   scripts/agent-farm.sh -n 4 -p prompts.txt -- --model demo --dp 4 --engine sim
#
# Everything after -- goes to `warden serve`. Each agent loop takes the next line
# of the prompts file and runs the agent command once per line (a fresh
# conversation each time, so each gets its own session id and the warden keeps
# it on one replica). Ctrl-C stops the agents, then the warden (which prints its
# cache-hit summary).
#
# Options (and environment variables):
#   -n N          number of concurrent agent loops            (FARM_AGENTS, default 4)
#   -p FILE       prompts, one per line                       (FARM_PROMPTS, required)
#   -a CMD        agent command; the prompt is its last arg   (FARM_AGENT_CMD, default "claude -p")
#   -w PATH       warden binary                               (FARM_WARDEN, default: go run .)
#   -o DIR        where agent outputs go                      (FARM_OUT, default ./farm-<time>)
#   -P PORT       warden port                                 (WARDEN_PORT, default 8000)
set -euo pipefail

agents=${FARM_AGENTS:-4}
prompts=${FARM_PROMPTS:-}
agent_cmd=${FARM_AGENT_CMD:-claude -p}
warden=${FARM_WARDEN:-}
out=${FARM_OUT:-farm-$(date +%Y%m%d-%H%M%S)}
port=${WARDEN_PORT:-8000}

usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while getopts "n:p:a:w:o:P:h" opt; do
  case $opt in
    n) agents=$OPTARG ;; p) prompts=$OPTARG ;; a) agent_cmd=$OPTARG ;;
    w) warden=$OPTARG ;; o) out=$OPTARG ;; P) port=$OPTARG ;; h) usage 0 ;; *) usage 2 ;;
  esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
[ -n "$prompts" ] && [ -r "$prompts" ] || { echo "agent-farm: -p FILE (one prompt per line) is required" >&2; exit 2; }
[ $# -gt 0 ] || { echo "agent-farm: give warden serve's arguments after --, e.g. -- --model M --dp 4" >&2; exit 2; }

if [ -z "$warden" ]; then
  here=$(cd "$(dirname "$0")/.." && pwd)
  warden="$here/warden"
  (cd "$here" && go build -o "$warden" .) || { echo "agent-farm: go build failed" >&2; exit 1; }
fi
mkdir -p "$out"
url="http://127.0.0.1:$port"

"$warden" serve --port "$port" "$@" >"$out/warden.out" 2>"$out/warden.err" &
warden_pid=$!
pids=()
cleanup() {
  trap - INT TERM EXIT
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait "${pids[@]}" 2>/dev/null || true
  kill -INT "$warden_pid" 2>/dev/null || true
  wait "$warden_pid" 2>/dev/null || true
  echo "agent-farm: warden summary:" >&2
  tail -n 40 "$out/warden.err" >&2 || true
}
trap cleanup INT TERM EXIT

echo "agent-farm: waiting for the warden at $url (log: $out/warden.err)" >&2
"$warden" wait --url "$url" --timeout "${FARM_WAIT:-20m}" || { tail -n 30 "$out/warden.err" >&2; exit 1; }

export ANTHROPIC_BASE_URL=$url OPENAI_BASE_URL=$url/v1
export ANTHROPIC_API_KEY=${ANTHROPIC_API_KEY:-sk-local} OPENAI_API_KEY=${OPENAI_API_KEY:-sk-local}
export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=${CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC:-1}

total=$(wc -l <"$prompts")
for ((i = 0; i < agents; i++)); do
  (
    line=0
    while IFS= read -r prompt; do
      line=$((line + 1))
      [ $(((line - 1) % agents)) -eq "$i" ] || continue
      [ -n "$prompt" ] || continue
      # shellcheck disable=SC2086 # agent_cmd is a command line on purpose
      $agent_cmd "$prompt" >"$out/agent-$i-$line.out" 2>&1 || echo "agent $i: prompt $line failed" >&2
    done <"$prompts"
  ) &
  pids+=($!)
done
echo "agent-farm: $agents agents on $total prompts; outputs in $out; status: $warden status --url $url" >&2
wait "${pids[@]}"
