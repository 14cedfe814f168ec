#!/usr/bin/env node
// Runs a wasm32-wasip1 binary (e.g. a `cargo test` harness) under Node's WASI preview1.
// Cargo calls it through .cargo/config.toml: `runner = ["node", "scripts/wasm-test-runner.mjs"]`,
// so `cargo test --target wasm32-wasip1 -p llm-failover --lib` runs the unit tests inside wasm.
// Usage: node scripts/wasm-test-runner.mjs MODULE.wasm [ARGS...]
//  - args and the environment pass through; the current directory is preopened as ".", and
//    the root as "/" (fixture files read by absolute path);
//  - every import outside wasi_snapshot_preview1 (the proxy-wasm `env.proxy_*` hostcalls) is
//    stubbed with a function returning 0, so tests must not rely on hostcall results;
//  - the exit code propagates; a trap (a panic under panic=abort) exits with 101. A failing
//    test stops the whole harness (wasm has no unwinding), so later tests do not run.
import { readFile } from "node:fs/promises";
import { basename } from "node:path";

// Node 20 flags WASI as experimental; keep test output clean.
const emitWarning = process.emitWarning;
process.emitWarning = (warning, ...rest) => {
  const type = typeof rest[0] === "string" ? rest[0] : rest[0]?.type;
  if (type === "ExperimentalWarning" && String(warning).includes("WASI")) return;
  return emitWarning.call(process, warning, ...rest);
};
const { WASI } = await import("node:wasi");

const [file, ...args] = process.argv.slice(2);
if (!file) {
  console.error("usage: wasm-test-runner.mjs MODULE.wasm [ARGS...]");
  process.exit(2);
}

const wasi = new WASI({
  version: "preview1",
  args: [basename(file), ...args],
  // panic=abort ends the harness at the first failing test and would lose libtest's captured
  // output (the panic message); show output live unless the caller chose otherwise.
  env: { RUST_TEST_NOCAPTURE: "1", ...process.env },
  // "/" too, so tests may read fixture files by absolute path (env!("CARGO_MANIFEST_DIR")).
  preopens: { ".": process.cwd(), "/": "/" },
  returnOnExit: true,
});

const module = await WebAssembly.compile(await readFile(file));
const imports = { wasi_snapshot_preview1: wasi.wasiImport };
for (const imp of WebAssembly.Module.imports(module)) {
  if (imp.module === "wasi_snapshot_preview1") continue;
  if (imp.kind !== "function") {
    console.error(`wasm-test-runner: cannot stub ${imp.kind} import ${imp.module}.${imp.name}`);
    process.exit(2);
  }
  (imports[imp.module] ??= {})[imp.name] = () => 0;
}

let code;
try {
  const instance = await WebAssembly.instantiate(module, imports);
  // proxy_wasm::main! exports `_initialize` next to libtest's `_start`; node:wasi refuses
  // modules with both, so hand it the exports without `_initialize` (a command runs `_start`).
  const { _initialize, ...exports } = instance.exports;
  code = wasi.start({ exports });
} catch (err) {
  console.error(`wasm-test-runner: ${basename(file)} trapped: ${err?.message ?? err}`);
  code = 101;
}
process.exitCode = code ?? 0;
