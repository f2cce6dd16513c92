# e2e-lib.sh — helpers shared by the real-client scripts (sourced, not run):
# scripts/e2e-real-clients.sh and scripts/e2e-warden-run.sh.

# install_clients: the clients of $CLIENTS from npm into $E2E_DIR/npm (set
# as NPM_DIR), or none when NPM_DIR names a folder that has them already.
# Versions: CLAUDE_VERSION, CODEX_VERSION, OPENCODE_VERSION (default latest).
install_clients() {
	if [[ -n "${NPM_DIR:-}" ]]; then
		log "using the clients installed in $NPM_DIR"
		return
	fi
	NPM_DIR=$E2E_DIR/npm
	mkdir -p "$NPM_DIR"
	local pkgs=() c
	for c in $CLIENTS; do
		case $c in
		claude) pkgs+=("@anthropic-ai/claude-code@${CLAUDE_VERSION:-latest}") ;;
		codex) pkgs+=("@openai/codex@${CODEX_VERSION:-latest}") ;;
		opencode) pkgs+=("opencode-ai@${OPENCODE_VERSION:-latest}") ;;
		*) die "unknown client $c (claude, codex, opencode)" ;;
		esac
	done
	log "npm install ${pkgs[*]}"
	npm install --no-audit --no-fund --loglevel=error --prefix "$NPM_DIR" "${pkgs[@]}" >&2
}

# turn_line NAME N BEFORE AFTER: one turn's requests per replica and cached
# share, from two /warden/status snapshots. Prints the human line, a tab,
# then "ranks cached prompt requests" (ranks comma separated) for the caller
# to read.
turn_line() {
	jq -rn --arg name "$1" --arg n "$2" --argjson a "$3" --argjson b "$4" '
		[range(0; $a.replicas | length) as $i | {rank: $a.replicas[$i].rank,
			req: ($b.replicas[$i].requests - $a.replicas[$i].requests),
			prompt: ($b.replicas[$i].prompt_tokens - $a.replicas[$i].prompt_tokens),
			cached: ($b.replicas[$i].cached_tokens - $a.replicas[$i].cached_tokens)}] as $d
		| ($d | map(.prompt) | add) as $p | ($d | map(.cached) | add) as $c
		| "\($name) turn \($n): requests per replica \($d | map(select(.req > 0) | "\(.rank):\(.req)") | join(" ")); " +
		  "\($c) of \($p) prompt tokens cached (\(if $p > 0 then ($c * 100 / $p | floor) else 0 end)%)\t" +
		  "\($d | map(select(.req > 0) | .rank) | join(",")) \($c) \($p) \($d | map(.req) | add)"'
}
