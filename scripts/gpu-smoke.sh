#!/usr/bin/env bash
# gpu-smoke.sh — the warden against this machine's real NVIDIA GPUs, without
# vLLM, in a few minutes and with no network:
#
#   1. builds the warden (go build, GOPROXY=off: the module cache must hold
#      the modules; or set WARDEN_BIN to a built warden);
#   2. shows real NVML through it (warden gpus --json, warden gpus, warden
#      devices) and checks the list against nvidia-smi's;
#   3. holds most of the last card's memory with a Python process
#      (torch.empty on cuda) and checks that `warden serve --dp <all cards>`
#      refuses, naming that card and its free memory;
#   4. runs `warden serve --engine vllm --vllm <stub>`, the stub a small
#      Python program (written to a temp dir) that checks with torch that it
#      sees exactly one card, the one the warden's log names for its rank
#      (UUID, CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER=PCI_BUS_ID, no
#      VLLM_DP_* inherited), and answers /health, /v1/models, /metrics and
#      /version so that the warden becomes ready; with more than one card the
#      busy one must be skipped; then it asks the warden for /v1/models and
#      its status, stops it with SIGINT and checks that every stub is gone.
#
# It prints PASS/FAIL/SKIP lines and exits 1 when anything failed, 0
# otherwise. With no nvidia-smi or no GPU it exits 0 with a SKIP line; with
# no CUDA torch it runs the NVML part and the stub without its torch check.
#
#   scripts/gpu-smoke.sh
#   PYTHON=/path/to/venv/bin/python scripts/gpu-smoke.sh   # the Python with CUDA torch
#   WARDEN_BIN=./warden scripts/gpu-smoke.sh               # skip the build
#   GPU_SMOKE_STUB_ONLY=1 scripts/gpu-smoke.sh             # no GPU: the stub through
#                                                          # serve --device cpu (tests this script)
#   GPU_SMOKE_KEEP=1 ...                                   # keep the temp dir (logs)
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
STUB_ONLY=${GPU_SMOKE_STUB_ONLY:-0}
passes=0
fails=0
pass() { echo "PASS: $*"; passes=$((passes + 1)); }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
skip() { echo "SKIP: $*"; }
step() { echo; echo "== $*"; }
indent() { sed 's/^/    /'; }

# --- can this machine run it at all? ---------------------------------------
if [ "$STUB_ONLY" != 1 ]; then
	if ! command -v nvidia-smi >/dev/null 2>&1; then
		echo "SKIP: no nvidia-smi on PATH (no NVIDIA driver here); nothing to test"
		exit 0
	fi
	if ! smi_list=$(timeout 30 nvidia-smi -L 2>&1); then
		echo "SKIP: nvidia-smi -L fails: $(head -n1 <<<"$smi_list")"
		exit 0
	fi
	ngpu=$(grep -c '^GPU [0-9]' <<<"$smi_list" || true)
	if [ "$ngpu" -lt 1 ]; then
		echo "SKIP: nvidia-smi lists no GPU"
		exit 0
	fi
fi
if ! PY=$(command -v "$PY"); then
	echo "SKIP: no ${PYTHON:-python3} (the stub engine is a Python program)"
	exit 0
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpu-smoke.XXXXXX")
holder_pid=""
warden_pid=""
cleanup() {
	for p in $warden_pid $holder_pid; do
		kill -TERM "$p" 2>/dev/null
	done
	sleep 0.5
	for p in $warden_pid $holder_pid; do
		kill -KILL "$p" 2>/dev/null
	done
	if [ "${GPU_SMOKE_KEEP:-0}" = 1 ]; then
		echo "(logs kept in $tmp)"
	else
		rm -rf "$tmp"
	fi
}
trap cleanup EXIT
trap 'echo "interrupted"; exit 130' INT TERM

free_port() {
	"$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# --- the programs the script runs ------------------------------------------

# The stub engine: `STUB serve MODEL --host H --port P --served-model-name N
# ...` (any other flags ignored). It reports what it was given and what torch
# sees in one "SMOKE-STUB {json}" line on stdout (the rank's log), then
# serves until SIGTERM/SIGINT.
cat >"$tmp/vllm-stub" <<EOF
#!$PY
EOF
cat >>"$tmp/vllm-stub" <<'EOF'
import http.server
import json
import os
import signal
import sys
import threading


def flag(args, name, default=None):
    value = default
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(name + "="):
            value = a.split("=", 1)[1]
    return value


args = sys.argv[1:]
if "--version" in args:
    print("0.0.0+smoke")
    sys.exit(0)
if not args or args[0] != "serve":
    print("vllm-stub: usage: vllm-stub serve MODEL --port P [...]", file=sys.stderr)
    sys.exit(2)
model = args[1] if len(args) > 1 and not args[1].startswith("-") else "smoke"
port = int(flag(args, "--port", "8000"))
host = flag(args, "--host", "127.0.0.1")
name = flag(args, "--served-model-name", model)

report = {
    "pid": os.getpid(),
    "port": port,
    "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "cuda_device_order": os.environ.get("CUDA_DEVICE_ORDER"),
    "inherited_dp_vars": sorted(
        k for k in os.environ
        if k.startswith("VLLM_DP_") or k in ("VLLM_PORT", "VLLM_ELASTIC_EP_SCALE_UP_LAUNCH")
    ),
}
if os.environ.get("SMOKE_STUB_NO_TORCH") == "1":
    report["torch"] = "skipped"
else:
    try:
        import torch

        report["device_count"] = torch.cuda.device_count()
        if report["device_count"] > 0:
            p = torch.cuda.get_device_properties(0)
            report["name"] = p.name
            u = getattr(p, "uuid", None)
            report["uuid"] = str(u) if u is not None else None
            if hasattr(p, "pci_bus_id"):
                report["pci"] = "%08x:%02x:%02x.0" % (
                    getattr(p, "pci_domain_id", 0), p.pci_bus_id, getattr(p, "pci_device_id", 0))
            torch.zeros(1, device="cuda")  # a context on the card, as an engine holds one
    except Exception as e:  # reported, not fatal: the script fails the check
        report["torch_error"] = repr(e)
print("SMOKE-STUB " + json.dumps(report, sort_keys=True), flush=True)

METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="%(n)s"} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="%(n)s"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="%(n)s"} 0.0
"""


class Handler(http.server.BaseHTTPRequestHandler):
    def send(self, code, body, ctype="application/json"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path in ("/health", "/ping"):
            self.send(200, b"")
        elif path == "/v1/models":
            self.send(200, json.dumps({"object": "list", "data": [{
                "id": name, "object": "model", "created": 0, "owned_by": "gpu-smoke",
                "root": model, "parent": None, "max_model_len": 4096}]}).encode())
        elif path == "/metrics":
            self.send(200, (METRICS % {"n": name}).encode(), "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/version":
            self.send(200, b'{"version": "0.0.0+smoke"}')
        else:
            self.send(404, b'{"error": "not in the gpu-smoke stub"}')

    def log_message(self, *a):
        pass


srv = http.server.ThreadingHTTPServer((host, port), Handler)


def stop(*_):
    threading.Thread(target=srv.shutdown, daemon=True).start()


signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
srv.serve_forever()
print("SMOKE-STUB stopped", flush=True)
EOF
chmod +x "$tmp/vllm-stub"

# The holder: takes 60 % of the free memory of the one card it sees, writes
# {"uuid", "held", "total"} to $1 and sleeps until killed.
cat >"$tmp/holder.py" <<'EOF'
import json, os, sys, time
import torch
free, total = torch.cuda.mem_get_info()
n = int(free * 0.6)
x = torch.empty(n, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
p = torch.cuda.get_device_properties(0)
with open(sys.argv[1] + ".tmp", "w") as f:
    json.dump({"uuid": str(getattr(p, "uuid", "")), "held": n, "total": total, "name": p.name}, f)
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    time.sleep(1)
EOF

# The checks of one stub run: each rank's stub report (its rank log) against
# what the warden's log says for that rank, and the warden's status.
cat >"$tmp/check_ranks.py" <<'EOF'
import json, re, sys, urllib.request
mode, err_path, log_dir, dp, busy, gpus_path, port = sys.argv[1:8]
dp, busy = int(dp), int(busy)
err = open(err_path, errors="replace").read()
gpus = json.load(open(gpus_path)) if gpus_path else []
by_index = {g["index"]: g for g in gpus}

def norm_uuid(u):
    u = (u or "").strip().lower()
    return u[4:] if u.startswith("gpu-") else u

def norm_bus(b):
    m = re.match(r"^([0-9a-f]+):([0-9a-f]+):([0-9a-f]+)\.([0-9a-f])$", (b or "").strip().lower())
    return tuple(int(x, 16) for x in m.groups()) if m else None

def out(ok, msg):
    print(("PASS: " if ok else "FAIL: ") + msg)

status = None
try:
    with urllib.request.urlopen("http://127.0.0.1:%s/warden/status" % port, timeout=10) as r:
        status = json.load(r)
except Exception as e:
    status = None
    status_err = repr(e)

for r in range(dp):
    try:
        log = open("%s/rank-%d.log" % (log_dir, r), errors="replace").read()
    except OSError as e:
        out(False, "rank %d: no log (%s)" % (r, e))
        continue
    reps = [json.loads(l.split(" ", 1)[1]) for l in log.splitlines() if l.startswith("SMOKE-STUB {")]
    if not reps:
        out(False, "rank %d: the stub reported nothing; its log ends:\n%s" % (r, "\n".join(log.splitlines()[-15:])))
        continue
    rep = reps[-1]
    left = rep.get("inherited_dp_vars") or []
    out(not left, "rank %d: no data-parallel variables inherited by the engine (%s)" % (r, ",".join(left) or "none"))
    if mode == "cpu":
        continue
    m = re.search(r'msg="rank GPUs" rank=%d CUDA_VISIBLE_DEVICES=(\S+) uuids=(\S+) pci=(\S+)' % r, err)
    if not m:
        out(False, "rank %d: no 'rank GPUs' line in the warden's log" % r)
        continue
    cvd, uuids, pcis = m.group(1), m.group(2).split(","), m.group(3).split(",")
    out(rep.get("cuda_visible_devices") == cvd and re.fullmatch(r"\d+(,\d+)*", cvd or "") is not None,
        "rank %d: the engine got CUDA_VISIBLE_DEVICES=%s (indices), as the warden logged (%s)"
        % (r, rep.get("cuda_visible_devices"), cvd))
    out(rep.get("cuda_device_order") == "PCI_BUS_ID",
        "rank %d: CUDA_DEVICE_ORDER=%s (want PCI_BUS_ID)" % (r, rep.get("cuda_device_order")))
    if busy >= 0:
        out(str(busy) not in cvd.split(","), "rank %d: not on the busy GPU %d (got %s)" % (r, busy, cvd))
    if len(uuids) == 1 and by_index.get(int(cvd.split(",")[0]), {}).get("uuid"):
        out(norm_uuid(by_index[int(cvd)]["uuid"]) == norm_uuid(uuids[0]),
            "rank %d: the logged UUID %s is GPU %s's in warden gpus --json" % (r, uuids[0], cvd))
    if mode == "notorch":
        continue
    if "torch_error" in rep:
        out(False, "rank %d: torch failed in the engine: %s" % (r, rep["torch_error"]))
        continue
    out(rep.get("device_count") == 1, "rank %d: torch sees %s card(s), want exactly 1" % (r, rep.get("device_count")))
    if rep.get("uuid"):
        out(norm_uuid(rep["uuid"]) == norm_uuid(uuids[0]),
            "rank %d: torch's card is %s, the warden assigned %s (GPU %s)" % (r, rep["uuid"], uuids[0], cvd))
    elif rep.get("pci") and pcis[0] != "?":
        out(norm_bus(rep["pci"]) == norm_bus(pcis[0]),
            "rank %d: torch's card is at PCI %s, the warden assigned %s (GPU %s)" % (r, rep["pci"], pcis[0], cvd))
    else:
        print("SKIP: rank %d: this torch tells neither the card's UUID nor its PCI bus id" % r)
    if status is not None and mode != "cpu":
        reps_st = {x.get("rank"): x for x in status.get("replicas", [])}
        got = (reps_st.get(r) or {}).get("gpus")
        out(got == cvd.split(","), "rank %d: warden status shows GPUs %s (want %s)" % (r, got, cvd.split(",")))
if status is None:
    out(False, "GET /warden/status: %s" % status_err)
EOF

# --- 1. build ----------------------------------------------------------------
step "build"
if [ -n "${WARDEN_BIN:-}" ]; then
	W=$WARDEN_BIN
	echo "using WARDEN_BIN=$W"
elif command -v go >/dev/null 2>&1; then
	W=$tmp/warden
	if (cd "$ROOT" && GOPROXY=${GPU_SMOKE_GOPROXY:-off} GOFLAGS=${GOFLAGS:-} timeout 240 go build -o "$W" .) >"$tmp/build.log" 2>&1; then
		pass "go build ($(cd "$ROOT" && go env CGO_ENABLED | sed 's/^1$/CGO on: NVML/; s/^0$/CGO off: nvidia-smi fallback only/'))"
	else
		fail "go build (offline: needs the module cache, or WARDEN_BIN):"
		tail -n 20 "$tmp/build.log" | indent
		echo "gpu-smoke: $passes passed, $fails failed"
		exit 1
	fi
else
	echo "SKIP: no go toolchain on PATH and no WARDEN_BIN; nothing to test"
	exit 0
fi

mode=gpu
busy=-1
has_torch=0
if [ "$STUB_ONLY" = 1 ]; then
	mode=cpu
	echo "GPU_SMOKE_STUB_ONLY=1: no GPU checks; the stub runs through warden serve --device cpu without torch"
else
	# --- 2. real NVML through the warden -----------------------------------
	step "NVML through the warden"
	if "$W" gpus --json >"$tmp/gpus.json" 2>"$tmp/gpus.err"; then
		pass "warden gpus --json"
	else
		fail "warden gpus --json: $(cat "$tmp/gpus.err")"
	fi
	timeout 30 nvidia-smi --query-gpu=index,uuid,pci.bus_id,memory.total,memory.free --format=csv,noheader,nounits >"$tmp/smi.csv" 2>&1
	"$PY" - "$tmp/gpus.json" "$tmp/smi.csv" <<'EOF'
import json, sys
try:
    gpus = json.load(open(sys.argv[1]))
except Exception as e:
    print("FAIL: warden gpus --json is not JSON: %r" % e); sys.exit()
smi = [[c.strip() for c in l.split(",")] for l in open(sys.argv[2]) if l.count(",") >= 4]
for g in gpus:
    links = " ".join("%d:%s" % (l["gpu"], l["path"]) for l in g.get("links") or []) or "-"
    print("    GPU %d %s  %.1f/%.1f GiB free  bus %s  NUMA %s  MIG %s  links %s  %s" % (
        g["index"], g["name"], g["mem_free_bytes"] / 2**30, g["mem_total_bytes"] / 2**30,
        g.get("pci_bus_id") or "?", g.get("numa_node", "?"), "on" if g.get("mig_enabled") else "off", links, g["uuid"]))
ok = len(gpus) == len(smi) and all(
    str(g["index"]) == s[0] and g["uuid"] == s[1] and (not g.get("pci_bus_id") or g["pci_bus_id"].lower() == s[2].lower())
    for g, s in zip(gpus, smi))
print(("PASS" if ok else "FAIL") + ": warden gpus matches nvidia-smi (%d GPU(s): index, UUID, PCI bus id)" % len(gpus))
if not ok:
    print("    nvidia-smi: %r" % smi)
EOF
	"$W" gpus 2>&1 | indent
	if "$W" devices >"$tmp/devices.txt" 2>&1; then
		pass "warden devices"
		indent <"$tmp/devices.txt"
	else
		fail "warden devices: $(tail -n 3 "$tmp/devices.txt")"
	fi
	last=$("$PY" -c 'import json,sys; g=json.load(open(sys.argv[1])); print(g[-1]["index"] if g else -1)' "$tmp/gpus.json" 2>/dev/null || echo -1)

	step "torch"
	if timeout 120 "$PY" -c 'import sys, torch; print(torch.__version__, "CUDA", torch.version.cuda, "cards", torch.cuda.device_count()); sys.exit(0 if torch.cuda.is_available() and torch.cuda.device_count() > 0 else 1)' >"$tmp/torch.log" 2>&1; then
		has_torch=1
		echo "    torch $(tail -n1 "$tmp/torch.log")"
	else
		mode=notorch
		skip "no CUDA torch in $PY ($(tail -n1 "$tmp/torch.log")): the busy-card and per-rank card checks need it; set PYTHON"
	fi

	# --- 3. a partly busy card ------------------------------------------------
	if [ "$has_torch" = 1 ] && [ "$last" -ge 0 ]; then
		step "a busy card (GPU $last)"
		CUDA_VISIBLE_DEVICES=$last CUDA_DEVICE_ORDER=PCI_BUS_ID "$PY" "$tmp/holder.py" "$tmp/holder.json" >"$tmp/holder.log" 2>&1 &
		holder_pid=$!
		for _ in $(seq 1 90); do
			[ -s "$tmp/holder.json" ] && break
			kill -0 "$holder_pid" 2>/dev/null || break
			sleep 1
		done
		if [ -s "$tmp/holder.json" ]; then
			busy=$last
			"$PY" - "$tmp/holder.json" "$tmp/gpus.json" "$last" <<'EOF'
import json, sys
h, gpus, i = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
want = [g["uuid"] for g in gpus if g["index"] == i][0].lower().removeprefix("gpu-")
print("    holding %.1f of %.1f GiB on %s (%s)" % (h["held"] / 2**30, h["total"] / 2**30, h["name"], h["uuid"]))
ok = h["uuid"].lower().removeprefix("gpu-") == want
print(("PASS" if ok else "FAIL") + ": CUDA_VISIBLE_DEVICES=%d with CUDA_DEVICE_ORDER=PCI_BUS_ID is NVML's GPU %d (%s)" % (i, i, want))
EOF
			port=$(free_port)
			timeout 90 "$W" serve --model smoke-model --engine vllm --vllm "$tmp/vllm-stub" --dp "$ngpu" \
				--port "$port" --log-dir "$tmp/refuse-logs" >"$tmp/refuse.out" 2>"$tmp/refuse.err"
			rc=$?
			msg=$(grep -m1 'warden serve:' "$tmp/refuse.err")
			if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "GPU $busy: .* free of .*vLLM needs" "$tmp/refuse.err"; then
				pass "warden serve --dp $ngpu refuses the busy card (exit $rc):"
				echo "$msg" | fold -s -w 120 | indent
			else
				fail "warden serve --dp $ngpu with GPU $busy busy: exit $rc, want a refusal naming GPU $busy:"
				tail -n 15 "$tmp/refuse.err" | indent
			fi
		else
			fail "the holder did not take GPU $last's memory:"
			tail -n 10 "$tmp/holder.log" | indent
			kill "$holder_pid" 2>/dev/null
			holder_pid=""
		fi
	fi
fi

# --- 4. warden serve on the stub ---------------------------------------------
dp=1
serve_args=()
if [ "$mode" = cpu ]; then
	dp=${GPU_SMOKE_CPU_DP:-1}
	serve_args=(--device cpu)
	export SMOKE_STUB_NO_TORCH=1
elif [ "$busy" -ge 0 ] && [ "$ngpu" -ge 2 ]; then
	dp=$((ngpu - 1 > 4 ? 4 : ngpu - 1)) # the busy card must be skipped
else
	if [ -n "$holder_pid" ]; then
		kill "$holder_pid" 2>/dev/null
		wait "$holder_pid" 2>/dev/null
		holder_pid=""
		busy=-1
		sleep 2 # the driver frees the memory when the process is gone
	fi
	dp=$((ngpu > 4 ? 4 : ngpu))
	[ "$mode" = notorch ] && export SMOKE_STUB_NO_TORCH=1
fi
step "warden serve --engine vllm --vllm <stub> --dp $dp ${serve_args[*]+${serve_args[*]}}"
port=$(free_port)
# Data-parallel variables in the warden's environment: the engines must not get them.
VLLM_DP_SIZE=4 VLLM_DP_RANK=1 VLLM_DP_MASTER_PORT=29555 VLLM_PORT=23456 \
	"$W" serve --model smoke-model --served-model-name smoke --engine vllm --vllm "$tmp/vllm-stub" \
	--dp "$dp" ${serve_args[@]+"${serve_args[@]}"} --port "$port" --log-dir "$tmp/logs" --startup-timeout 150s --stop-grace 10s \
	>"$tmp/serve.out" 2>"$tmp/serve.err" &
warden_pid=$!
ready=0
for _ in $(seq 1 180); do
	if grep -q 'warden: ready at' "$tmp/serve.out" 2>/dev/null; then
		ready=1
		break
	fi
	kill -0 "$warden_pid" 2>/dev/null || break
	sleep 1
done
if [ "$ready" = 1 ]; then
	pass "the warden became ready on the stub engines: $(grep -m1 'warden: ready at' "$tmp/serve.out")"
	grep -E 'msg="(rank GPUs|skipping|removed from)' "$tmp/serve.err" | sed 's/^time=[^ ]* //' | indent
	if [ "$busy" -ge 0 ]; then
		if grep -q "msg=\"skipping GPU $busy: " "$tmp/serve.err"; then
			pass "the warden skipped the busy GPU $busy and said why"
		else
			fail "no 'skipping GPU $busy' line in the warden's log"
		fi
	fi
	if grep -q 'removed from every engine.s environment.*VLLM_DP_' "$tmp/serve.err"; then
		pass "the warden logged the data-parallel variables it removed"
	else
		fail "no 'removed from every engine's environment' line naming VLLM_DP_* in the warden's log"
	fi
	"$PY" "$tmp/check_ranks.py" "$mode" "$tmp/serve.err" "$tmp/logs" "$dp" "$busy" \
		"$([ "$mode" = cpu ] || echo "$tmp/gpus.json")" "$port" >"$tmp/checks.txt" 2>&1
	cat "$tmp/checks.txt"
	passes=$((passes + $(grep -c '^PASS' "$tmp/checks.txt")))
	fails=$((fails + $(grep -c '^FAIL' "$tmp/checks.txt")))
	if models=$("$PY" -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' \
		"http://127.0.0.1:$port/v1/models" 2>&1) && grep -q '"smoke"' <<<"$models"; then
		pass "GET /v1/models through the warden names the served model"
	else
		fail "GET /v1/models through the warden: $models"
	fi
	if "$W" status --url "http://127.0.0.1:$port" >"$tmp/status.txt" 2>&1; then
		pass "warden status"
		indent <"$tmp/status.txt"
	else
		fail "warden status: $(tail -n 3 "$tmp/status.txt")"
	fi
else
	fail "the warden did not become ready on the stubs; its log ends:"
	tail -n 25 "$tmp/serve.err" | indent
	for f in "$tmp"/logs/rank-*.log; do
		[ -f "$f" ] && { echo "    -- $f"; tail -n 10 "$f" | indent; }
	done
fi

# --- 5. SIGINT ----------------------------------------------------------------
if kill -0 "$warden_pid" 2>/dev/null; then
	kill -INT "$warden_pid"
	stopped=0
	for _ in $(seq 1 60); do
		if ! kill -0 "$warden_pid" 2>/dev/null; then
			stopped=1
			break
		fi
		sleep 1
	done
	wait "$warden_pid" 2>/dev/null
	rc=$?
	if [ "$stopped" = 1 ] && [ "$rc" -eq 0 ]; then
		pass "SIGINT stopped the warden (exit 0)"
	else
		fail "SIGINT: warden stopped=$stopped exit $rc; its log ends:"
		tail -n 10 "$tmp/serve.err" | indent
	fi
	warden_pid=""
	left=""
	for pid in $(grep -ho '"pid": [0-9]*' "$tmp"/logs/rank-*.log 2>/dev/null | grep -o '[0-9]*$'); do
		kill -0 "$pid" 2>/dev/null && left="$left $pid"
	done
	if [ -z "$left" ]; then
		pass "every stub engine is gone after the warden stopped"
	else
		fail "stub engines still running after the warden stopped:$left"
	fi
fi

echo
echo "gpu-smoke: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
