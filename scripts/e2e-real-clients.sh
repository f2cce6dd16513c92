#!/usr/bin/env bash
# Real agent clients through the warden, on the simulator, offline.
#
#   scripts/e2e-real-clients.sh            # claude, codex, opencode
#   CLIENTS="claude" scripts/e2e-real-clients.sh
#
# Installs Claude Code, Codex and opencode from npm into a temporary folder
# (the only step that needs the network), builds the warden, then re-runs
# itself inside a loopback-only network namespace (unshare -n; ip link set lo
# up) where it starts `warden serve --engine sim --dp 2` and runs each client
# for real for two turns of one conversation, with dummy keys, non-essential
# traffic off and nothing changed but the base URL. After each client it reads
# /warden/status and checks that both turns landed on one replica and that
# the second turn was served mostly from the prefix cache.
#
# Environment: CLIENTS (default "claude codex opencode"), CLAUDE_VERSION,
# CODEX_VERSION, OPENCODE_VERSION (npm versions, default latest),
# E2E_DIR (work folder; default a new temporary one, removed on success),
# MIN_CACHED (least cached share of turn 2, default 0.5).
# Needs: go, npm, node, unshare (user namespaces or root), ip, curl, python3.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLIENTS=${CLIENTS:-claude codex opencode}
MIN_CACHED=${MIN_CACHED:-0.5}
MODEL=Qwen/Qwen3-4B-Instruct-2507

log() { printf '== %s\n' "$*" >&2; }
die() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- outside
if [[ "${1:-}" != "--inside" ]]; then
	for t in go npm node unshare ip curl python3; do
		command -v "$t" >/dev/null || die "$t is not installed"
	done
	export E2E_DIR=${E2E_DIR:-$(mktemp -d /tmp/warden-e2e-clients.XXXXXX)}
	mkdir -p "$E2E_DIR/npm"
	log "work folder $E2E_DIR"
	log "building the warden"
	(cd "$ROOT" && go build -o "$E2E_DIR/warden" .)
	pkgs=()
	for c in $CLIENTS; do
		case $c in
		claude) pkgs+=("@anthropic-ai/claude-code@${CLAUDE_VERSION:-latest}") ;;
		codex) pkgs+=("@openai/codex@${CODEX_VERSION:-latest}") ;;
		opencode) pkgs+=("opencode-ai@${OPENCODE_VERSION:-latest}") ;;
		*) die "unknown client $c (claude, codex, opencode)" ;;
		esac
	done
	log "npm install ${pkgs[*]}"
	npm install --no-audit --no-fund --loglevel=error --prefix "$E2E_DIR/npm" "${pkgs[@]}" >&2
	if [[ $(id -u) -eq 0 ]]; then ns=(unshare -n); else ns=(unshare -rn); fi
	log "entering a loopback-only network namespace (${ns[*]})"
	if "${ns[@]}" env CLIENTS="$CLIENTS" MIN_CACHED="$MIN_CACHED" E2E_DIR="$E2E_DIR" bash "$0" --inside; then
		[[ -n "${KEEP:-}" ]] || rm -rf "$E2E_DIR"
		exit 0
	fi
	die "see $E2E_DIR (warden.log, <client>.out)"
fi

# ---------------------------------------------------------------- inside
W=$E2E_DIR
BIN=$W/npm/node_modules/.bin
ip link set lo up
if timeout 3 bash -c 'exec 3<>/dev/tcp/1.1.1.1/443' 2>/dev/null; then
	die "the namespace reaches the internet"
fi
log "isolated: only loopback is up ($(ip -brief link | tr '\n' ' '))"

PORT=18431
"$W/warden" serve --engine sim --dp 2 --model "$MODEL" --port "$PORT" --log-dir "$W/engines" -- \
	--sim-kv-tokens 400000 --sim-output-tokens 24 --sim-time-scale 20 >"$W/warden.log" 2>&1 &
WARDEN=$!
trap 'kill -INT $WARDEN 2>/dev/null; wait $WARDEN 2>/dev/null || true' EXIT
URL=http://127.0.0.1:$PORT
for _ in $(seq 600); do
	curl -fsS "$URL/health" >/dev/null 2>&1 && break
	kill -0 $WARDEN 2>/dev/null || { cat "$W/warden.log" >&2; die "warden exited"; }
	sleep 0.1
done
curl -fsS "$URL/health" >/dev/null || die "warden not healthy"
log "warden serves $MODEL on $URL with 2 simulated replicas"

status() { curl -fsS "$URL/warden/status"; }

# check NAME BEFORE MIDDLE AFTER: status snapshots before turn 1, between the
# turns and after turn 2. Every request of the client must be on one replica;
# turn 2 must be mostly cached.
check() {
	python3 - "$@" <<-'EOF'
		import json, sys
		name, before, middle, after, min_cached = sys.argv[1], *map(json.loads, sys.argv[2:5]), float(sys.argv[5])
		def delta(a, b, key):
		    return {r["rank"]: b["replicas"][i][key] - a["replicas"][i][key] for i, r in enumerate(a["replicas"])}
		reqs = {k: v for k, v in delta(before, after, "requests").items() if v}
		new, sticky = delta(before, after, "new"), delta(before, after, "sticky")
		p2, c2 = sum(delta(middle, after, "prompt_tokens").values()), sum(delta(middle, after, "cached_tokens").values())
		share = c2 / p2 if p2 else 0
		print(f"{name}: requests per replica {reqs}; new {sum(new.values())}, sticky {sum(sticky.values())}; "
		      f"turn 2: {c2}/{p2} prompt tokens cached ({share:.0%})")
		ok = len(reqs) == 1 and sum(sticky.values()) >= 1 and share >= min_cached
		print(f"{name}: {'PASS' if ok else 'FAIL'}: both turns on replica {list(reqs)} and turn 2 mostly cached" if ok
		      else f"{name}: FAIL (want one replica, a sticky turn, turn 2 cached >= {min_cached:.0%})")
		sys.exit(0 if ok else 1)
	EOF
}

# run NAME TURN1 TURN2: each a command line; output goes to NAME.out.
run() {
	local name=$1 b m a
	b=$(status)
	log "$name turn 1: ${2}"
	(eval "$2") >"$W/$name.out" 2>&1 || { tail -20 "$W/$name.out" >&2; return 1; }
	m=$(status)
	log "$name turn 2: ${3}"
	(eval "$3") >>"$W/$name.out" 2>&1 || { tail -20 "$W/$name.out" >&2; return 1; }
	a=$(status)
	sed 's/^/    | /' "$W/$name.out" | tail -8 >&2
	check "$name" "$b" "$m" "$a" "$MIN_CACHED"
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

failed=0
for c in $CLIENTS; do
	case $c in
	claude)
		mkdir -p "$W/home-claude" "$W/claude-work"
		run claude \
			"cd $W/claude-work && timeout 180 $claude_env $BIN/claude -p --session-id $SID 'Say hi in five words.'" \
			"cd $W/claude-work && timeout 180 $claude_env $BIN/claude -p --resume $SID 'Now say bye in five words.'" || failed=1
		;;
	codex)
		setup_codex
		run codex \
			"cd $W/codex-work && timeout 180 $codex_env $BIN/codex exec --skip-git-repo-check 'Say hi in five words.' </dev/null" \
			"cd $W/codex-work && timeout 180 $codex_env $BIN/codex exec --skip-git-repo-check resume --last 'Now say bye in five words.' </dev/null" || failed=1
		;;
	opencode)
		setup_opencode
		run opencode \
			"cd $W/opencode-work && timeout 180 $opencode_env $BIN/opencode run --model warden/qwen3-4b 'Say hi in five words.' </dev/null" \
			"cd $W/opencode-work && timeout 180 $opencode_env $BIN/opencode run --continue --model warden/qwen3-4b 'Now say bye in five words.' </dev/null" || failed=1
		;;
	esac
done

log "warden log: model names mapped and adaptations"
grep -E 'model name mapped|server tool removed|output limit lowered|count_tokens|error' "$W/warden.log" | sed 's/^/    | /' >&2 || true
exit $failed
