#!/usr/bin/env bash
# bench-ab.sh — start a warden and run the reference A/B benchmark against it.
#
#   scripts/bench-ab.sh                                   # simulator, reference profile, 4 replicas
#   scripts/bench-ab.sh Qwen/Qwen3-4B-Instruct-2507 -- --max-model-len 40000   # real GPUs (vLLM)
#
# Without a model the warden runs the built-in simulator (`--engine sim`) on the
# reference rig's fitted profile (RTX A4000 + Qwen3-4B, docs/calibration.md) at
# time scale BENCH_SCALE, and the bench adds the reference client's internet
# round trip (BENCH_RTT); the bench reads every time and rate back in simulated
# seconds, so a 5-stage x 3-minute x 2-variant run takes ~3.5 minutes at scale 10.
# With a model the warden starts vLLM on the GPUs and the bench runs in real
# time. Arguments after -- go to the engines verbatim.
#
# The bench runs `warden bench --ab off,sticky` (all stages "off", then all
# "sticky", like the reference) and writes table.md, summary.csv, summary.json,
# turns.csv and ttfb.svg to the results folder; the table is printed at the end.
#
# Environment:
#   BENCH_DP          data-parallel replicas                      (default 4)
#   BENCH_SCALE       simulator time scale (sim only)             (default 10)
#   BENCH_STREAM      simulator --stream-interval (sim only)      (default 4)
#   BENCH_PROFILE     simulator --sim-profile (sim only)          (default a4000-qwen3-4b-2507-bf16-vllm026-fit)
#   BENCH_RTT         bench --client-rtt (sim only)               (default 250ms, the reference's remote client)
#   BENCH_SERVE_ARGS  extra `warden serve` flags (set but empty: none) (default "--max-num-seqs 32", the reference's)
#   BENCH_AB          the two policies compared, A,B                (default off,sticky)
#   BENCH_ARGS        extra `warden bench` flags, e.g. "--stages 4,8 --stage 1m --reset-cache --alternate"
#   BENCH_OUT         results folder                              (default bench-results/ab-<time>)
#   BENCH_WAIT_S      seconds to wait for the warden to get ready (default 900)
#   WARDEN_PORT       warden port                                 (default 8000)
#   WARDEN_BIN        warden binary                               (default: built from this checkout)
set -euo pipefail

usage() { sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
case "${1:-}" in -h|--help) usage 0 ;; esac

model=""
if [ $# -gt 0 ] && [ "$1" != "--" ]; then model=$1; shift; fi
[ "${1:-}" = "--" ] && shift
engine_args=("$@")

dp=${BENCH_DP:-4}
scale=${BENCH_SCALE:-10}
stream=${BENCH_STREAM:-4}
profile=${BENCH_PROFILE:-a4000-qwen3-4b-2507-bf16-vllm026-fit}
rtt=${BENCH_RTT:-250ms}
serve_args=${BENCH_SERVE_ARGS---max-num-seqs 32}
bench_args=${BENCH_ARGS:-}
port=${WARDEN_PORT:-8000}
out=${BENCH_OUT:-bench-results/ab-$(date +%Y%m%d-%H%M%S)}
warden=${WARDEN_BIN:-}

here=$(cd "$(dirname "$0")/.." && pwd)
built=""
if [ -z "$warden" ]; then
  built=$(mktemp -d)
  warden=$built/warden
  (cd "$here" && go build -o "$warden" .) || { echo "bench-ab: go build failed" >&2; exit 1; }
fi
mkdir -p "$out"
url="http://127.0.0.1:$port"

if [ -z "$model" ]; then
  # Simulator: the reference model name, the sim's time scale after --.
  serve=(serve --model Qwen/Qwen3-4B-Instruct-2507 --dp "$dp" --engine sim --port "$port")
  engine_args=(--sim-time-scale "$scale" --stream-interval "$stream" --sim-profile "$profile" "${engine_args[@]}")
  time_scale=$scale
  bench_args="--client-rtt $rtt $bench_args"
else
  serve=(serve --model "$model" --dp "$dp" --port "$port")
  time_scale=1
fi
# shellcheck disable=SC2206 # word splitting of the *_ARGS strings is intended
serve+=($serve_args)

echo "bench-ab: $warden ${serve[*]} -- ${engine_args[*]}" >&2
# Dev mode: vLLM (and the simulator) serve /reset_prefix_cache only with it,
# which --reset-cache in BENCH_ARGS needs; the engines listen on loopback.
VLLM_SERVER_DEV_MODE=1 "$warden" "${serve[@]}" -- "${engine_args[@]}" >"$out/warden.out" 2>"$out/warden.err" &
warden_pid=$!
cleanup() {
  trap - INT TERM EXIT
  if kill -0 "$warden_pid" 2>/dev/null; then
    kill -INT "$warden_pid" 2>/dev/null || true
    wait "$warden_pid" 2>/dev/null || true
  fi
  [ -z "$built" ] || rm -rf "$built"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Wait for readiness in short slices so a warden that exits early fails fast.
deadline=$((SECONDS + ${BENCH_WAIT_S:-900}))
until "$warden" wait --url "$url" --timeout 10s 2>/dev/null; do
  if ! kill -0 "$warden_pid" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
    echo "bench-ab: the warden did not get ready; its log:" >&2
    tail -n 40 "$out/warden.err" >&2 || true
    exit 1
  fi
done

# shellcheck disable=SC2086
"$warden" bench --url "$url" --ab "${BENCH_AB:-off,sticky}" --time-scale "$time_scale" --out "$out" $bench_args

# Engine facts for the record: each replica's /metrics (engine-N.metrics:
# preemptions, prompt and generation tokens) and /version (engines.json; the
# simulator reports sim.lag_seconds there: simulated time lost because the
# CPU fell behind).
if command -v jq >/dev/null; then
  i=0
  for u in $(curl -fsS "$url/warden/status" | jq -r '.replicas[].url'); do
    curl -fsS "$u/metrics" >"$out/engine-$i.metrics" 2>/dev/null || true
    i=$((i + 1))
    curl -fsS "$u/version" || echo '{}'
  done | jq -s '.' >"$out/engines.json" || true
  jq -r '.[] | select(.sim) | "bench-ab: engine busy \(.sim.busy_seconds|floor) s, lag \(.sim.lag_seconds*1000|floor/1000) s (simulated)" +
    (if .sim.lag_seconds > 0.02 * .sim.busy_seconds then " -- WARNING: the simulator fell behind its time scale (CPU);" +
      " these results are not trustworthy: rerun on an idle machine or with a lower BENCH_SCALE" else "" end)' \
    "$out/engines.json" >&2 || true
fi
echo "bench-ab: results in $out (warden log: $out/warden.err)" >&2
