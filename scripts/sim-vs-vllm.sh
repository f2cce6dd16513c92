#!/usr/bin/env bash
# The simulator measured against the engine it stands in for: one small
# bench load, sized to the tiny model's 4k context, on two real vLLM CPU
# replicas and on two simulated ones configured to match them (block size,
# KV blocks, max_num_seqs, the step-time profile fitted to the CPU engine),
# under the policies off, sticky and adaptive; then one table side by side:
# prefix hit %, stayed %, preemptions and output tokens/min per cell.
#
#   scripts/sim-vs-vllm.sh                      # about 15 minutes on 2 cores
#   STAGES=2,4,8 STAGE=45s scripts/sim-vs-vllm.sh
#
# Also kept per engine and policy in OUT: the bench's results folder and
# table, and the warden's route reasons so far (<engine>-<policy>.routes).
#
# Needs scripts/vllm-cpu.sh to have run. Environment: STAGES (default
# 2,4,8), STAGE (default 45s), POLICIES (default "off sticky adaptive"),
# KV_MIB (KV cache per replica, default 8: 8192 tokens of the tiny model),
# SEED (default 1), OUT (default bench-results/sim-vs-vllm-<time>).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
STAGES=${STAGES:-2,4,8}
STAGE=${STAGE:-45s}
POLICIES=${POLICIES:-off sticky adaptive}
KV_MIB=${KV_MIB:-8}
SEED=${SEED:-1}
OUT=${OUT:-bench-results/sim-vs-vllm-$(date +%Y%m%d-%H%M%S)}
SIM_SCALE=5
DIR=${WARDEN_VLLM_CPU_DIR:-$ROOT/.vllm-cpu}

scripts/vllm-cpu.sh --check >/dev/null || { echo "sim-vs-vllm: run scripts/vllm-cpu.sh first" >&2; exit 1; }
mkdir -p "$OUT"
export CGO_CFLAGS=${CGO_CFLAGS:--Wno-deprecated-declarations}
go build -o "$OUT/warden" .
W="$OUT/warden"
port=18731
url=http://127.0.0.1:$port

# The load: a 1000-token system prompt shared by all, an 800-token first
# message, five follow-ups of 150 tokens, 64 output tokens a turn (sent
# with ignore_eos, so real and simulated turns are equally long); prompt
# sizes in each engine's own tokens (count_tokens).
bench_args=(--api openai --model tiny --ab none --stages "$STAGES" --stage "$STAGE" --carry=false --reset-cache
	--chars-per-token 0 --system-tokens 1000 --first-tokens 800 --turn-tokens 150 --turns 5 --max-tokens 64
	--seed "$SEED" --no-progress)

serve() { # engine-name, then warden serve arguments
	local name=$1
	shift
	echo "sim-vs-vllm: starting $name: warden $*" >&2
	VLLM_SERVER_DEV_MODE=1 "$W" serve --port "$port" --dp 2 --max-num-seqs 8 --served-model-name tiny \
		--log-dir "$OUT/$name-logs" "$@" >"$OUT/$name-warden.out" 2>"$OUT/$name-warden.err" &
	pid=$!
	"$W" wait --url "$url" --timeout 10m >/dev/null || { tail -20 "$OUT/$name-warden.err" >&2; exit 1; }
}

stop() {
	kill -INT "$pid"
	wait "$pid" || true
}

run_policies() { # engine-name, time scale
	for p in $POLICIES; do
		curl -sf -X POST "$url/warden/policy" -d "{\"policy\":\"$p\"}" >/dev/null
		echo "sim-vs-vllm: $1, policy $p" >&2
		"$W" bench --url "$url" "${bench_args[@]}" --time-scale "$2" --out "$OUT/$1-$p" >"$OUT/$1-$p.md" 2>"$OUT/$1-$p.err"
		# Route reasons so far (the counters add up over the policies run).
		curl -sf "$url/metrics" | grep '^warden_requests_total' >"$OUT/$1-$p.routes" || true
	done
}

serve vllm --device cpu --vllm "$DIR/bin/vllm" --model "$DIR/tiny" --cpu-kv-cache "${KV_MIB}MiB" \
	-- --dtype float32 --enforce-eager --block-size 32 --max-model-len 4096 --max-num-batched-tokens 2048
kv=$(curl -sf "$url/warden/status" | sed -n 's/.*"kv_capacity_tokens": *\([0-9]*\).*/\1/p' | head -n1)
run_policies vllm 1
stop

serve sim --engine sim --model tiny -- --sim-profile vllm032-cpu-tiny-1core --sim-kv-tokens "$kv" --block-size 32 \
	--max-model-len 4096 --max-num-batched-tokens 2048 --sim-time-scale "$SIM_SCALE"
run_policies sim "$SIM_SCALE"
stop

# One row per stage and policy: real | simulated.
col() { # csv-file column-name: prints "sessions value" lines
	awk -F, -v c="$2" 'NR==1 {for (i=1; i<=NF; i++) if ($i==c) k=i; next} {print $2, $k}' "$1"
}
{
	echo "KV cache per replica: $kv tokens (block 32), max_num_seqs 8, 2 replicas; stages of $STAGE; seed $SEED"
	echo
	echo "| sessions | policy | hit % vLLM | hit % sim | stayed % vLLM | stayed % sim | preemptions vLLM | preemptions sim | output tok/min vLLM | output tok/min sim |"
	echo "|---|---|---|---|---|---|---|---|---|---|"
	for p in $POLICIES; do
		paste -d' ' <(col "$OUT/vllm-$p/summary.csv" prefix_hit_pct) <(col "$OUT/sim-$p/summary.csv" prefix_hit_pct | cut -d' ' -f2) \
			<(col "$OUT/vllm-$p/summary.csv" stayed_pct | cut -d' ' -f2) <(col "$OUT/sim-$p/summary.csv" stayed_pct | cut -d' ' -f2) \
			<(col "$OUT/vllm-$p/summary.csv" preemptions | cut -d' ' -f2) <(col "$OUT/sim-$p/summary.csv" preemptions | cut -d' ' -f2) \
			<(col "$OUT/vllm-$p/summary.csv" output_tokens_per_min | cut -d' ' -f2) <(col "$OUT/sim-$p/summary.csv" output_tokens_per_min | cut -d' ' -f2) |
			awk -v p="$p" '{printf "| %s | %s | %.1f | %.1f | %.1f | %.1f | %s | %s | %.0f | %.0f |\n", $1, p, $2, $3, $4, $5, $6, $7, $8, $9}'
	done | sort -t'|' -k2,2n -s
} | tee "$OUT/compare.md"
echo "sim-vs-vllm: results in $OUT" >&2
