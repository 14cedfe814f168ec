//! A compact schema of the Istio (and Kubernetes) API fields the Istio renderer writes, per
//! Istio release, and a structural check of manifests against it: every field name must exist
//! in the message it is written in, every enum value in its enum, in the release targeted.
//!
//! Written from istio/api's protos (networking/v1alpha3/*.proto at the 1.30.3 and 1.31 tags:
//! 1.31 adds the `MERGE_AND_REPLACE_LIST` operation and, in the messages listed here,
//! `zoneAwareLbSetting`, `http2KeepAlive` and `RetryBudget.budgetInterval`;
//! Kubernetes resources use the protos' JSON names, lowerCamelCase). It lists each message the
//! renderer uses with all of its fields (so a valid field the renderer does not use yet passes
//! and a misspelt one fails). `patch.value` holds Envoy configuration, which the Istio CRD keeps
//! as is (`x-kubernetes-preserve-unknown-fields`); the end-to-end test has Envoy parse it.

use serde_yaml_ng::Value;
use std::collections::HashMap;

/// One line per message: `Name: field:type ...`. Types: `s` string, `n` number, `b` boolean,
/// `[T]` list of T, `{T}` map of string to T, `E(A|B)` enum, or another message's name. A
/// field or enum value ending in `@1.31` exists from that release on.
const SCHEMA: &str = "
ServiceEntry: apiVersion:E(networking.istio.io/v1|networking.istio.io/v1beta1|networking.istio.io/v1alpha3) kind:s metadata:ObjectMeta spec:ServiceEntrySpec
DestinationRule: apiVersion:E(networking.istio.io/v1|networking.istio.io/v1beta1|networking.istio.io/v1alpha3) kind:s metadata:ObjectMeta spec:DestinationRuleSpec
Gateway: apiVersion:E(networking.istio.io/v1|networking.istio.io/v1beta1|networking.istio.io/v1alpha3) kind:s metadata:ObjectMeta spec:GatewaySpec
VirtualService: apiVersion:E(networking.istio.io/v1|networking.istio.io/v1beta1|networking.istio.io/v1alpha3) kind:s metadata:ObjectMeta spec:VirtualServiceSpec
EnvoyFilter: apiVersion:E(networking.istio.io/v1alpha3) kind:s metadata:ObjectMeta spec:EnvoyFilterSpec
ConfigMap: apiVersion:E(v1) kind:s metadata:ObjectMeta data:{s} binaryData:{s} immutable:b
ObjectMeta: name:s namespace:s labels:{s} annotations:{s}
ServiceEntrySpec: hosts:[s] addresses:[s] ports:[ServicePort] location:E(MESH_EXTERNAL|MESH_INTERNAL) resolution:E(NONE|STATIC|DNS|DNS_ROUND_ROBIN|DYNAMIC_DNS) endpoints:[WorkloadEntry] workloadSelector:LabelSelector exportTo:[s] subjectAltNames:[s]
ServicePort: number:n protocol:s name:s targetPort:n
WorkloadEntry: address:s ports:{n} labels:{s} network:s locality:s weight:n serviceAccount:s
LabelSelector: labels:{s}
DestinationRuleSpec: host:s trafficPolicy:TrafficPolicy subsets:[Subset] exportTo:[s] workloadSelector:MatchLabels
MatchLabels: matchLabels:{s}
Subset: name:s labels:{s} trafficPolicy:TrafficPolicy
TrafficPolicy: loadBalancer:LoadBalancerSettings connectionPool:ConnectionPoolSettings outlierDetection:OutlierDetection tls:ClientTLSSettings portLevelSettings:[PortTrafficPolicy] tunnel:TunnelSettings proxyProtocol:ProxyProtocol retryBudget:RetryBudget
PortTrafficPolicy: port:PortSelector loadBalancer:LoadBalancerSettings connectionPool:ConnectionPoolSettings outlierDetection:OutlierDetection tls:ClientTLSSettings
PortSelector: number:n
LoadBalancerSettings: simple:E(UNSPECIFIED|RANDOM|PASSTHROUGH|ROUND_ROBIN|LEAST_REQUEST|LEAST_CONN) consistentHash:Free localityLbSetting:Free warmupDurationSecs:s warmup:Free zoneAwareLbSetting@1.31:Free
ConnectionPoolSettings: tcp:TCPSettings http:HTTPSettings
TCPSettings: maxConnections:n connectTimeout:s tcpKeepalive:TcpKeepalive maxConnectionDuration:s idleTimeout:s
TcpKeepalive: probes:n time:s interval:s
HTTPSettings: http1MaxPendingRequests:n http2MaxRequests:n maxRequestsPerConnection:n maxRetries:n idleTimeout:s h2UpgradePolicy:E(DEFAULT|DO_NOT_UPGRADE|UPGRADE) useClientProtocol:b maxConcurrentStreams:n http2KeepAlive@1.31:Free
OutlierDetection: consecutiveErrors:n splitExternalLocalOriginErrors:b consecutiveLocalOriginFailures:n consecutiveGatewayErrors:n consecutive5xxErrors:n interval:s baseEjectionTime:s maxEjectionPercent:n minHealthPercent:n
ClientTLSSettings: mode:E(DISABLE|SIMPLE|MUTUAL|ISTIO_MUTUAL) clientCertificate:s privateKey:s caCertificates:s credentialName:s subjectAltNames:[s] sni:s insecureSkipVerify:b caCrl:s
TunnelSettings: protocol:s targetHost:s targetPort:n
ProxyProtocol: version:E(V1|V2)
RetryBudget: percent:n minRetryConcurrency:n budgetInterval@1.31:s
GatewaySpec: servers:[Server] selector:{s}
Server: port:GatewayPort bind:s hosts:[s] tls:Free defaultEndpoint:s name:s
GatewayPort: number:n protocol:s name:s targetPort:n
VirtualServiceSpec: hosts:[s] gateways:[s] http:[HTTPRoute] tls:[Free] tcp:[Free] exportTo:[s]
HTTPRoute: name:s match:[Free] route:[Free] redirect:Free directResponse:HTTPDirectResponse delegate:Free rewrite:Free timeout:s retries:Free fault:Free mirror:Free mirrors:[Free] mirrorPercent:n mirrorPercentage:Free corsPolicy:Free headers:Free
HTTPDirectResponse: status:n body:HTTPBody
HTTPBody: string:s bytes:s
EnvoyFilterSpec: workloadSelector:LabelSelector targetRefs:[PolicyTargetReference] configPatches:[EnvoyConfigObjectPatch] priority:n
PolicyTargetReference: group:s kind:s name:s namespace:s
EnvoyConfigObjectPatch: applyTo:E(INVALID|LISTENER|FILTER_CHAIN|NETWORK_FILTER|HTTP_FILTER|ROUTE_CONFIGURATION|VIRTUAL_HOST|HTTP_ROUTE|CLUSTER|EXTENSION_CONFIG|BOOTSTRAP|LISTENER_FILTER) match:EnvoyConfigObjectMatch patch:Patch
EnvoyConfigObjectMatch: context:E(ANY|SIDECAR_INBOUND|SIDECAR_OUTBOUND|GATEWAY|WAYPOINT) proxy:ProxyMatch listener:ListenerMatch routeConfiguration:RouteConfigurationMatch cluster:ClusterMatch waypoint:Free
ProxyMatch: proxyVersion:s metadata:{s}
ClusterMatch: portNumber:n service:s subset:s name:s
RouteConfigurationMatch: portNumber:n portName:s gateway:s vhost:VirtualHostMatch name:s
VirtualHostMatch: name:s domainName:s route:RouteMatch
RouteMatch: name:s action:E(ANY|ROUTE|REDIRECT|DIRECT_RESPONSE)
ListenerMatch: portNumber:n portName:s filterChain:FilterChainMatch listenerFilter:s name:s
FilterChainMatch: name:s sni:s transportProtocol:s applicationProtocols:s filter:FilterMatch destinationPort:n
FilterMatch: name:s subFilter:SubFilterMatch
SubFilterMatch: name:s
Patch: operation:E(INVALID|MERGE|ADD|REMOVE|INSERT_BEFORE|INSERT_AFTER|INSERT_FIRST|REPLACE|MERGE_AND_REPLACE_LIST@1.31) value:Free filterClass:E(UNSPECIFIED|AUTHN|AUTHZ|STATS)
DeploymentPatch: spec:DeploymentPatchSpec
DeploymentPatchSpec: template:PodTemplateSpec
PodTemplateSpec: metadata:ObjectMeta spec:PodSpec
PodSpec: containers:[Container]
Container: name:s env:[EnvVar]
EnvVar: name:s value:s valueFrom:EnvVarSource
EnvVarSource: secretKeyRef:KeySelector configMapKeyRef:KeySelector
KeySelector: name:s key:s optional:b
";

/// Releases the schema knows, oldest first.
pub const RELEASES: [&str; 3] = ["1.30", "1.31", "1.32"];

#[derive(Debug, Clone, PartialEq)]
enum Type {
    Str,
    Num,
    Bool,
    /// Envoy configuration or parts of the API the renderer never writes into: not checked.
    Free,
    List(Box<Type>),
    Map(Box<Type>),
    Enum(Vec<String>),
    Message(String),
}

pub struct Schema {
    messages: HashMap<String, Vec<(String, Type)>>,
    release: String,
}

fn release_key(r: &str) -> (u32, u32) {
    let mut it = r.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

/// `name` or `name@1.31`: the name, if it exists in `release`.
fn in_release<'a>(item: &'a str, release: &str) -> Option<&'a str> {
    match item.split_once('@') {
        None => Some(item),
        Some((name, since)) => (release_key(release) >= release_key(since)).then_some(name),
    }
}

fn parse_type(t: &str, release: &str) -> Type {
    if let Some(inner) = t.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return Type::List(Box::new(parse_type(inner, release)));
    }
    if let Some(inner) = t.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
        return Type::Map(Box::new(parse_type(inner, release)));
    }
    if let Some(values) = t.strip_prefix("E(").and_then(|r| r.strip_suffix(')')) {
        return Type::Enum(
            values
                .split('|')
                .filter_map(|v| in_release(v, release))
                .map(str::to_string)
                .collect(),
        );
    }
    match t {
        "s" => Type::Str,
        "n" => Type::Num,
        "b" => Type::Bool,
        "Free" => Type::Free,
        name => Type::Message(name.to_string()),
    }
}

impl Schema {
    /// The schema of one Istio release (`None` for a release it does not know).
    pub fn for_release(release: &str) -> Option<Schema> {
        if !RELEASES.contains(&release) {
            return None;
        }
        let mut messages = HashMap::new();
        for line in SCHEMA.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let Some((name, fields)) = line.split_once(": ") else {
                continue;
            };
            let fields = fields
                .split_whitespace()
                .filter_map(|f| f.split_once(':'))
                .filter_map(|(field, t)| {
                    in_release(field, release).map(|f| (f.to_string(), parse_type(t, release)))
                })
                .collect();
            messages.insert(name.to_string(), fields);
        }
        Some(Schema {
            messages,
            release: release.to_string(),
        })
    }

    /// Problems of one Kubernetes manifest (its `kind` picks the message), as `path: problem`.
    pub fn check_manifest(&self, doc: &Value) -> Vec<String> {
        let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("");
        if !self.messages.contains_key(kind) {
            return vec![format!(
                "kind: {kind:?} is not a resource this schema knows"
            )];
        }
        let mut out = Vec::new();
        self.check(doc, &Type::Message(kind.to_string()), kind, &mut out);
        out
    }

    /// Problems of the gateway Deployment patch.
    pub fn check_deployment_patch(&self, doc: &Value) -> Vec<String> {
        let mut out = Vec::new();
        self.check(
            doc,
            &Type::Message("DeploymentPatch".into()),
            "Deployment",
            &mut out,
        );
        out
    }

    fn check(&self, v: &Value, t: &Type, path: &str, out: &mut Vec<String>) {
        let release = &self.release;
        match (t, v) {
            (Type::Free, _) => {}
            (Type::Str, Value::String(_)) | (Type::Num, Value::Number(_)) => {}
            (Type::Bool, Value::Bool(_)) => {}
            (Type::List(item), Value::Sequence(items)) => {
                for (i, x) in items.iter().enumerate() {
                    self.check(x, item, &format!("{path}[{i}]"), out);
                }
            }
            (Type::Map(item), Value::Mapping(m)) => {
                for (k, x) in m {
                    let k = k.as_str().unwrap_or("?");
                    self.check(x, item, &format!("{path}.{k}"), out);
                }
            }
            (Type::Enum(values), Value::String(s)) => {
                if !values.iter().any(|x| x == s) {
                    out.push(format!(
                        "{path}: {s:?} is not one of its values in Istio {release} ({})",
                        values.join(", ")
                    ));
                }
            }
            (Type::Message(name), Value::Mapping(m)) => {
                let Some(fields) = self.messages.get(name) else {
                    out.push(format!("{path}: schema has no message {name}"));
                    return;
                };
                for (k, x) in m {
                    let k = k.as_str().unwrap_or("?");
                    match fields.iter().find(|(f, _)| f == k) {
                        Some((_, ft)) => self.check(x, ft, &format!("{path}.{k}"), out),
                        None => out.push(format!(
                            "{path}.{k}: no such field in {name} (Istio {release})"
                        )),
                    }
                }
            }
            (t, v) => out.push(format!(
                "{path}: expected {}, found {}",
                describe(t),
                serde_json::to_string(v).unwrap_or_default()
            )),
        }
    }
}

fn describe(t: &Type) -> String {
    match t {
        Type::Str => "a string".into(),
        Type::Num => "a number".into(),
        Type::Bool => "true or false".into(),
        Type::Free => "anything".into(),
        Type::List(_) => "a list".into(),
        Type::Map(_) => "a mapping".into(),
        Type::Enum(_) => "an enum value (string)".into(),
        Type::Message(m) => format!("a {m} mapping"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(yaml: &str) -> Value {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    #[test]
    fn misspelt_fields_wrong_types_and_enum_values_are_reported_with_their_path() {
        let s = Schema::for_release("1.31").unwrap();
        let se = doc("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: a}\nspec:\n  hosts: [a.test]\n  ports: [{number: 443, name: http, protocl: HTTP}]\n  resolution: DNS_RR\n  exportTo: .\n");
        assert_eq!(
            s.check_manifest(&se),
            [
                "ServiceEntry.spec.ports[0].protocl: no such field in ServicePort (Istio 1.31)",
                "ServiceEntry.spec.resolution: \"DNS_RR\" is not one of its values in Istio 1.31 (NONE, STATIC, DNS, DNS_ROUND_ROBIN, DYNAMIC_DNS)",
                "ServiceEntry.spec.exportTo: expected a list, found \".\"",
            ]
        );
    }

    #[test]
    fn merge_and_replace_list_exists_from_1_31_only() {
        let ef = doc("apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: a}\nspec:\n  configPatches:\n  - applyTo: HTTP_ROUTE\n    patch: {operation: MERGE_AND_REPLACE_LIST, value: {anything: [goes]}}\n");
        assert!(Schema::for_release("1.31")
            .unwrap()
            .check_manifest(&ef)
            .is_empty());
        let old = Schema::for_release("1.30").unwrap().check_manifest(&ef);
        assert_eq!(old.len(), 1, "{old:?}");
        assert!(old[0].starts_with(
            "EnvoyFilter.spec.configPatches[0].patch.operation: \"MERGE_AND_REPLACE_LIST\" is not one of its values in Istio 1.30"
        ));
    }

    #[test]
    fn fields_new_in_1_31_are_refused_for_1_30() {
        let dr = doc("apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: a}\nspec:\n  host: a.test\n  trafficPolicy: {retryBudget: {percent: 5, budgetInterval: 1s}}\n");
        assert!(Schema::for_release("1.31")
            .unwrap()
            .check_manifest(&dr)
            .is_empty());
        assert_eq!(
            Schema::for_release("1.30").unwrap().check_manifest(&dr),
            ["DestinationRule.spec.trafficPolicy.retryBudget.budgetInterval: no such field in RetryBudget (Istio 1.30)"]
        );
    }

    #[test]
    fn unknown_kinds_and_releases_are_refused() {
        assert!(Schema::for_release("1.29").is_none());
        let s = Schema::for_release("1.31").unwrap();
        assert_eq!(s.check_manifest(&doc("kind: WasmPlugin\n")).len(), 1);
    }
}
