"""scripts/oci-image.sh: an OCI image layout of the module in Istio's Wasm image format
("compat": one tar+gzip layer holding plugin.wasm), built offline and reproducibly."""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from harness import REPO_ROOT, external_mode

import istio_shape as ist

pytestmark = pytest.mark.skipif(external_mode(), reason="checks a build artifact, not a gateway")

SCRIPT = REPO_ROOT / "scripts/oci-image.sh"



def build(out: Path, tag: str = "test", wasm: Path | None = None, variant: str = "compat") -> str:
    r = subprocess.run([str(SCRIPT), "--out", str(out), "--tag", tag, "--variant", variant,
                        "--wasm", str(wasm or ist.module_path())],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_layout_index_manifest_digests_and_the_wasm_inside(tmp_path):
    out = tmp_path / "oci"
    build(out, "0.1.0")
    assert json.loads((out / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads((out / "index.json").read_text())
    assert index["schemaVersion"] == 2
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"
    (entry,) = index["manifests"]
    assert entry["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == "0.1.0"
    # Every blob is stored under its own digest (ist.blob checks it) with the size recorded.
    blobs = sorted(p.name for p in (out / "blobs/sha256").iterdir())
    for name in blobs:
        assert hashlib.sha256((out / "blobs/sha256" / name).read_bytes()).hexdigest() == name
    m = ist.manifest_of(out, "0.1.0")
    assert m["schemaVersion"] == 2 and m["mediaType"] == entry["mediaType"]
    assert m["annotations"]["module.wasm.image/variant"] == "compat"
    assert m["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    (layer,) = m["layers"]
    assert layer["mediaType"] == ist.OCI_LAYER
    for ref in (m["config"], layer):
        assert len(ist.blob(out, ref["digest"])) == ref["size"]
    assert sorted([entry["digest"], m["config"]["digest"], layer["digest"]]) == \
        sorted(f"sha256:{b}" for b in blobs)
    # The layer is a gzip'd tar with exactly plugin.wasm, byte-identical to dist's module; the
    # config's diff_id is the uncompressed tar's digest.
    raw = gzip.decompress(ist.blob(out, layer["digest"]))
    config = json.loads(ist.blob(out, m["config"]["digest"]))
    assert config["rootfs"] == {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest()]}
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        assert tar.getnames() == ["plugin.wasm"]
    assert ist.wasm_from_layout(out, "0.1.0") == ist.module_path().read_bytes()


def test_oci_variant_has_the_runtime_config_and_the_module_as_its_two_layers(tmp_path):
    out = tmp_path / "oci"
    build(out, "0.1.0", variant="oci")
    m = ist.manifest_of(out, "0.1.0")
    assert [layer["mediaType"] for layer in m["layers"]] == [
        "application/vnd.module.wasm.config.v1+json", ist.WASM_LAYER]
    assert m["config"]["mediaType"] == "application/vnd.module.wasm.config.v1+json"
    runtime = json.loads(ist.blob(out, m["layers"][0]["digest"]))
    assert runtime == {"type": "envoy_proxy", "abiVersions": ["v0.2.1"],
                       "config": {"rootIds": ["llm_failover"]}}
    assert ist.blob(out, m["layers"][1]["digest"]) == ist.module_path().read_bytes()
    assert ist.wasm_from_layout(out, "0.1.0") == ist.module_path().read_bytes()
    assert "module.wasm.image/variant" not in m["annotations"]


def test_same_module_same_digests_other_module_other_digests(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    build(a)
    build(b)
    assert (a / "index.json").read_bytes() == (b / "index.json").read_bytes()
    other = tmp_path / "other.wasm"
    other.write_bytes(ist.module_path().read_bytes() + b"\0")
    c = tmp_path / "c"
    build(c, wasm=other)
    assert (c / "index.json").read_bytes() != (a / "index.json").read_bytes()
    assert ist.wasm_from_layout(c, "test") == other.read_bytes()


def test_a_missing_module_is_an_error_not_an_empty_image(tmp_path):
    r = subprocess.run([str(SCRIPT), "--out", str(tmp_path / "o"), "--wasm", str(tmp_path / "no.wasm")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "not found" in r.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(shutil.which("skopeo") is None, reason="skopeo is not installed")
@pytest.mark.parametrize("variant", ["compat", "oci"])
def test_skopeo_reads_and_copies_the_layout(tmp_path, variant):
    """An independent OCI tool accepts the layout (skopeo verifies digests when copying)."""
    build(tmp_path / "oci", "1.2.3", variant=variant)
    r = subprocess.run(["skopeo", "copy", "-q", f"oci:{tmp_path / 'oci'}:1.2.3", f"dir:{tmp_path / 'dir'}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    m = json.loads((tmp_path / "dir/manifest.json").read_text())
    assert m == ist.manifest_of(tmp_path / "oci", "1.2.3")
