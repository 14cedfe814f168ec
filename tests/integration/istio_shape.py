"""Test-only stand-in for istiod + istio-agent: an Istio-shaped gateway bootstrap, and the
rendered EnvoyFilter patches applied to it the way istiod applies them.

No Kubernetes runs here. What this reproduces, from Istio's sources (pilot/pkg/networking/
core/envoyfilter, pilot/pkg/model/gateway.go, pkg/wasm/convert.go):

* the names istiod gives a gateway's objects: listener ``0.0.0.0_<target port>``, route
  configuration ``http.<target port>``, virtual host ``<host>:<server port>``, the route named
  after the VirtualService's http route (here a direct response, as the rendered
  VirtualService says), clusters ``outbound|<port>||<host>`` built from the ServiceEntry and
  DestinationRule (TLS origination with the DR's sni and SANs, Istio's default circuit
  breakers, HTTP/1.1 for an HTTP port), the gateway's HTTP filter order ending
  ``fault, cors, istio.stats, router`` (``istio.stats`` is not in stock Envoy: a no-op stand-in
  under that name), Istio's stats matcher inclusion list and Istio-style stats tags; the
  rendered bootstrap override goes to Envoy as ``--config-yaml``, as pilot-agent passes it;
* how patches apply: by context, listener / filter chain / sub-filter, route configuration /
  virtual host / route, and cluster names; operations MERGE (proto merge: scalars replaced,
  messages merged, lists appended, map entries and ``Any`` values replaced, a oneof member
  clears its siblings; a NETWORK_FILTER MERGE merges the typed configs themselves, as
  listener_patch.go's MergeAnyWithAny does), MERGE_AND_REPLACE_LIST (the same, lists
  replaced; Istio 1.31+), ADD, INSERT_BEFORE;
* what the release's istiod does with a patch (``Applier(release=...)``): Istio 1.30.3 has no
  MERGE_AND_REPLACE_LIST (its envoyfilter package knows MERGE, ADD, REMOVE, REPLACE and the
  INSERTs only; such a patch is reported as not applied), and it reads patch values with
  ``xds.BuildXDSObjectFromStruct(..., strict=false)`` (pilot/pkg/model/envoyfilter.go), i.e.
  ``protomarshal.UnmarshalAllowUnknown``: a field its go-control-plane (v1.37.1-0.20260409...,
  Envoy 1.38's API) does not know is dropped without a word (``UNKNOWN_FIELDS``);
* a route Istio makes of a VirtualService ``directResponse`` has no route action, hence no retry
  policy (route.go translateRoute: ``ApplyDirectResponse``; only applyHTTPRouteDestination sets
  Istio's default retry policy);
* EXTENSION_CONFIG entries delivered over ECDS: istiod serves them over ADS; here every
  ``config_discovery`` source is turned into a file-based source and each entry is written as a
  discovery response file (the transport differs, the filter config Envoy gets does not);
* istio-agent's module download: ``vm_config.code.remote`` becomes ``local``, a file holding
  the module taken from the OCI image layout the way istio-agent takes it (``wasm_from_layout``).

Every patch must apply somewhere: ``apply()`` reports the ones that matched nothing.
"""
from __future__ import annotations

import copy
import hashlib
import io
import json
import os
import re
import tarfile
from pathlib import Path
from typing import Any

from harness import REPO_ROOT

WASM_TYPE = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"
TEC_TYPE = "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig"
RBAC_TYPE = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC"
HPO_KEY = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
HCM = "envoy.filters.network.http_connection_manager"
UINT32_MAX = 4294967295

# Proto oneofs of the messages the patches touch: setting one member clears the others.
ONEOFS = [
    {"route", "redirect", "direct_response", "filter_action", "non_forwarding_action"},
    {"cluster", "cluster_header", "weighted_clusters", "cluster_specifier_plugin",
     "inline_cluster_specifier_plugin"},
    {"typed_config", "config_discovery"},
    {"explicit_http_config", "use_downstream_protocol_config", "auto_config"},
    {"local", "remote"},
]
# Fields istiod's go-control-plane does not know, by Istio release: dropped from patch values.
# Istio 1.30.3 pins go-control-plane/envoy v1.37.1-0.20260409083702-98966259b99a, whose
# route_components.pb.go has no refresh_cluster_on_retry (added for Envoy 1.39).
UNKNOWN_FIELDS = {"1.30": {"refresh_cluster_on_retry"}}
# Patch operations a release's EnvoyFilter API has.
OPERATIONS = {"1.30": {"MERGE", "ADD", "REMOVE", "REPLACE", "INSERT_BEFORE", "INSERT_AFTER",
                       "INSERT_FIRST"}}
# Proto map fields: an entry is replaced whole by the patch's entry of the same key.
MAP_FIELDS = {"typed_extension_protocol_options", "map", "filter_metadata",
              "typed_filter_config", "typed_per_filter_config"}


def module_path() -> Path:
    """The module the tests run (LLM_FAILOVER_WASM, else dist/llm_failover.wasm)."""
    return Path(os.environ.get("LLM_FAILOVER_WASM") or REPO_ROOT / "dist/llm_failover.wasm")


def envoy_minor() -> tuple[int, int]:
    """(major, minor) of the Envoy the suite runs (harness.envoy_bin())."""
    import subprocess

    from harness import envoy_bin

    out = subprocess.run([envoy_bin(), "--version"], capture_output=True, text=True,
                         timeout=30).stdout
    m = re.search(r"/(\d+)\.(\d+)\.\d+/", out)
    if not m:
        raise RuntimeError(f"cannot read the Envoy version from {out!r}")
    return int(m.group(1)), int(m.group(2))


def load_manifests(path: Path) -> list[dict]:
    import yaml  # PyYAML (tests/integration/requirements.txt); only the manifests need it

    return [d for d in yaml.safe_load_all(Path(path).read_text()) if d]


def of_kind(manifests: list[dict], kind: str) -> list[dict]:
    return [m for m in manifests if m["kind"] == kind]


# ------------------------------------------------------------------ proto merge semantics
def proto_merge(dst: dict, src: dict, replace_lists: bool) -> None:
    """Go's proto.Merge on the JSON form (Istio's merge.Merge / MergeWithReplaceList)."""
    for key, value in src.items():
        for group in ONEOFS:
            if key in group:
                for sibling in group - {key}:
                    dst.pop(sibling, None)
        if key in MAP_FIELDS and isinstance(value, dict):
            entries = dst.setdefault(key, {})
            for k, v in value.items():
                entries[k] = copy.deepcopy(v)
        elif isinstance(value, dict):
            if "@type" in value or not isinstance(dst.get(key), dict):
                dst[key] = copy.deepcopy(value)  # an Any is replaced whole
            elif "@type" in dst[key] and dst[key]["@type"] != value.get("@type", dst[key]["@type"]):
                dst[key] = copy.deepcopy(value)
            else:
                proto_merge(dst[key], value, replace_lists)
        elif isinstance(value, list):
            if replace_lists or not isinstance(dst.get(key), list):
                dst[key] = copy.deepcopy(value)
            else:
                dst[key] = dst[key] + copy.deepcopy(value)
        else:
            dst[key] = value


def merge_op(operation: str) -> bool | None:
    """True/False: a merge that replaces/appends lists; None: not a merge."""
    return {"MERGE": False, "MERGE_AND_REPLACE_LIST": True}.get(operation)


# ------------------------------------------------------------------ the gateway Istio builds
def istio_cluster(se: dict, dr: dict | None, address: str, port: int, ca_file: str) -> dict:
    """What istiod makes of a ServiceEntry (+ DestinationRule) for a gateway, with the
    endpoint pointed at a local mock."""
    spec = se["spec"]
    host = spec["hosts"][0]
    sport = spec["ports"][0]
    policy = (dr or {}).get("spec", {}).get("trafficPolicy", {})
    name = f"outbound|{sport['number']}||{host}"
    cluster = {
        "name": name,
        "alt_stat_name": f"{name};",  # util.DelimitedStatsPrefix
        "type": "STATIC",  # LOGICAL_DNS for DNS_ROUND_ROBIN in Istio; the mock is an IP
        "connect_timeout": policy.get("connectionPool", {}).get("tcp", {}).get("connectTimeout", "10s"),
        "lb_policy": "LEAST_REQUEST",
        "circuit_breakers": {"thresholds": [{
            "max_connections": UINT32_MAX, "max_pending_requests": UINT32_MAX,
            "max_requests": UINT32_MAX, "max_retries": UINT32_MAX, "track_remaining": True}]},
        "common_lb_config": {},
        "metadata": {"filter_metadata": {"istio": {"services": [
            {"host": host, "name": host, "namespace": se["metadata"]["namespace"]}]}}},
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [{"endpoint": {
            "address": {"socket_address": {"address": address, "port_value": port}}}}]}]},
        "typed_extension_protocol_options": {HPO_KEY: {
            "@type": f"type.googleapis.com/{HPO_KEY}",
            "common_http_protocol_options": {"idle_timeout": "3600s"},
            "explicit_http_config": (
                {"http2_protocol_options": {}} if sport["protocol"] == "HTTP2"
                else {"http_protocol_options": {}}),
        }},
    }
    tls = policy.get("tls")
    if tls and tls.get("mode") == "SIMPLE":
        context: dict[str, Any] = {"common_tls_context": {
            # Istio serves the "system" root over SDS; a file is the stand-in.
            "combined_validation_context": {
                "default_validation_context": {"match_subject_alt_names": [
                    {"exact": san} for san in tls.get("subjectAltNames", [])]},
                "validation_context_sds_secret_config": {
                    "name": "file-root:system",
                    "sds_config": {"path_config_source": {"path": "@SDS@"}, "resource_api_version": "V3"}},
            }}}
        if tls.get("sni"):
            context["sni"] = tls["sni"]
        else:  # Istio: no sni in the DR -> auto_sni (+ auto_san_validation without SANs)
            upstream = cluster["typed_extension_protocol_options"][HPO_KEY]
            upstream["upstream_http_protocol_options"] = {
                "auto_sni": True, "auto_san_validation": not tls.get("subjectAltNames")}
        cluster["transport_socket"] = {"name": "envoy.transport_sockets.tls", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
            **context}}
    return cluster


def _sds_root(ca_file: str) -> dict:
    return {"resources": [{
        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
        "name": "file-root:system",
        "validation_context": {"trusted_ca": {"filename": ca_file}}}]}


def gateway_bootstrap(manifests: list[dict], *, listen_port: int, admin_port: int,
                      endpoints: dict[str, tuple[str, int]], ca_file: str, workdir: Path,
                      stats_inclusion_regexps: list[str]) -> dict:
    """The bootstrap + static resources an Istio ingress gateway would run with, before any
    EnvoyFilter: `endpoints` maps each ServiceEntry host to the local (address, port) of its mock.
    The bootstrap override is not merged here: pilot-agent hands it to Envoy as --config-yaml
    (bootstrap_override gives its text)."""
    (gateway,) = of_kind(manifests, "Gateway")
    (vs,) = of_kind(manifests, "VirtualService")
    server = gateway["spec"]["servers"][0]
    target_port = 8080  # the gateway Service maps the server port to the pod's 8080
    drs = {d["spec"]["host"]: d for d in of_kind(manifests, "DestinationRule")}
    sds = workdir / "sds-root.json"
    sds.write_text(json.dumps(_sds_root(ca_file)))
    clusters = []
    for se in of_kind(manifests, "ServiceEntry"):
        host = se["spec"]["hosts"][0]
        address, port = endpoints[host]
        c = istio_cluster(se, drs.get(host), address, port, ca_file)
        ts = c.get("transport_socket")
        if ts:
            sds_cfg = ts["typed_config"]["common_tls_context"]["combined_validation_context"][
                "validation_context_sds_secret_config"]["sds_config"]
            sds_cfg["path_config_source"]["path"] = str(sds)
        clusters.append(c)
    clusters.append({"name": "BlackHoleCluster", "type": "STATIC", "connect_timeout": "10s"})

    routes = []
    for r in vs["spec"]["http"]:
        route: dict[str, Any] = {"name": r["name"], "match": {"prefix": "/"},
                                 "decorator": {"operation": f"{r['name']}:{server['port']['number']}/*"}}
        if "directResponse" in r:
            d = r["directResponse"]
            route["direct_response"] = {"status": d["status"],
                                        "body": {"inline_string": d["body"]["string"]}}
        routes.append(route)
    vhosts = [{"name": f"{h}:{server['port']['number']}", "domains": [h],
               "include_request_attempt_count": True, "routes": copy.deepcopy(routes)}
              for h in vs["spec"]["hosts"]]

    def noop(name: str) -> dict:
        return {"name": name, "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation",
            "mutations": {}}}

    http_filters = [
        noop("istio.metadata_exchange"),
        {"name": "envoy.filters.http.fault", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault"}},
        {"name": "envoy.filters.http.cors", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.cors.v3.Cors"}},
        noop("istio.stats"),
        {"name": "envoy.filters.http.router", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}},
    ]
    listener = {
        "name": f"0.0.0.0_{target_port}",
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": listen_port}},
        "filter_chains": [{"filters": [{"name": HCM, "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
            "stat_prefix": f"outbound_0.0.0.0_{target_port}",
            "use_remote_address": True,
            "normalize_path": True,
            "server_name": "istio-envoy",
            "access_log": [{"name": "envoy.access_loggers.file", "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
                "path": "/dev/stdout",
                "log_format": {"text_format_source": {"inline_string":
                    "[%START_TIME%] \"%REQ(:METHOD)% %REQ(:PATH)%\" %RESPONSE_CODE% %RESPONSE_FLAGS% "
                    "attempts=%UPSTREAM_REQUEST_ATTEMPT_COUNT% cluster=%UPSTREAM_CLUSTER% "
                    "llm_failover=%FILTER_STATE(wasm.llm_failover.attempts:PLAIN)%\n"}}}}],
            "route_config": {"name": f"http.{target_port}", "virtual_hosts": vhosts,
                             "validate_clusters": False},
            "http_filters": http_filters,
        }}]}],
    }
    stats_config: dict[str, Any] = {
        "use_all_default_tags": False,
        "stats_tags": [
            # tools/packaging/common/envoy_bootstrap.json (1.30.3): cluster stat names end in ";"
            {"tag_name": "cluster_name", "regex": r"^cluster(\.(.+);)"},
            {"tag_name": "component", "regex": r"(component\.(.+?)\.)"},
            {"tag_name": "wasm_filter", "regex": r"(wasm_filter\.(.+?)\.)"},
        ],
        "stats_matcher": {"inclusion_list": {"patterns": [
            {"prefix": "reporter="}, {"prefix": "cluster_manager"}, {"prefix": "listener_manager"},
            {"prefix": "server"}, {"prefix": "cluster.xds-grpc"}, {"prefix": "wasm"},
            *[{"safe_regex": {"regex": r}} for r in stats_inclusion_regexps],
            {"prefix": "component"}, {"prefix": "istio"}]}},
    }
    bootstrap = {
        "node": {"id": "router~127.0.0.1~istio-ingressgateway-0.istio-system~istio-system.svc.cluster.local",
                 "cluster": "istio-ingressgateway.istio-system"},
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin_port}}},
        "stats_config": stats_config,
        "static_resources": {"listeners": [listener], "clusters": clusters},
    }
    return bootstrap


# ------------------------------------------------------------------ applying EnvoyFilters
class Applier:
    """Applies EnvoyFilter configPatches to a gateway bootstrap (context GATEWAY)."""

    def __init__(self, bootstrap: dict, workdir: Path, module_file: Path,
                 fetch_fails: dict[str, str] | None = None, withhold: set[str] = frozenset(),
                 release: str = "1.31", dns: dict[str, tuple[str, int]] | None = None):
        """`fetch_fails` {extension config name: how}: the module download fails for that entry
        and istio-agent puts an RBAC filter in its place: "policy" as istio-agent does
        (allow-all when the config fails open, deny-all otherwise), "allow" the allow-all one
        whatever the config says. `withhold`: extension configs whose discovery file starts
        with no resource; `deliver(name)` puts the entry in place later. `release`: the Istio
        release whose istiod applies the patches. `dns`: the test's stand-in for DNS, for
        clusters a patch adds: {host name: (address, port)} of its mock."""
        self.b = bootstrap
        self.release = release
        self.dns = dns or {}
        self.workdir = workdir
        self.module_file = module_file
        self.fetch_fails = fetch_fails or {}
        self.withhold = withhold
        self.withheld: dict[str, str] = {}
        self.unapplied: list[str] = []
        self.extension_files: dict[str, Path] = {}

    # -- matching
    @staticmethod
    def _context_ok(match: dict) -> bool:
        return match.get("context", "ANY") in ("ANY", "GATEWAY")

    def _listeners(self, lm: dict) -> list[dict]:
        out = []
        for lst in self.b["static_resources"]["listeners"]:
            if lm.get("name") and lst["name"] != lm["name"]:
                continue
            if lm.get("portNumber") and not lst["name"].endswith(f"_{lm['portNumber']}"):
                continue
            out.append(lst)
        return out

    @staticmethod
    def _hcms(listener: dict, fcm: dict | None) -> list[dict]:
        out = []
        for chain in listener["filter_chains"]:
            for f in chain["filters"]:
                want = (fcm or {}).get("filter", {}).get("name")
                if want and f["name"] != want:
                    continue
                if f["name"] == HCM:
                    out.append(f["typed_config"])
        return out

    def _route_configs(self, rm: dict) -> list[dict]:
        out = []
        for lst in self.b["static_resources"]["listeners"]:
            for hcm in self._hcms(lst, None):
                rc = hcm.get("route_config")
                if rc and (not rm.get("name") or rc["name"] == rm["name"]):
                    out.append(rc)
        return out

    def _clusters(self, cm: dict) -> list[dict]:
        out = []
        for c in self.b["static_resources"]["clusters"]:
            if cm.get("name"):
                if c["name"] == cm["name"]:
                    out.append(c)
                continue
            parts = c["name"].split("|")
            if len(parts) != 4:
                continue
            if cm.get("portNumber") and str(cm["portNumber"]) != parts[1]:
                continue
            if cm.get("service") and cm["service"] != parts[3]:
                continue
            out.append(c)
        return out

    # -- operations, in the order istiod generates: listeners, routes, clusters, ECDS
    def apply(self, envoy_filters: list[dict]) -> list[str]:
        patches = [self._as_istiod_reads(p) for ef in envoy_filters for p in ef["spec"]["configPatches"]]
        order = ["LISTENER", "NETWORK_FILTER", "HTTP_FILTER", "ROUTE_CONFIGURATION", "VIRTUAL_HOST",
                 "HTTP_ROUTE", "CLUSTER", "EXTENSION_CONFIG"]
        operations = OPERATIONS.get(self.release)
        for kind in order:
            for i, p in enumerate(patches):
                if p["applyTo"] != kind:
                    continue
                if operations is not None and p["patch"]["operation"] not in operations:
                    self.unapplied.append(f"configPatches[{i}] {kind} {p['patch']['operation']}"
                                          f" (no such operation in Istio {self.release})")
                    continue
                if not self._context_ok(p.get("match", {})) or not getattr(self, f"_{kind.lower()}")(p):
                    self.unapplied.append(f"configPatches[{i}] {kind} {p['patch']['operation']}")
        unknown = [p["applyTo"] for p in patches if p["applyTo"] not in order]
        self.unapplied += [f"unsupported applyTo {k}" for k in unknown]
        self._ecds_sources()
        return self.unapplied

    def _as_istiod_reads(self, p: dict) -> dict:
        """The patch as the release's istiod holds it: fields its protos lack are dropped."""
        unknown = UNKNOWN_FIELDS.get(self.release)
        if not unknown:
            return p

        def drop(node: Any) -> Any:
            if isinstance(node, dict):
                return {k: drop(v) for k, v in node.items() if k not in unknown}
            if isinstance(node, list):
                return [drop(v) for v in node]
            return node
        out = copy.deepcopy(p)
        if "value" in out["patch"]:
            out["patch"]["value"] = drop(out["patch"]["value"])
        return out

    def _network_filter(self, p: dict) -> bool:
        """MERGE into a listener's network filter: the typed configs are unpacked and merged
        (MergeAnyWithAny), the name replaced when the patch gives one."""
        if p["patch"]["operation"] != "MERGE":
            return False
        lm = p["match"].get("listener", {})
        want = lm.get("filterChain", {}).get("filter", {}).get("name")
        value = p["patch"]["value"]
        done = False
        for lst in self._listeners(lm):
            for chain in lst["filter_chains"]:
                for f in chain["filters"]:
                    if want and f["name"] != want or "typed_config" not in f:
                        continue
                    src = value.get("typed_config")
                    if src is not None:
                        if src.get("@type") != f["typed_config"].get("@type"):
                            continue  # MergeAnyWithAny fails: istiod keeps the filter as it was
                        proto_merge(f["typed_config"], {k: v for k, v in src.items() if k != "@type"},
                                    replace_lists=False)
                    if value.get("name"):
                        f["name"] = value["name"]
                    done = True
        return done

    def _listener(self, p: dict) -> bool:
        replace = merge_op(p["patch"]["operation"])
        if replace is None:
            return False
        hit = self._listeners(p["match"].get("listener", {}))
        for lst in hit:
            proto_merge(lst, p["patch"]["value"], replace)
        return bool(hit)

    def _http_filter(self, p: dict) -> bool:
        lm = p["match"].get("listener", {})
        fcm = lm.get("filterChain")
        sub = (fcm or {}).get("filter", {}).get("subFilter", {}).get("name")
        op = p["patch"]["operation"]
        done = False
        for lst in self._listeners(lm):
            for hcm in self._hcms(lst, fcm):
                filters = hcm["http_filters"]
                names = [f["name"] for f in filters]
                value = copy.deepcopy(p["patch"]["value"])
                if op == "INSERT_BEFORE":
                    if sub is None:
                        filters.insert(0, value)
                    elif sub in names:
                        filters.insert(names.index(sub), value)
                    else:
                        continue
                elif op == "INSERT_AFTER" and sub in names:
                    filters.insert(names.index(sub) + 1, value)
                elif op == "INSERT_FIRST":
                    filters.insert(0, value)
                elif op == "ADD":
                    filters.append(value)
                else:
                    continue
                done = True
        return done

    def _vhosts(self, p: dict) -> list[dict]:
        rm = p["match"].get("routeConfiguration", {})
        vm = rm.get("vhost", {})
        return [vh for rc in self._route_configs(rm) for vh in rc["virtual_hosts"]
                if not vm.get("name") or vh["name"] == vm["name"]]

    def _route_configuration(self, p: dict) -> bool:
        replace = merge_op(p["patch"]["operation"])
        hit = self._route_configs(p["match"].get("routeConfiguration", {}))
        for rc in hit if replace is not None else []:
            proto_merge(rc, p["patch"]["value"], replace)
        return bool(hit) and replace is not None

    def _virtual_host(self, p: dict) -> bool:
        replace = merge_op(p["patch"]["operation"])
        hit = self._vhosts(p)
        for vh in hit if replace is not None else []:
            proto_merge(vh, p["patch"]["value"], replace)
        return bool(hit) and replace is not None

    def _http_route(self, p: dict) -> bool:
        replace = merge_op(p["patch"]["operation"])
        want = p["match"].get("routeConfiguration", {}).get("vhost", {}).get("route", {}).get("name")
        hit = [r for vh in self._vhosts(p) for r in vh["routes"] if not want or r.get("name") == want]
        for r in hit if replace is not None else []:
            proto_merge(r, p["patch"]["value"], replace)
        return bool(hit) and replace is not None

    def _cluster(self, p: dict) -> bool:
        op = p["patch"]["operation"]
        if op == "ADD":
            cluster = copy.deepcopy(p["patch"]["value"])
            self._resolve(cluster)
            self.b["static_resources"]["clusters"].append(cluster)
            return True
        replace = merge_op(op)
        hit = self._clusters(p["match"].get("cluster", {}))
        for c in hit if replace is not None else []:
            proto_merge(c, p["patch"]["value"], replace)
        return bool(hit) and replace is not None

    def _resolve(self, cluster: dict) -> None:
        """DNS stand-in: a DNS cluster's host whose name is in `dns` becomes its mock's static
        address; the host's name (`hostname`, TLS sni) and metadata stay."""
        if cluster.get("type") not in ("LOGICAL_DNS", "STRICT_DNS"):
            return
        for group in cluster.get("load_assignment", {}).get("endpoints", []):
            for host in group.get("lb_endpoints", []):
                sa = host["endpoint"]["address"]["socket_address"]
                if sa["address"] in self.dns:
                    sa["address"], sa["port_value"] = self.dns[sa["address"]]
                    cluster["type"] = "STATIC"
                    cluster.pop("dns_lookup_family", None)

    def _extension_config(self, p: dict) -> bool:
        if p["patch"]["operation"] != "ADD":
            return False
        ec = copy.deepcopy(p["patch"]["value"])
        # istio-agent: fetch the module, hand Envoy a local file.
        config = ec["typed_config"]["config"]
        vm = config["vm_config"]
        how = self.fetch_fails.get(ec["name"])
        if "remote" in vm["code"] and how:
            fail_open = (config.get("failure_policy") == "FAIL_OPEN" or config.get("fail_open")
                         or how == "allow")
            rbac = ({"rules_stat_prefix": "wasm-default-allow"} if fail_open
                    else {"rules": {}, "rules_stat_prefix": "wasm-default-deny"})
            ec["typed_config"] = {"@type": RBAC_TYPE, **rbac}
        elif "remote" in vm["code"]:
            vm["code"] = {"local": {"filename": str(self.module_file)}}
        path = self.workdir / f"ecds-{ec['name']}.json"
        response = json.dumps({"version_info": "1", "resources": [{"@type": TEC_TYPE, **ec}]})
        if ec["name"] in self.withhold:
            self.withheld[ec["name"]] = response
            response = json.dumps({"version_info": "0", "resources": []})
        path.write_text(response)
        self.extension_files[ec["name"]] = path
        return True

    def deliver(self, name: str) -> None:
        """Serve a withheld extension config now (an atomic replace Envoy's file watch sees)."""
        path = self.extension_files[name]
        tmp = path.with_suffix(".new")
        tmp.write_text(self.withheld.pop(name))
        os.replace(tmp, path)

    def _ecds_sources(self) -> None:
        """istiod serves EXTENSION_CONFIG over ADS; here each reference reads its file."""
        def walk(node: Any) -> None:
            if isinstance(node, dict):
                cd = node.get("config_discovery")
                if isinstance(cd, dict) and "ads" in cd.get("config_source", {}):
                    path = self.extension_files.get(node.get("name"))
                    if path is None:
                        self.unapplied.append(f"no EXTENSION_CONFIG for filter {node.get('name')}")
                    else:
                        src = cd["config_source"]
                        src.pop("ads")
                        src["path_config_source"] = {"path": str(path)}
                for v in node.values():
                    walk(v)
            elif isinstance(node, list):
                for v in node:
                    walk(v)
        walk(self.b)


def container_env(patch: dict, secret: dict[str, str]) -> dict[str, str]:
    """The environment the rendered Deployment patch gives the proxy container, from `secret`
    (what Kubernetes does with env[].valueFrom.secretKeyRef)."""
    out = {}
    for c in patch["spec"]["template"]["spec"]["containers"]:
        for e in c.get("env", []):
            ref = e["valueFrom"]["secretKeyRef"]
            out[e["name"]] = secret[ref["key"]]
    return out


def annotation_inclusion_regexps(patch: dict) -> list[str]:
    raw = patch["spec"]["template"]["metadata"]["annotations"].get("proxy.istio.io/config", "{}")
    return json.loads(raw).get("proxyStatsMatcher", {}).get("inclusionRegexps", [])


def bootstrap_override(manifests: list[dict], patch: dict) -> str | None:
    name = patch["spec"]["template"]["metadata"]["annotations"].get("sidecar.istio.io/bootstrapOverride")
    for cm in of_kind(manifests, "ConfigMap"):
        if cm["metadata"]["name"] == name:
            return cm["data"]["custom_bootstrap.json"]
    return None


# ------------------------------------------------------------------ istio-agent's module pull
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


def blob(layout: Path, digest: str) -> bytes:
    algo, hexd = digest.split(":", 1)
    data = (Path(layout) / "blobs" / algo / hexd).read_bytes()
    if hashlib.sha256(data).hexdigest() != hexd:
        raise ValueError(f"blob {digest} does not match its digest")
    return data


def manifest_of(layout: Path, tag: str) -> dict:
    index = json.loads((Path(layout) / "index.json").read_text())
    (entry,) = [m for m in index["manifests"]
                if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag]
    data = blob(layout, entry["digest"])
    if len(data) != entry["size"]:
        raise ValueError("manifest size differs from the index")
    return json.loads(data)


WASM_LAYER = "application/vnd.module.wasm.content.layer.v1+wasm"


def wasm_from_layout(layout: Path, tag: str) -> bytes:
    """What istio-agent's image fetcher takes from an image, in its order: the "compat" variant
    (the last layer an OCI tar+gzip layer; its file named plugin.wasm), else the "oci" variant
    (exactly two layers, one of them the module with the Wasm content media type)."""
    manifest = manifest_of(layout, tag)
    layers = manifest["layers"]
    if layers and layers[-1]["mediaType"] == OCI_LAYER:
        data = blob(layout, layers[-1]["digest"])
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member in tar:
                if Path(member.name).name == "plugin.wasm":
                    f = tar.extractfile(member)
                    if f is not None:
                        return f.read()
        raise ValueError("plugin.wasm not found in the layer")
    if len(layers) != 2:
        raise ValueError(f"number of layers must be 2 but got {len(layers)}")
    for layer in layers:
        if layer["mediaType"] == WASM_LAYER:
            return blob(layout, layer["digest"])
    raise ValueError(f"could not find the layer of type {WASM_LAYER}")
