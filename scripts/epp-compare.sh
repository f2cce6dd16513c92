#!/usr/bin/env bash
# epp-compare.sh — the warden's endpoint picker behind Envoy, measured side by
# side with Envoy's own balancing and with `warden route` (docs/benchmarks.md,
# "warden epp behind Envoy").
#
#   scripts/envoy.sh && scripts/epp-compare.sh
#
# Two simulated "boxes" of two replicas each: four `warden sim serve` engines
# (the reference rig's fitted profile, --enable-prompt-tokens-details, --max-model-len auto,
# --max-num-seqs 32, --stream-interval 4, time scale CMP_SCALE), all on this host;
# the picker and `warden route` are told --max-num-seqs 32 (the simulator does
# not say it). The sides:
#   epp    Envoy + `warden epp` (the bootstrap `warden epp envoy-config` prints)
#   envoy  Envoy alone, least-request (`warden epp envoy-config --without-picker`)
#   route  `warden route` with the four engines
# Each side runs the reference load (`warden bench --load reference --ab none
# --stages 4,8,16`, sessions carried from stage to stage) CMP_RUNS times, on
# fresh engines every time (their caches empty), the sides alternating
# (epp, envoy, route, then route, envoy, epp, ...). The hit column comes from
# the engines' own vLLM counters, summed (`warden bench --engines`): through
# Envoy the target's /metrics reaches one engine at random. The time scale is
# learned from the target (the simulator's gauge, through Envoy from one
# engine). Then the added latency of Envoy + picker against `warden route`:
# the Go benchmark BenchmarkAddedLatency in realenvoy/ (a short streamed turn
# on an idle fast engine, the two sides interleaved, CMP_LAT_N each).
#
# Prints one table with the ranges over the runs and writes everything to
# CMP_OUT. Ports: free ones picked at random in 20000-31999.
#
# Environment:
#   CMP_RUNS     runs per side                        (default 2)
#   CMP_SCALE    simulator time scale                 (default 10)
#   CMP_STAGE    bench --stage, simulated             (default 3m, the reference's)
#   CMP_WARMUP   bench --warmup, simulated            (default 1m)
#   CMP_STAGES   bench --stages                       (default 4,8,16)
#   CMP_PROFILE  simulator --sim-profile              (default a4000-qwen3-4b-2507-bf16-vllm026-fit)
#   CMP_SIDES    sides in the first run's order       (default "epp envoy route")
#   CMP_LAT_N    latency repetitions per side; 0 = skip (default 300)
#   CMP_OUT      results folder                       (default bench-results/epp-compare-<time>)
#   WARDEN_ENVOY Envoy binary                         (default .envoy/bin/envoy)
set -euo pipefail

case "${1:-}" in -h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
runs=${CMP_RUNS:-2}
scale=${CMP_SCALE:-10}
stage=${CMP_STAGE:-3m}
warmup=${CMP_WARMUP:-1m}
stages=${CMP_STAGES:-4,8,16}
profile=${CMP_PROFILE:-a4000-qwen3-4b-2507-bf16-vllm026-fit}
read -r -a sides <<<"${CMP_SIDES:-epp envoy route}"
lat_n=${CMP_LAT_N:-300}
out=${CMP_OUT:-bench-results/epp-compare-$(date +%Y%m%d-%H%M%S)}
envoy=${WARDEN_ENVOY:-$here/.envoy/bin/envoy}
model=Qwen/Qwen3-4B-Instruct-2507

log() { echo "epp-compare: $*" >&2; }
die() { log "$*"; exit 1; }

"$envoy" --version >/dev/null 2>&1 || die "no Envoy at $envoy: run scripts/envoy.sh (or set WARDEN_ENVOY)"
command -v jq >/dev/null || die "jq is needed to read the results"
mkdir -p "$out"
out=$(cd "$out" && pwd)
warden=$out/warden
log "building warden into $warden"
go build -o "$warden" . || die "go build failed"

# free_port: a port in 20000-31999 nothing listens on: below the kernel's
# ephemeral range, never 8000/9002/9090.
free_port() {
	local p
	for _ in $(seq 200); do
		p=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768-)
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	die "no free port found"
}

pids=()
stop_all() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
trap stop_all EXIT
trap 'log interrupted; exit 130' INT TERM

# wait_http URL WHAT: until URL answers 200 (60 s at most).
wait_http() {
	for _ in $(seq 600); do
		if curl -fsS -o /dev/null --max-time 2 "$1" 2>/dev/null; then return; fi
		sleep 0.1
	done
	die "$2 not ready at $1 (logs in $dir)"
}

# one SIDE RUN: fresh engines, the side's front, the bench.
one() {
	local side=$1 run=$2 i port urls=() replicas=() front
	dir=$out/$side-$run
	mkdir -p "$dir"
	for i in 0 1 2 3; do # boxes: engines 0,1 and 2,3
		port=$(free_port)
		"$warden" sim serve "$model" --host 127.0.0.1 --port "$port" --sim-profile "$profile" \
			--sim-time-scale "$scale" --enable-prompt-tokens-details --max-num-seqs 32 --max-model-len auto --stream-interval 4 \
			>"$dir/engine$i.log" 2>&1 &
		pids+=($!)
		urls+=("http://127.0.0.1:$port")
		replicas+=(--replica "http://127.0.0.1:$port")
	done
	for i in 0 1 2 3; do wait_http "${urls[$i]}/health" "engine $i"; done
	front=$(free_port)
	case $side in
	epp | envoy)
		local grpc http admin cfg=(--listen "127.0.0.1:$front")
		admin=$(free_port)
		cfg+=(--admin "127.0.0.1:$admin")
		if [ "$side" = epp ]; then
			grpc=$(free_port) http=$(free_port)
			"$warden" epp --grpc-port "$grpc" --port "$http" --max-num-seqs 32 "${replicas[@]}" >"$dir/epp.log" 2>&1 &
			pids+=($!)
			wait_http "http://127.0.0.1:$http/health" "warden epp"
			cfg+=(--epp "127.0.0.1:$grpc")
		else
			cfg+=(--without-picker)
		fi
		"$warden" epp envoy-config "${cfg[@]}" "${replicas[@]}" >"$dir/envoy.yaml"
		"$envoy" -c "$dir/envoy.yaml" --base-id $((RANDOM * 10 + 7)) --disable-hot-restart -l warning \
			>"$dir/envoy.log" 2>&1 &
		pids+=($!)
		wait_http "http://127.0.0.1:$admin/ready" "Envoy"
		;;
	route)
		"$warden" route --port "$front" --state-file none --max-num-seqs 32 "${replicas[@]}" >"$dir/route.log" 2>&1 &
		pids+=($!)
		wait_http "http://127.0.0.1:$front/health" "warden route"
		;;
	esac
	log "$side run $run: bench through http://127.0.0.1:$front"
	local engines
	engines=$(IFS=,; echo "${urls[*]}")
	"$warden" bench --url "http://127.0.0.1:$front" --load reference --ab none --stages "$stages" \
		--stage "$stage" --warmup "$warmup" --engines "$engines" --no-progress --out "$dir/bench" \
		>"$dir/bench.out" 2>"$dir/bench.err" &
	pids+=($!)
	wait "$!" || log "$side run $run: bench exit $? (see $dir/bench.err)" # wait: a signal is handled at once
	stop_all
}

start=$(date +%s)
for run in $(seq "$runs"); do
	order=("${sides[@]}")
	if [ $((run % 2)) -eq 0 ]; then # alternate: the reverse order every other run
		order=()
		for ((i = ${#sides[@]} - 1; i >= 0; i--)); do order+=("${sides[$i]}"); done
	fi
	for side in "${order[@]}"; do one "$side" "$run"; done
done
log "load runs took $(($(date +%s) - start)) s"

# The table: per side and stage, min–max over the runs of each column.
# hits: the engines' counters (--engines); usage: cached/prompt tokens of
# the turns' usage reports, a cross-check.
{
	echo "| side | sessions | prefix hit % (engines) | cached % (usage) | TTFB p50 s | TTFB p95 s | output tok/min | errors |"
	echo "|---|--:|--:|--:|--:|--:|--:|--:|"
	for side in "${sides[@]}"; do
		jq -rs --arg side "$side" '
			def r(f; d): [.[] | f | select(. != null)] as $v
				| if ($v | length) == 0 then "–"
				  elif ($v | min) == ($v | max) then ($v[0] * d | round / d | tostring)
				  else "\($v | min * d | round / d)–\($v | max * d | round / d)" end;
			[.[].stages[]] | group_by(.sessions)[] as $g
			| "| \($side) | \($g[0].sessions) | \($g | r(.prefix_hit_pct; 10)) | \($g | r(if .prompt_tokens > 0 then 100 * .cached_tokens / .prompt_tokens else null end; 10)) | \($g | r(.ttfb_p50_s; 100)) | \($g | r(.ttfb_p95_s; 100)) | \($g | r(.output_tokens_per_min; 1)) | \($g | r(.errors; 1)) |"
		' "$out/$side"-*/bench/summary.json
	done
} | tee "$out/table.md"

if [ "$lat_n" -gt 0 ]; then
	log "added latency: BenchmarkAddedLatency, $lat_n turns per side"
	WARDEN_TEST_BIN=$warden WARDEN_ENVOY=$envoy CGO_CFLAGS=${CGO_CFLAGS:--Wno-deprecated-declarations} \
		go test ./realenvoy -run '^$' -bench AddedLatency -benchtime "${lat_n}x" -count 1 | tee "$out/latency.txt"
fi
log "results in $out"
