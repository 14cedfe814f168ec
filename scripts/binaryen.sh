#!/usr/bin/env bash
# Prints the wasm-opt that scripts/build.sh runs (and scripts/module-size.sh assumes), installing
# it first when it can:
#   tools/binaryen/node_modules/.bin/wasm-opt  binaryen 132 from npm (tools/binaryen's
#       package-lock.json, `npm ci`; a Node program, so every machine with Node >= 20 and npm
#       gets the same version): the module is about 5 KB smaller than with Debian's wasm-opt 108
#       (BENCHMARKS-journal.md "Module size: the fourth wave's cuts");
#   wasm-opt on PATH (Debian's binaryen 108) when npm or the registry is not there;
#   nothing (exit 1) when neither is.
#   scripts/binaryen.sh [--no-install]
set -euo pipefail
cd "$(dirname "$0")/.."

dir=tools/binaryen
bin=$dir/node_modules/.bin/wasm-opt
lock="$(sha256sum "$dir/package-lock.json" | cut -c1-16)"
runs() { "$bin" --version >/dev/null 2>&1; }
if [ "${1:-}" != --no-install ] && command -v npm >/dev/null &&
  { [ "$(cat "$dir/node_modules/.setup-stamp" 2>/dev/null)" != "$lock" ] || ! runs; }; then
  echo "binaryen: installing binaryen from $dir/package-lock.json (npm ci, at most 300 s)" >&2
  if (cd "$dir" && timeout 300 npm ci --no-audit --no-fund --loglevel=error >&2) && runs; then
    echo "$lock" >"$dir/node_modules/.setup-stamp"
  else
    echo "binaryen: npm ci failed; falling back to wasm-opt on PATH" >&2
  fi
fi
if runs; then
  echo "$PWD/$bin"
elif command -v wasm-opt >/dev/null; then
  command -v wasm-opt
else
  exit 1
fi
