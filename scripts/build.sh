#!/usr/bin/env bash
# Builds the Envoy filter and the host CLI:
#   dist/llm_failover.wasm        the proxy-wasm module to load in Envoy (release, wasm-opt'ed:
#                                 binaryen 132 from npm, scripts/binaryen.sh, else Debian's
#                                 wasm-opt when installed)
#   dist/libllm_failover.so       the same filter as an Envoy dynamic module (Envoy 1.40/1.41;
#                                 package llm-failover-native, host toolchain, docs/native.md)
#   target/release/llm-failover   the host CLI (package llm-failover-cli)
# The wasm toolchain is picked automatically; LLM_FAILOVER_TOOLCHAIN forces one:
#   rustup  rustup's stable with the wasm32-wasip1 target (added with a bounded
#           `rustup target add` when missing)
#   debian  Debian's rustc-web/cargo-web building std from source (-Zbuild-std), into
#           target/debian so artifacts of the two compilers never mix
#   auto    (default) rustup when the target is there or can be added in 120 s, else debian
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=${LLM_FAILOVER_TOOLCHAIN:-auto}
TARGET=wasm32-wasip1
TDIR=${CARGO_TARGET_DIR:-target}
DEB_PKGS=(rustc-web cargo-web rust-web-src lld-22 wasi-libc rustfmt-web rust-web-clippy)
mkdir -p dist target
if command -v flock >/dev/null; then # one build at a time per checkout
  exec 9>target/.build.lock
  flock 9
fi

has_target() { rustup target list --installed 2>/dev/null | grep -qx "$TARGET"; }
with_timeout() { if command -v timeout >/dev/null; then timeout "$@"; else shift; "$@"; fi; }

if [ "$MODE" = auto ]; then
  MODE=debian
  if command -v rustup >/dev/null; then
    if has_target; then
      MODE=rustup
    else
      echo "build: adding the $TARGET target with rustup (at most 120 s)"
      if with_timeout 120 rustup target add "$TARGET" && has_target; then MODE=rustup; fi
    fi
  fi
fi

# Panic locations name source files; without the machine's cargo registry prefix
# (/root/.cargo/registry/src/index.crates.io-…/serde_json-1.0.154/src/de.rs becomes
# serde_json-1.0.154/src/de.rs) the module is smaller and the same wherever it is
# built. The wasm target's flags only: host build scripts and the CLI are untouched.
remap=""
for d in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/; do
  case "$d" in *" "*) ;; *) [ -d "$d" ] && remap="$remap --remap-path-prefix=$d=" ;; esac
done

start=$SECONDS
case "$MODE" in
  rustup)
    has_target || with_timeout 120 rustup target add "$TARGET"
    CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS="${remap# }" \
      cargo build --release --target "$TARGET" -p llm-failover-module
    raw=$TDIR/$TARGET/release/llm_failover_module.wasm
    ;;
  debian)
    missing=()
    for p in "${DEB_PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    if [ ${#missing[@]} -gt 0 ]; then
      if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        echo "build: the Debian toolchain is missing. Run:"
        echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}"
        exit 1
      fi
      echo "build: installing ${missing[*]}"
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    # Debian's cargo/rustc only (PATH), never rustup's rustc with Debian's std sources (built
    # here, so their paths are remapped too).
    std_src=$(/usr/bin/rustc --print sysroot)/lib/rustlib/src/rust/
    case "$std_src" in *" "*) ;; *) remap="$remap --remap-path-prefix=$std_src=" ;; esac
    env -u RUSTUP_TOOLCHAIN PATH=/usr/bin:/bin RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 \
      CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS="-C link-self-contained=no -L native=/usr/lib/wasm32-wasi$remap" \
      cargo build --release --target "$TARGET" -p llm-failover-module \
      --target-dir "$TDIR/debian" -Zbuild-std=std,panic_abort
    raw=$TDIR/debian/$TARGET/release/llm_failover_module.wasm
    ;;
  *) echo "build: LLM_FAILOVER_TOOLCHAIN must be auto, rustup or debian (got '$MODE')"; exit 2 ;;
esac
echo "build: wasm built with the $MODE toolchain in $((SECONDS - start)) s"

# The wasm-opt is binaryen 132 from npm (scripts/binaryen.sh installs it into tools/binaryen):
# about 5 KB smaller a module than Debian's wasm-opt 108 with the same flags, and no slower
# (BENCHMARKS-journal.md "Module size: the fourth wave's cuts"); Debian's when npm is not there.
# wasm-opt 108 (Debian) predates some features rustc enables by default: name them. The
# producers and target-features sections are metadata for tools, not for Envoy (-300 bytes);
# --converge would take another 0.6 KB for twice the time, not worth it on every build.
# --low-memory-unused (-2.9 KB) lets wasm-opt fold a pointer's small constant offsets into its
# loads and stores: it may assume no address is computed by wrapping around into the first
# 1 KB of memory, which Rust code never does (its pointer arithmetic never wraps; the first
# 1 KB is the far end of the 1 MB stack); BENCHMARKS.md "Module size".
out=dist/llm_failover.wasm
opt_flags=(-Oz --low-memory-unused --strip-debug --strip-producers --strip-target-features --enable-bulk-memory --enable-sign-ext --enable-mutable-globals
  --enable-nontrapping-float-to-int --enable-multivalue --enable-reference-types)
# wasm-opt takes 15-80 s on two cores and CI builds four times (one per Envoy pass): an
# unchanged cargo output with the same wasm-opt and flags keeps the module already optimized.
stamp=dist/.llm_failover.wasm.from
opt_note="not optimized (wasm-opt not installed)"
if wasm_opt=$(./scripts/binaryen.sh); then
  key="$(sha256sum <"$raw" | cut -d' ' -f1) $("$wasm_opt" --version) ${opt_flags[*]}"
  if [ -f "$out" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
    opt_note="unchanged since the last build (wasm-opt skipped)"
    cp "$out" "$out.tmp"
  elif "$wasm_opt" "${opt_flags[@]}" "$raw" -o "$out.tmp"; then
    opt_note="$("$wasm_opt" --version | cut -d' ' -f1-3) -Oz: $(wc -c <"$raw") -> $(wc -c <"$out.tmp") bytes"
    printf '%s' "$key" >"$stamp"
  else
    opt_note="not optimized (wasm-opt failed, unoptimized module kept)"
    rm -f "$stamp"
    cp "$raw" "$out.tmp"
  fi
else
  rm -f "$stamp"
  cp "$raw" "$out.tmp"
fi
mv "$out.tmp" "$out"
echo "build: $out: $(wc -c <"$out") bytes, $opt_note, toolchain: $MODE"

# Host builds: rustup's cargo when it works, otherwise Debian's.
host_cargo() {
  if cargo --version >/dev/null 2>&1; then
    cargo "$@"
  else
    env PATH=/usr/bin:/bin RUSTC=/usr/bin/rustc cargo "$@"
  fi
}

# The native module: the host target, the `native` profile (release with unwinding, so a
# panic fails one request closed instead of aborting Envoy).
start=$SECONDS
host_cargo build --profile native -p llm-failover-native
cp "$TDIR/native/libllm_failover.so" dist/libllm_failover.so.tmp
mv dist/libllm_failover.so.tmp dist/libllm_failover.so
echo "build: dist/libllm_failover.so: $(wc -c <dist/libllm_failover.so) bytes, in $((SECONDS - start)) s"

start=$SECONDS
host_cargo build --release -p llm-failover-cli
echo "build: $TDIR/release/llm-failover built in $((SECONDS - start)) s"
