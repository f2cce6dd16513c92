#!/usr/bin/env bash
# offload-curve.sh — what a host-RAM KV tier of a given size is worth, on the
# simulated reference rig (four RTX A4000, Qwen3-4B, vLLM's native
# offloading modelled from 0.32): the same seeded bench in steady state
# without a tier and with tiers of SIZES x one card's KV cache per rank,
# each REPEATS times, one fresh warden per run (scripts/bench-ab.sh with
# --ab none), then one table: output tok/min, TTFB p50/p95, the share of
# prompt tokens the engines served from cache (GPU + tier, from the usage
# reports) and from the tier alone.
#
#   scripts/offload-curve.sh                                   # ~30 min at the defaults
#   CURVE_SIZES="0 2 4" CURVE_STAGES=24 CURVE_LOAD=agent scripts/offload-curve.sh
#
# Environment: CURVE_SIZES (multiples of a card's KV, 0 = no tier; default
# "0 0.5 1 2 4"), CURVE_STAGES (16,24,32), CURVE_LOAD (bench --load,
# reference), CURVE_REPEATS (2), CURVE_WARMUP (3m), CURVE_POLICY (the
# warden's, default adaptive), CURVE_OUT (bench-results/offload-curve-<time>),
# WARDEN_BIN (a warden to use; default built once), BENCH_* (bench-ab.sh's).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
sizes=${CURVE_SIZES:-0 0.5 1 2 4}
stages=${CURVE_STAGES:-16,24,32}
load=${CURVE_LOAD:-reference}
repeats=${CURVE_REPEATS:-2}
warmup=${CURVE_WARMUP:-3m}
policy=${CURVE_POLICY:-adaptive}
out=${CURVE_OUT:-bench-results/offload-curve-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
out=$(cd "$out" && pwd)

# One card's KV cache on the reference profile: 38,000 tokens of 144 KiB
# (Qwen3-4B bf16: 36 layers x 8 KV heads x 128 x 2 x 2 bytes).
card_tokens=38000
token_bytes=147456
card_bytes=$((card_tokens * token_bytes))

warden=${WARDEN_BIN:-}
if [ -z "$warden" ]; then
	warden=$out/warden
	(cd "$here" && CGO_CFLAGS=${CGO_CFLAGS:--Wno-deprecated-declarations} go build -o "$warden" .)
fi

for r in $(seq "$repeats"); do
	for k in $sizes; do
		name="x$k-r$r"
		extra=""
		if [ "$k" != 0 ]; then
			# MiB, a whole number: vLLM takes the size in GiB as a float.
			mib=$(awk -v k="$k" -v b="$card_bytes" 'BEGIN {printf "%d", k * b / 1048576}')
			extra="--kv-offload ${mib}MiB"
		fi
		echo "offload-curve: $name ${extra:-no tier}" >&2
		WARDEN_BIN=$warden BENCH_AB=none BENCH_OUT="$out/$name" \
			BENCH_SERVE_ARGS="--max-num-seqs 32 --policy $policy $extra" \
			BENCH_ARGS="--stages $stages --warmup $warmup --load $load --no-progress" \
			"$here/scripts/bench-ab.sh" >"$out/$name.log" 2>&1 || { tail -20 "$out/$name.log" >&2; exit 1; }
		grep 'lag' "$out/$name.log" | sed "s/^/offload-curve: $name: /" >&2 || true
	done
done

# The table: per stage and size, mean over the repeats (min-max).
{
	echo "# The host KV tier's size against what it serves (simulated reference rig, $load load)"
	echo
	echo "\`CURVE_SIZES=\"$sizes\" CURVE_STAGES=$stages CURVE_LOAD=$load CURVE_REPEATS=$repeats CURVE_WARMUP=$warmup CURVE_POLICY=$policy scripts/offload-curve.sh\`"
	echo
	echo "Tier per rank = k x one card's KV cache ($card_tokens tokens, $(awk -v b="$card_bytes" 'BEGIN {printf "%.2f", b / 2^30}') GiB); means of $repeats runs (min–max where they differ)."
	echo
	echo "| sessions | k | output tok/min | TTFB p50 s | TTFB p95 s | cached % of prompt tokens (GPU + tier) | tier hits % of prompt tokens |"
	echo "|---:|---:|---|---|---|---|---|"
	for f in "$out"/x*-r*/summary.csv; do
		d=$(basename "$(dirname "$f")")
		k=${d#x}
		k=${k%-r*}
		awk -F, -v k="$k" 'NR==1 {for (i=1; i<=NF; i++) c[$i]=i; next}
			{cached = $c["prompt_tokens"] > 0 ? 100 * $c["cached_tokens"] / $c["prompt_tokens"] : 0
			 host = $c["host_hit_pct"] == "" ? 0 : $c["host_hit_pct"]
			 print $c["sessions"], k, $c["output_tokens_per_min"], $c["ttfb_p50_s"], $c["ttfb_p95_s"], cached, host}' "$f"
	done | awk '{key=$1" "$2; n[key]++; for (i=3; i<=7; i++) {s[key,i]+=$i; if (!((key,i) in lo) || $i<lo[key,i]) lo[key,i]=$i; if (!((key,i) in hi) || $i>hi[key,i]) hi[key,i]=$i}}
		END {for (key in n) {split(key, a, " "); line=sprintf("| %s | %s |", a[1], a[2])
			for (i=3; i<=7; i++) {d = (i==3) ? 0 : (i<=5 ? 2 : 1); m=s[key,i]/n[key]
				f = sprintf("%%.%df", d); cell = sprintf(f, m)
				if (sprintf(f, lo[key,i]) != sprintf(f, hi[key,i])) cell = cell sprintf(" (" f "–" f ")", lo[key,i], hi[key,i])
				line = line " " cell " |"}
			print a[1], a[2], line}}' | sort -k1,1n -k2,2g | cut -d' ' -f3-
} | tee "$out/table.md"
echo "offload-curve: results in $out" >&2
