#!/usr/bin/env bash
# `warden run` with the real agent clients, on the simulator, offline.
#
#   scripts/e2e-warden-run.sh            # claude, codex, opencode
#   CLIENTS="codex" scripts/e2e-warden-run.sh
#
# Like scripts/e2e-real-clients.sh, but nothing is configured by hand: each
# client is started as `warden run <client> -- <one-shot prompt arguments>`,
# found on PATH, with a fresh HOME and no config file, so everything it
# needs (base URL, key, model, limits, non-essential traffic off) comes from
# `warden run`. Installs Claude Code, Codex and opencode from npm into a
# temporary folder (the only step that needs the network), builds the
# warden, then re-runs itself inside a loopback-only network namespace
# (unshare -n; ip link set lo up) where it starts
# `warden serve --engine sim --dp 2` and, per client, runs TURNS turns of
# one conversation (Claude Code: -p --session-id, then --resume; Codex:
# exec, then exec resume --last; opencode: run, then run --continue).
# Around every turn it reads /warden/status and checks that the turn was
# answered and that all of a client's turns landed on one replica. It also
# checks that each client was told the engines' max_model_len (Claude Code's
# modelUsage.contextWindow, Codex's model_context_window in its session
# file, opencode's limit.context in `opencode models --verbose`), that an
# agent's exit code comes back through `warden run`, and that
# `warden run --serve` starts a warden for one run and stops it after.
#
# Environment: CLIENTS (default "claude codex opencode"), CLAUDE_VERSION,
# CODEX_VERSION, OPENCODE_VERSION (npm versions, default latest), TURNS
# (default 2), E2E_DIR (work folder; default a new temporary one, removed on
# success unless KEEP is set), NPM_DIR (an existing npm --prefix folder with
# the clients installed: no install), WARDEN_BIN (a warden binary to use
# instead of building one), SIM_ARGS (engine arguments after --; default
# "--sim-output-tokens 48": answers of 48 tokens, so that a turn takes
# seconds even on a busy machine; empty for the simulator's drawn lengths).
# Needs: go, npm, node, unshare (user namespaces or root), ip, curl, jq.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLIENTS=${CLIENTS:-claude codex opencode}
TURNS=${TURNS:-2}
SIM_ARGS=${SIM_ARGS---sim-output-tokens 48}
MODEL=Qwen/Qwen3-4B-Instruct-2507

log() { printf '== %s\n' "$*" >&2; }
die() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- outside
if [[ "${1:-}" != "--inside" ]]; then
	for t in npm node unshare ip curl jq; do
		command -v "$t" >/dev/null || die "$t is not installed"
	done
	export E2E_DIR=${E2E_DIR:-$(mktemp -d /tmp/warden-e2e-run.XXXXXX)}
	mkdir -p "$E2E_DIR"
	log "work folder $E2E_DIR"
	if [[ -n "${WARDEN_BIN:-}" ]]; then
		cp "$WARDEN_BIN" "$E2E_DIR/warden"
	else
		command -v go >/dev/null || die "go is not installed (or set WARDEN_BIN)"
		log "building the warden"
		(cd "$ROOT" && go build -o "$E2E_DIR/warden" .)
	fi
	. "$ROOT/scripts/e2e-lib.sh"
	install_clients
	for c in $CLIENTS; do
		[[ -x "$NPM_DIR/node_modules/.bin/$c" ]] || die "$c is not in $NPM_DIR/node_modules/.bin"
	done
	if [[ $(id -u) -eq 0 ]]; then ns=(unshare -n); else ns=(unshare -rn); fi
	log "entering a loopback-only network namespace (${ns[*]})"
	if "${ns[@]}" env CLIENTS="$CLIENTS" TURNS="$TURNS" E2E_DIR="$E2E_DIR" NPM_DIR="$NPM_DIR" SIM_ARGS="$SIM_ARGS" \
		bash "$0" --inside; then
		[[ -n "${KEEP:-}" ]] || rm -rf "$E2E_DIR"
		exit 0
	fi
	die "see $E2E_DIR (warden.log, <client>.out, <client>.err)"
fi

# ---------------------------------------------------------------- inside
W=$E2E_DIR
ip link set lo up
if timeout 3 bash -c 'exec 3<>/dev/tcp/1.1.1.1/443' 2>/dev/null; then
	die "the namespace reaches the internet"
fi
log "isolated: only loopback is up ($(ip -brief link | tr '\n' ' '))"

# The clients come from PATH, as for a user who installed them globally.
export PATH=$NPM_DIR/node_modules/.bin:$PATH
WARDEN=$W/warden
PORT=18641
# shellcheck disable=SC2086 # SIM_ARGS is a list of engine arguments
"$WARDEN" serve --engine sim --dp 2 --model "$MODEL" --port "$PORT" --log-dir "$W/engines" -- $SIM_ARGS >"$W/warden.log" 2>&1 &
SERVE=$!
trap 'kill -INT $SERVE 2>/dev/null; wait $SERVE 2>/dev/null || true' EXIT
export WARDEN_URL=http://127.0.0.1:$PORT
for _ in $(seq 600); do
	curl -fsS "$WARDEN_URL/health" >/dev/null 2>&1 && break
	kill -0 $SERVE 2>/dev/null || { cat "$W/warden.log" >&2; die "warden exited"; }
	sleep 0.1
done
curl -fsS "$WARDEN_URL/health" >/dev/null || die "warden not healthy"
MAXLEN=$(curl -fsS "$WARDEN_URL/v1/models" | jq -r '.data[0].max_model_len')
log "warden serves $MODEL on $WARDEN_URL with 2 simulated replicas, max_model_len $MAXLEN (engine args: ${SIM_ARGS:-none})"

status() { curl -fsS "$WARDEN_URL/warden/status"; }

# turn_line: scripts/e2e-lib.sh
. "$ROOT/scripts/e2e-lib.sh"

# conversation NAME CMD1 CMD2: turn 1 is CMD1, turns 2..TURNS are CMD2 (a
# follow-up of the same conversation, with the turn number in $n), run in
# $W/NAME-work with HOME=$W/home-NAME; stdout goes to NAME.out (turn N's to
# NAME.N.out too), stderr to NAME.err. Checks that every turn was answered
# (exit 0, something printed, requests seen) and that all landed on one
# replica.
conversation() {
	local name=$1 first=$2 next=$3 before after line ranks="" ok=1 n cmd
	mkdir -p "$W/$name-work" "$W/home-$name"
	: >"$W/$name.out"
	: >"$W/$name.err"
	for n in $(seq "$TURNS"); do
		before=$(status)
		cmd=$first
		[[ $n -gt 1 ]] && cmd=$next
		log "$name turn $n: ${cmd//\$n/$n}"
		printf -- '--- turn %d\n' "$n" >>"$W/$name.err"
		if ! (cd "$W/$name-work" && export n HOME=$W/home-$name && eval "$cmd") >"$W/$name.$n.out" 2>>"$W/$name.err" </dev/null; then
			tail -20 "$W/$name.err" >&2
			printf '%s: FAIL: turn %d: warden run exited non-zero\n' "$name" "$n"
			return 1
		fi
		cat "$W/$name.$n.out" >>"$W/$name.out"
		after=$(status)
		line=$(turn_line "$name" "$n" "$before" "$after")
		read -r r _ _ reqs <<<"${line##*$'\t'}"
		if [[ ! -s "$W/$name.$n.out" || "$reqs" -lt 1 ]]; then
			printf '%s: FAIL: turn %d not answered (%s requests, %s bytes of output)\n' "$name" "$n" "$reqs" "$(wc -c <"$W/$name.$n.out")"
			return 1
		fi
		printf '%s; answered\n' "${line%%$'\t'*}"
		ranks+="$r,"
	done
	grep -iE '^warden run:|warn|error' "$W/$name.err" | sort -u | sed 's/^/    | /' | cut -c1-200 >&2 || true
	local distinct
	distinct=$(tr ',' '\n' <<<"$ranks" | sed '/^$/d' | sort -u | tr '\n' ' ')
	if [[ $(wc -w <<<"$distinct") -ne 1 ]]; then
		printf '%s: turns landed on replicas %s, want one\n' "$name" "$distinct"
		ok=0
	fi
	[[ $ok -eq 1 ]] || { printf '%s: FAIL\n' "$name"; return 1; }
	printf '%s: PASS: %d turns answered through warden run, all on replica %s\n' "$name" "$TURNS" "$distinct"
}

# told NAME WHAT GOT: the client's own view of the context window.
told() {
	if [[ "$3" =~ ^[0-9]+$ && "$3" -gt 0 && "$3" -le "$MAXLEN" ]]; then
		printf '%s: PASS: context window told: the client reports %s %s (max_model_len %s)\n' "$1" "$2" "$3" "$MAXLEN"
	else
		printf '%s: FAIL: context window not told: the client reports %s %q (max_model_len %s)\n' "$1" "$2" "$3" "$MAXLEN"
		return 1
	fi
}

FIRST='Say hi in five words.'
NEXT='Follow-up $n: answer in five words what turn this is.'
SID=11111111-2222-4333-8444-555555555555

failed=0
for c in $CLIENTS; do
	case $c in
	claude)
		conversation claude \
			"timeout 240 $WARDEN run claude -- -p --session-id $SID --output-format json '$FIRST'" \
			"timeout 240 $WARDEN run claude -- -p --resume $SID --output-format json \"$NEXT\"" || { failed=1; continue; }
		told claude modelUsage.contextWindow "$(jq -r '[.modelUsage[].contextWindow] | max' "$W/claude.1.out")" || failed=1
		;;
	codex)
		conversation codex \
			"timeout 240 $WARDEN run codex -- exec --skip-git-repo-check '$FIRST'" \
			"timeout 240 $WARDEN run codex -- exec --skip-git-repo-check resume --last \"$NEXT\"" || { failed=1; continue; }
		told codex model_context_window "$(cat "$W"/home-codex/.codex/sessions/*/*/*/rollout-*.jsonl |
			grep -o '"model_context_window":[0-9]*' | head -1 | cut -d: -f2)" || failed=1
		;;
	opencode)
		conversation opencode \
			"timeout 240 $WARDEN run opencode -- run '$FIRST'" \
			"timeout 240 $WARDEN run opencode -- run --continue \"$NEXT\"" || { failed=1; continue; }
		got=$(cd "$W/opencode-work" && HOME=$W/home-opencode timeout 120 "$WARDEN" run opencode -- models warden --verbose 2>/dev/null </dev/null |
			sed -n '/^{/,/^}/p' | jq -r '.limit.context' 2>/dev/null || true)
		told opencode limit.context "$got" || failed=1
		;;
	esac
done

# The exit code is the agent's: a flag the client refuses, directly and
# through warden run.
first=${CLIENTS%% *}
set +e
(cd "$W" && HOME=$W/home-$first timeout 60 "$first" --no-such-flag-for-e2e </dev/null >/dev/null 2>&1)
direct=$?
(cd "$W" && HOME=$W/home-$first timeout 60 "$WARDEN" run "$first" -- --no-such-flag-for-e2e </dev/null >/dev/null 2>&1)
through=$?
set -e
if [[ $direct -ne 0 && $direct -eq $through ]]; then
	printf 'exit code: PASS: %s --no-such-flag-for-e2e exits %d, through warden run too\n' "$first" "$direct"
else
	printf 'exit code: FAIL: %s exits %d directly, %d through warden run\n' "$first" "$direct" "$through"
	failed=1
fi

# --serve: a warden of its own for one run, stopped when the agent exits.
SPORT=18642
log "$first with --serve (port $SPORT)"
mkdir -p "$W/serve-work" "$W/home-serve"
case $first in
claude) sargs=(-p "$FIRST") ;;
codex) sargs=(exec --skip-git-repo-check "$FIRST") ;;
opencode) sargs=(run "$FIRST") ;;
esac
if (cd "$W/serve-work" && HOME=$W/home-serve timeout 300 "$WARDEN" run "$first" \
	--serve "--engine sim --dp 2 --model $MODEL --port $SPORT --log-dir $W/serve-engines -- $SIM_ARGS" -- "${sargs[@]}" \
	</dev/null >"$W/serve.out" 2>"$W/serve.err"); then
	if curl -fsS "http://127.0.0.1:$SPORT/health" >/dev/null 2>&1; then
		printf 'serve: FAIL: the warden started by --serve still answers after the agent exited\n'
		failed=1
	elif [[ ! -s "$W/serve.out" ]]; then
		printf 'serve: FAIL: no answer printed\n'
		failed=1
	else
		printf 'serve: PASS: %s answered through a warden started by --serve, which stopped after it (%s)\n' "$first" \
			"$(grep -o 'warden summary.*' "$W/serve-engines/serve.log" | head -1)"
	fi
else
	tail -20 "$W/serve.err" >&2
	printf 'serve: FAIL: warden run --serve exited non-zero\n'
	failed=1
fi
sed 's/^/    | /' "$W/serve.err" | cut -c1-200 >&2

log "warden log: model names mapped and adaptations"
grep -E 'model name mapped|server tool removed|output limit lowered|count_tokens|error' "$W/warden.log" | sed 's/^/    | /' | cut -c1-220 >&2 || true
exit $failed
