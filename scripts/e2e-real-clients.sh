#!/usr/bin/env bash
# Real agent clients through the warden, on the simulator or on real vLLM,
# offline.
#
#   scripts/e2e-real-clients.sh            # claude, codex, opencode on the simulator
#   CLIENTS="claude" scripts/e2e-real-clients.sh
#   ENGINE=vllm scripts/e2e-real-clients.sh  # on vLLM's CPU build (scripts/vllm-cpu.sh)
#
# Installs Claude Code, Codex and opencode from npm into a temporary folder
# (the only step that needs the network), builds the warden, then re-runs
# itself inside a loopback-only network namespace (unshare -n; ip link set lo
# up) where it starts `warden serve --engine sim --dp 2` with the simulator's
# defaults (answers of drawn lengths, the default KV cache, no output cap)
# and runs each client for real for TURNS turns of one conversation, with
# dummy keys, non-essential traffic off and nothing changed but the base URL.
# Around every turn it reads /warden/status, prints the turn's requests per
# replica and its cached share, and checks that every turn was answered,
# that all of a client's requests landed on one replica, and that every
# follow-up turn was served mostly from the prefix cache.
#
# ENGINE=vllm runs the same against `warden serve --device cpu --dp 2` on
# real vLLM 0.32 (the install of scripts/vllm-cpu.sh, which must be there)
# with its long-context tiny model (tiny-long: 131,072 tokens, at most 48
# output tokens a request, so a turn takes seconds although the clients ask
# for thousands), no tool flags after `--` (the warden turns tool calling on
# itself) and TURNS 3 by default. The tiny model's text is random: a turn
# passes when the client gets an answer and exits 0, not on its content.
#
# VIA=run starts each client as `warden run <client> --url URL -- ARGS`
# instead of with its base URL set by hand: what a user types.
#
# Environment: ENGINE (sim or vllm; default sim), VIA (env or run; default env), CLIENTS (default "claude codex opencode"), CLAUDE_VERSION,
# CODEX_VERSION, OPENCODE_VERSION (npm versions, default latest),
# TURNS (default 5; 3 with ENGINE=vllm), E2E_DIR (work folder; default a new
# temporary one, removed on success), MIN_CACHED (least cached share of a
# follow-up turn, default 0.5), WARDEN_VLLM_CPU_DIR (the vLLM CPU install,
# default .vllm-cpu), SERVE_FLAGS (more `warden serve` flags with ENGINE=vllm, e.g. --vllm-dp), NPM_DIR (an npm --prefix folder with the clients
# installed: no install).
# Needs: go, npm, node, unshare (user namespaces or root), ip, curl, jq.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLIENTS=${CLIENTS:-claude codex opencode}
MIN_CACHED=${MIN_CACHED:-0.5}
ENGINE=${ENGINE:-sim}
VIA=${VIA:-env}
case $ENGINE in
sim) TURNS=${TURNS:-5} ;;
vllm) TURNS=${TURNS:-3} ;;
*) printf 'FAIL: ENGINE must be sim or vllm, not %s\n' "$ENGINE" >&2; exit 2 ;;
esac
VLLM_DIR=${WARDEN_VLLM_CPU_DIR:-$ROOT/.vllm-cpu}
MODEL=Qwen/Qwen3-4B-Instruct-2507

log() { printf '== %s\n' "$*" >&2; }
die() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- outside
if [[ "${1:-}" != "--inside" ]]; then
	for t in go npm node unshare ip curl jq; do
		command -v "$t" >/dev/null || die "$t is not installed"
	done
	if [[ $ENGINE == vllm ]]; then
		WARDEN_VLLM_CPU_DIR=$VLLM_DIR "$ROOT/scripts/vllm-cpu.sh" --check >&2 || die "no vLLM CPU install in $VLLM_DIR: run scripts/vllm-cpu.sh"
		[[ -f "$VLLM_DIR/tiny-long/config.json" ]] || die "no $VLLM_DIR/tiny-long: run scripts/vllm-cpu.sh"
	fi
	export E2E_DIR=${E2E_DIR:-$(mktemp -d /tmp/warden-e2e-clients.XXXXXX)}
	mkdir -p "$E2E_DIR"
	log "work folder $E2E_DIR"
	log "building the warden"
	(cd "$ROOT" && go build -o "$E2E_DIR/warden" .)
	. "$ROOT/scripts/e2e-lib.sh"
	install_clients
	if [[ $(id -u) -eq 0 ]]; then ns=(unshare -n); else ns=(unshare -rn); fi
	log "entering a loopback-only network namespace (${ns[*]})"
	if "${ns[@]}" env CLIENTS="$CLIENTS" MIN_CACHED="$MIN_CACHED" TURNS="$TURNS" E2E_DIR="$E2E_DIR" ENGINE="$ENGINE" VIA="$VIA" \
		NPM_DIR="$NPM_DIR" WARDEN_VLLM_CPU_DIR="$VLLM_DIR" bash "$0" --inside; then
		[[ -n "${KEEP:-}" ]] || rm -rf "$E2E_DIR"
		exit 0
	fi
	die "see $E2E_DIR (warden.log, <client>.out)"
fi

# ---------------------------------------------------------------- inside
W=$E2E_DIR
BIN=$NPM_DIR/node_modules/.bin
ip link set lo up
if timeout 3 bash -c 'exec 3<>/dev/tcp/1.1.1.1/443' 2>/dev/null; then
	die "the namespace reaches the internet"
fi
log "isolated: only loopback is up ($(ip -brief link | tr '\n' ' '))"

PORT=18431
if [[ $ENGINE == vllm ]]; then
	# No tool flags after --: the warden chooses the parser from the model's
	# chat template. The rest are the CPU build's needs (docs/vllm-cpu.md).
	MODEL=$VLLM_DIR/tiny-long
	# shellcheck disable=SC2086 # SERVE_FLAGS: words
	"$W/warden" serve --device cpu --dp 2 --vllm "$VLLM_DIR/bin/vllm" --model "$MODEL" --served-model-name tiny-long \
		--cpu-kv-cache 1GiB --port "$PORT" --log-dir "$W/engines" ${SERVE_FLAGS:-} \
		-- --dtype float32 --enforce-eager --block-size 32 >"$W/warden.log" 2>&1 &
	ready_in=4800 # tenths of a second: two CPU engines import torch and vLLM
	what="2 vLLM CPU engines${SERVE_FLAGS:+ (${SERVE_FLAGS})}"
else
	"$W/warden" serve --engine sim --dp 2 --model "$MODEL" --port "$PORT" --log-dir "$W/engines" >"$W/warden.log" 2>&1 &
	ready_in=600
	what="2 simulated replicas"
fi
WARDEN=$!
trap 'kill -INT $WARDEN 2>/dev/null; wait $WARDEN 2>/dev/null || true' EXIT
URL=http://127.0.0.1:$PORT
for _ in $(seq "$ready_in"); do
	curl -fsS "$URL/health" >/dev/null 2>&1 && break
	kill -0 $WARDEN 2>/dev/null || { cat "$W/warden.log" >&2; die "warden exited"; }
	sleep 0.1
done
curl -fsS "$URL/health" >/dev/null || { tail -40 "$W/warden.log" >&2; die "warden not healthy"; }
log "warden serves $MODEL on $URL with $what; engines: $(curl -fsS "$URL/warden/status" | jq -c '.engines // {}')"

status() { curl -fsS "$URL/warden/status"; }

# turn_line: scripts/e2e-lib.sh
. "$ROOT/scripts/e2e-lib.sh"

# run NAME CMD1 CMD2: turn 1 is CMD1, turns 2..TURNS are CMD2 (a follow-up
# of the same conversation) with the turn number in $n; output goes to
# NAME.out. Checks every turn answered, one replica for all, follow-ups
# mostly cached.
run() {
	local name=$1 first=$2 next=$3 before after line ranks="" ok=1 n
	: >"$W/$name.out"
	for n in $(seq "$TURNS"); do
		before=$(status)
		local cmd=$first
		[[ $n -gt 1 ]] && cmd=$next
		log "$name turn $n: ${cmd//\$n/$n}"
		local t0=$SECONDS
		if ! (export n; eval "$cmd") >>"$W/$name.out" 2>&1; then
			tail -20 "$W/$name.out" >&2
			printf '%s: FAIL: turn %d was not answered\n' "$name" "$n"
			return 1
		fi
		after=$(status)
		line=$(turn_line "$name" "$n" "$before" "$after")
		printf '%s (%d s)\n' "${line%%$'\t'*}" $((SECONDS - t0))
		read -r r c p _ <<<"${line##*$'\t'}"
		ranks+="$r,"
		if [[ $n -gt 1 ]] && ! awk -v c="$c" -v p="$p" -v m="$MIN_CACHED" 'BEGIN { exit !(p > 0 && c >= m * p) }'; then
			printf '%s: turn %d cached less than %s of its prompt\n' "$name" "$n" "$MIN_CACHED"
			ok=0
		fi
	done
	sed 's/^/    | /' "$W/$name.out" | tail -6 | cut -c1-160 >&2
	local distinct
	distinct=$(tr ',' '\n' <<<"$ranks" | sed '/^$/d' | sort -u | tr '\n' ' ')
	if [[ $(wc -w <<<"$distinct") -ne 1 ]]; then
		printf '%s: turns landed on replicas %s, want one\n' "$name" "$distinct"
		ok=0
	fi
	if [[ $ok -eq 1 ]]; then
		printf '%s: PASS: %d turns answered, all on replica %s, follow-ups cached >= %s\n' "$name" "$TURNS" "$distinct" "$MIN_CACHED"
		return 0
	fi
	printf '%s: FAIL\n' "$name"
	return 1
}

# Claude Code: the base URL, a dummy key, non-essential traffic off. Its own
# model names (main and small) are mapped by the warden.
claude_env="env HOME=$W/home-claude ANTHROPIC_BASE_URL=$URL ANTHROPIC_API_KEY=sk-dummy \
CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 DISABLE_AUTOUPDATER=1"
SID=11111111-2222-4333-8444-555555555555

# Codex: a custom provider with the Responses API at the warden.
setup_codex() {
	mkdir -p "$W/codex-home" "$W/codex-work"
	cat >"$W/codex-home/config.toml" <<-EOF
		model_provider = "warden"
		[model_providers.warden]
		name = "warden"
		base_url = "$URL/v1"
		wire_api = "responses"
		env_key = "WARDEN_API_KEY"
	EOF
}
codex_env="env HOME=$W/home-codex CODEX_HOME=$W/codex-home WARDEN_API_KEY=sk-dummy"

# opencode: an OpenAI-compatible provider at the warden (chat completions).
setup_opencode() {
	mkdir -p "$W/opencode-work" "$W/home-opencode"
	cat >"$W/opencode-work/opencode.json" <<-EOF
		{"\$schema": "https://opencode.ai/config.json",
		 "provider": {"warden": {"npm": "@ai-sdk/openai-compatible", "name": "warden",
		   "options": {"baseURL": "$URL/v1", "apiKey": "sk-dummy"},
		   "models": {"qwen3-4b": {"name": "Qwen3 4B via warden"}}}}}
	EOF
}
opencode_env="env HOME=$W/home-opencode OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_SHARE=1"

# A turn's time limit: a first turn on real vLLM prefills ~50k tokens on one core.
TURN_TIMEOUT=180
[[ $ENGINE == vllm ]] && TURN_TIMEOUT=900

# The conversation: a first task, then follow-ups that refer back to it.
FIRST='Say hi in five words.'
NEXT='Follow-up $n: answer in five words what turn this is.'

failed=0
for c in $CLIENTS; do
	if [[ $VIA == run ]]; then
		# Through `warden run`: no client configured by hand at all.
		mkdir -p "$W/home-$c" "$W/$c-work"
		wr="cd $W/$c-work && HOME=$W/home-$c timeout $TURN_TIMEOUT $W/warden run $c --url $URL --agent-bin $BIN/$c --"
		case $c in
		claude) run claude "$wr -p --session-id $SID '$FIRST'" "$wr -p --resume $SID \"$NEXT\"" || failed=1 ;;
		codex) run codex "$wr exec --skip-git-repo-check '$FIRST' </dev/null" \
			"$wr exec --skip-git-repo-check resume --last \"$NEXT\" </dev/null" || failed=1 ;;
		opencode) run opencode "$wr run '$FIRST' </dev/null" "$wr run --continue \"$NEXT\" </dev/null" || failed=1 ;;
		esac
		continue
	fi
	case $c in
	claude)
		mkdir -p "$W/home-claude" "$W/claude-work"
		run claude \
			"cd $W/claude-work && timeout $TURN_TIMEOUT $claude_env $BIN/claude -p --session-id $SID '$FIRST'" \
			"cd $W/claude-work && timeout $TURN_TIMEOUT $claude_env $BIN/claude -p --resume $SID \"$NEXT\"" || failed=1
		;;
	codex)
		setup_codex
		run codex \
			"cd $W/codex-work && timeout $TURN_TIMEOUT $codex_env $BIN/codex exec --skip-git-repo-check '$FIRST' </dev/null" \
			"cd $W/codex-work && timeout $TURN_TIMEOUT $codex_env $BIN/codex exec --skip-git-repo-check resume --last \"$NEXT\" </dev/null" || failed=1
		;;
	opencode)
		setup_opencode
		run opencode \
			"cd $W/opencode-work && timeout $TURN_TIMEOUT $opencode_env $BIN/opencode run --model warden/qwen3-4b '$FIRST' </dev/null" \
			"cd $W/opencode-work && timeout $TURN_TIMEOUT $opencode_env $BIN/opencode run --continue --model warden/qwen3-4b \"$NEXT\" </dev/null" || failed=1
		;;
	esac
done

log "warden log: model names mapped and adaptations"
grep -E 'model name mapped|server tool removed|output limit lowered|count_tokens|error' "$W/warden.log" | sed 's/^/    | /' >&2 || true
exit $failed
