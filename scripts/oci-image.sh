#!/usr/bin/env bash
# Builds an OCI image layout (a directory, no registry needed) holding dist/llm_failover.wasm in
# the Wasm image format Istio pulls (istio-agent, pkg/wasm/imagefetcher.go). Variant "compat"
# (default): one application/vnd.oci.image.layer.v1.tar+gzip layer holding plugin.wasm, with the
# manifest annotation module.wasm.image/variant=compat; any OCI registry stores it. Variant
# "oci": two layers, the runtime config (application/vnd.module.wasm.config.v1+json) and the
# module itself (application/vnd.module.wasm.content.layer.v1+wasm), for registries that take
# custom artifact media types.
#
#   scripts/oci-image.sh [--wasm FILE] [--out DIR] [--tag TAG] [--variant compat|oci]
#     --wasm     the module (default dist/llm_failover.wasm; ./scripts/build.sh makes it)
#     --out      the layout directory (default dist/oci; replaced)
#     --tag      the reference name recorded in index.json (default the crate version)
#     --variant  compat (default) or oci
#
# Only tar, gzip, sha256sum and python3 are used. The result is reproducible: the same module
# gives the same digests (fixed tar metadata, gzip without name or time, canonical JSON).
# Push it to a registry with any OCI tool, e.g.
#   skopeo copy oci:dist/oci:0.1.0 docker://ghcr.io/you/llm-failover:0.1.0
#   crane push dist/oci ghcr.io/you/llm-failover:0.1.0
#   oras cp --from-oci-layout dist/oci:0.1.0 ghcr.io/you/llm-failover:0.1.0
# and name it in the failover file's istio: {module: oci://ghcr.io/you/llm-failover:0.1.0}.
set -euo pipefail
cd "$(dirname "$0")/.."

wasm=dist/llm_failover.wasm
out=dist/oci
variant=compat
tag=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
while [ $# -gt 0 ]; do
  case "$1" in
    --wasm) wasm=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --variant) variant=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "oci-image: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -f "$wasm" ] || { echo "oci-image: $wasm not found: run ./scripts/build.sh first" >&2; exit 1; }
[ -n "$tag" ] || { echo "oci-image: no --tag and no version in Cargo.toml" >&2; exit 1; }
case "$variant" in compat|oci) ;; *) echo "oci-image: --variant is compat or oci" >&2; exit 2 ;; esac
for tool in tar gzip sha256sum python3; do
  command -v "$tool" >/dev/null || { echo "oci-image: $tool is needed" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
install -m 0644 "$wasm" "$work/plugin.wasm"
tar --format=ustar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
  -C "$work" -cf "$work/layer.tar" plugin.wasm
gzip -9 -n <"$work/layer.tar" >"$work/layer.tar.gz"

rm -rf "$out"
mkdir -p "$out/blobs/sha256"
blob() { # FILE -> prints its digest, stores it under blobs/sha256/
  local d
  d=$(sha256sum "$1" | cut -d' ' -f1)
  cp "$1" "$out/blobs/sha256/$d"
  echo "$d"
}
# JSON documents: sorted keys, no spaces, so their digests depend on their content only.
if [ "$variant" = compat ]; then
  diff_id=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
  layer=$(blob "$work/layer.tar.gz")
  WORK=$work DIFF_ID=$diff_id python3 - <<'PY'
import json, os
doc = {"architecture": "wasm", "os": "wasip1", "config": {},
       "rootfs": {"type": "layers", "diff_ids": ["sha256:" + os.environ["DIFF_ID"]]}}
with open(os.path.join(os.environ["WORK"], "config.json"), "w") as f:
    f.write(json.dumps(doc, sort_keys=True, separators=(",", ":")))
PY
  config=$(blob "$work/config.json")
else
  layer=$(blob "$work/plugin.wasm")
  WORK=$work python3 - <<'PY'
import json, os
# The module's proxy-wasm ABI and root id (what the filter configs name).
doc = {"type": "envoy_proxy", "abiVersions": ["v0.2.1"], "config": {"rootIds": ["llm_failover"]}}
with open(os.path.join(os.environ["WORK"], "config.json"), "w") as f:
    f.write(json.dumps(doc, sort_keys=True, separators=(",", ":")))
PY
  config=$(blob "$work/config.json")
fi
WORK=$work OUT=$out LAYER=$layer CONFIG=$config VARIANT=$variant python3 - <<'PY'
import json, os
work, out, variant = os.environ["WORK"], os.environ["OUT"], os.environ["VARIANT"]
size = lambda d: os.path.getsize(os.path.join(out, "blobs", "sha256", d))
config, layer = os.environ["CONFIG"], os.environ["LAYER"]
if variant == "compat":
    config_ref = {"mediaType": "application/vnd.oci.image.config.v1+json",
                  "digest": "sha256:" + config, "size": size(config)}
    layers = [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
               "digest": "sha256:" + layer, "size": size(layer),
               "annotations": {"org.opencontainers.image.title": "plugin.wasm"}}]
    annotations = {"module.wasm.image/variant": "compat"}
else:
    config_ref = {"mediaType": "application/vnd.module.wasm.config.v1+json",
                  "digest": "sha256:" + config, "size": size(config)}
    layers = [dict(config_ref, annotations={"org.opencontainers.image.title": "runtime-config.json"}),
              {"mediaType": "application/vnd.module.wasm.content.layer.v1+wasm",
               "digest": "sha256:" + layer, "size": size(layer),
               "annotations": {"org.opencontainers.image.title": "plugin.wasm"}}]
    annotations = {}
manifest = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": config_ref,
    "layers": layers,
    "annotations": dict(annotations, **{"org.opencontainers.image.title": "llm-failover"}),
}
with open(os.path.join(work, "manifest.json"), "w") as f:
    f.write(json.dumps(manifest, sort_keys=True, separators=(",", ":")))
PY
manifest=$(blob "$work/manifest.json")
TAG=$tag OUT=$out MANIFEST=$manifest python3 - <<'PY'
import json, os
out, d = os.environ["OUT"], os.environ["MANIFEST"]
index = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.index.v1+json",
    "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                   "digest": "sha256:" + d,
                   "size": os.path.getsize(os.path.join(out, "blobs", "sha256", d)),
                   "annotations": {"org.opencontainers.image.ref.name": os.environ["TAG"]}}],
}
with open(os.path.join(out, "index.json"), "w") as f:
    json.dump(index, f, sort_keys=True, indent=2)
with open(os.path.join(out, "oci-layout"), "w") as f:
    json.dump({"imageLayoutVersion": "1.0.0"}, f)
PY
echo "oci-image: $out ($variant variant, tag $tag, manifest sha256:$manifest, module sha256:$(sha256sum "$wasm" | cut -d' ' -f1))"
