#!/usr/bin/env bash
# yardstick.sh — the routing comparison in steady state: every A/B pair on
# every load, each repeated, one fresh warden per run (scripts/bench-ab.sh).
#
#   scripts/yardstick.sh                 # off,adaptive and sticky,adaptive on reference and agent loads, 2 repeats
#   YARD_PAIRS=sticky,adaptive YARD_LOADS=agent YARD_SERVE_EXTRA="--subagents parent" scripts/yardstick.sh
#
# Each run is `warden bench --ab A,B --warmup 3m` (a warm-up per stage: the
# measured window opens once the stage's sessions are past their first turns,
# so a row does not depend on the stages before it) against the simulator of
# the reference rig at BENCH_SCALE (scripts/bench-ab.sh's defaults). At the
# defaults one run takes ~6 minutes, the whole set ~50. Results go to
# YARD_OUT/<load>-<A>-<B>-<repeat>/ (table.md, summary.csv, ...), and
# YARD_OUT/index.txt lists them in order.
#
# Environment:
#   YARD_PAIRS        space-separated A,B pairs        (default "off,adaptive sticky,adaptive")
#   YARD_LOADS        space-separated bench --load values (default "reference agent")
#   YARD_REPEATS      runs per pair and load           (default 2)
#   YARD_WARMUP       bench --warmup                   (default 3m)
#   YARD_BENCH_EXTRA  more bench flags                 (default none)
#   YARD_SERVE_EXTRA  more serve flags, e.g. "--subagents parent" (default none)
#   YARD_OUT          results folder                   (default bench-results/yardstick-<time>)
#   WARDEN_BIN        warden binary                    (default: built from this checkout once)
#   BENCH_*           passed on to scripts/bench-ab.sh
set -euo pipefail

case "${1:-}" in -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac

here=$(cd "$(dirname "$0")/.." && pwd)
pairs=${YARD_PAIRS:-off,adaptive sticky,adaptive}
loads=${YARD_LOADS:-reference agent}
repeats=${YARD_REPEATS:-2}
warmup=${YARD_WARMUP:-3m}
out=${YARD_OUT:-bench-results/yardstick-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"

warden=${WARDEN_BIN:-}
if [ -z "$warden" ]; then
  bin=$(mktemp -d)
  trap 'rm -rf "$bin"' EXIT
  warden=$bin/warden
  (cd "$here" && go build -o "$warden" .) || { echo "yardstick: go build failed" >&2; exit 1; }
fi

n=0
total=$(( $(wc -w <<<"$pairs") * $(wc -w <<<"$loads") * repeats ))
started=$SECONDS
for rep in $(seq 1 "$repeats"); do
  for load in $loads; do
    for pair in $pairs; do
      n=$((n + 1))
      dir=$out/$load-${pair/,/-}-$rep
      echo "yardstick: run $n/$total: $load load, $pair, repeat $rep -> $dir ($(( (SECONDS - started) / 60 )) min so far)" >&2
      WARDEN_BIN=$warden BENCH_OUT=$dir BENCH_AB=$pair \
        BENCH_SERVE_ARGS="--max-num-seqs 32 ${YARD_SERVE_EXTRA:-}" \
        BENCH_ARGS="--load $load --warmup $warmup ${YARD_BENCH_EXTRA:-}" \
        "$here/scripts/bench-ab.sh" >"$dir.log" 2>&1 || { echo "yardstick: run $n failed; see $dir.log" >&2; tail -5 "$dir.log" >&2; exit 1; }
      echo "$dir" >>"$out/index.txt"
      cat "$dir/table.md"
    done
  done
done
echo "yardstick: $total runs in $(( (SECONDS - started) / 60 )) min; results in $out" >&2
