"""A small gRPC client of Envoy's rate-limit service API, for tests that talk to the store directly.

The messages are built at import from their field numbers (Envoy's
``api/envoy/service/ratelimit/v3/rls.proto`` and
``api/envoy/extensions/common/ratelimit/v3/ratelimit.proto``) with protobuf's own descriptor
machinery, so the encoding is protobuf's, independent of the filter's hand-written one: what this
client sends and reads is what a conforming peer sends and reads.

    with RateLimitClient("127.0.0.1:8081") as rl:
        r = rl.should_rate_limit("llm-failover", [
            Descriptor([("provider", "a")], limit=60, unit="MINUTE", hits=10)])
        r.overall_code, r.statuses[0].limit_remaining
"""
from __future__ import annotations

from dataclasses import dataclass, field

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf import duration_pb2, wrappers_pb2  # noqa: F401 - registers their files

SERVICE = "envoy.service.ratelimit.v3.RateLimitService"
METHOD = f"/{SERVICE}/ShouldRateLimit"
# RateLimitResponse.RateLimit.Unit and envoy.type.v3.RateLimitUnit share these numbers.
UNITS = {"SECOND": 1, "MINUTE": 2, "HOUR": 3, "DAY": 4, "MONTH": 5, "YEAR": 6, "WEEK": 7}
CODES = {0: "UNKNOWN", 1: "OK", 2: "OVER_LIMIT"}

_F = descriptor_pb2.FieldDescriptorProto


def _field(msg, name, number, ftype, label=_F.LABEL_OPTIONAL, type_name=None):
    f = msg.field.add(name=name, number=number, type=ftype, label=label)
    if type_name:
        f.type_name = type_name


def _unit_enum(parent, name):
    e = parent.enum_type.add(name=name)
    e.value.add(name="UNKNOWN", number=0)
    for n, v in UNITS.items():
        e.value.add(name=n, number=v)


def _build():
    common = descriptor_pb2.FileDescriptorProto(
        name="llm_failover_test/ratelimit_common.proto",
        package="envoy.extensions.common.ratelimit.v3", syntax="proto3",
        dependency=["google/protobuf/wrappers.proto"])
    _unit_enum(common, "RateLimitUnit")  # envoy.type.v3.RateLimitUnit's numbers
    d = common.message_type.add(name="RateLimitDescriptor")
    entry = d.nested_type.add(name="Entry")
    _field(entry, "key", 1, _F.TYPE_STRING)
    _field(entry, "value", 2, _F.TYPE_STRING)
    override = d.nested_type.add(name="RateLimitOverride")
    _field(override, "requests_per_unit", 1, _F.TYPE_UINT32)
    _field(override, "unit", 2, _F.TYPE_ENUM,
           type_name=".envoy.extensions.common.ratelimit.v3.RateLimitUnit")
    _field(d, "entries", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED,
           ".envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.Entry")
    _field(d, "limit", 2, _F.TYPE_MESSAGE,
           type_name=".envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.RateLimitOverride")
    _field(d, "hits_addend", 3, _F.TYPE_MESSAGE, type_name=".google.protobuf.UInt64Value")

    rls = descriptor_pb2.FileDescriptorProto(
        name="llm_failover_test/rls.proto", package="envoy.service.ratelimit.v3", syntax="proto3",
        dependency=[common.name, "google/protobuf/duration.proto"])
    req = rls.message_type.add(name="RateLimitRequest")
    _field(req, "domain", 1, _F.TYPE_STRING)
    _field(req, "descriptors", 2, _F.TYPE_MESSAGE, _F.LABEL_REPEATED,
           ".envoy.extensions.common.ratelimit.v3.RateLimitDescriptor")
    _field(req, "hits_addend", 3, _F.TYPE_UINT32)
    resp = rls.message_type.add(name="RateLimitResponse")
    code = resp.enum_type.add(name="Code")
    for v, n in CODES.items():
        code.value.add(name=n, number=v)
    limit = resp.nested_type.add(name="RateLimit")
    _unit_enum(limit, "Unit")
    _field(limit, "requests_per_unit", 1, _F.TYPE_UINT32)
    _field(limit, "unit", 2, _F.TYPE_ENUM,
           type_name=".envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit")
    status = resp.nested_type.add(name="DescriptorStatus")
    code_t = ".envoy.service.ratelimit.v3.RateLimitResponse.Code"
    _field(status, "code", 1, _F.TYPE_ENUM, type_name=code_t)
    _field(status, "current_limit", 2, _F.TYPE_MESSAGE,
           type_name=".envoy.service.ratelimit.v3.RateLimitResponse.RateLimit")
    _field(status, "limit_remaining", 3, _F.TYPE_UINT32)
    _field(status, "duration_until_reset", 4, _F.TYPE_MESSAGE,
           type_name=".google.protobuf.Duration")
    _field(resp, "overall_code", 1, _F.TYPE_ENUM, type_name=code_t)
    _field(resp, "statuses", 2, _F.TYPE_MESSAGE, _F.LABEL_REPEATED,
           ".envoy.service.ratelimit.v3.RateLimitResponse.DescriptorStatus")

    pool = descriptor_pool.DescriptorPool()
    for dep in ("google/protobuf/wrappers.proto", "google/protobuf/duration.proto"):
        fd = descriptor_pb2.FileDescriptorProto()
        descriptor_pool.Default().FindFileByName(dep).CopyToProto(fd)
        pool.Add(fd)
    pool.Add(common)
    pool.Add(rls)
    get = message_factory.GetMessageClass
    return (get(pool.FindMessageTypeByName("envoy.service.ratelimit.v3.RateLimitRequest")),
            get(pool.FindMessageTypeByName("envoy.service.ratelimit.v3.RateLimitResponse")))


RateLimitRequest, RateLimitResponse = _build()


@dataclass
class Descriptor:
    entries: list[tuple[str, str]]
    limit: int | None = None        # the request's limit override (requests_per_unit)
    unit: str = "MINUTE"
    hits: int | None = None         # per-descriptor hits_addend; None leaves it unset


@dataclass
class Status:
    code: str
    limit: int | None               # current_limit.requests_per_unit; None when absent
    unit: str | None
    limit_remaining: int
    reset_seconds: int | None


@dataclass
class Answer:
    overall_code: str
    statuses: list[Status] = field(default_factory=list)


def encode(domain: str, descriptors: list[Descriptor], hits_addend: int | None = None) -> bytes:
    """A RateLimitRequest's bytes (protobuf's encoding)."""
    req = RateLimitRequest(domain=domain)
    if hits_addend is not None:
        req.hits_addend = hits_addend
    for d in descriptors:
        m = req.descriptors.add()
        for k, v in d.entries:
            m.entries.add(key=k, value=v)
        if d.limit is not None:
            m.limit.requests_per_unit = d.limit
            m.limit.unit = UNITS[d.unit]
        if d.hits is not None:
            m.hits_addend.value = d.hits
    return req.SerializeToString()


def decode(data: bytes) -> Answer:
    resp = RateLimitResponse.FromString(data)
    units = {v: n for n, v in UNITS.items()}
    out = Answer(CODES.get(resp.overall_code, str(resp.overall_code)))
    for s in resp.statuses:
        has_limit = s.HasField("current_limit")
        out.statuses.append(Status(
            code=CODES.get(s.code, str(s.code)),
            limit=s.current_limit.requests_per_unit if has_limit else None,
            unit=units.get(s.current_limit.unit) if has_limit else None,
            limit_remaining=s.limit_remaining,
            reset_seconds=(s.duration_until_reset.seconds
                           if s.HasField("duration_until_reset") else None)))
    return out


class RateLimitClient:
    def __init__(self, address: str, timeout: float = 2.0):
        self.channel = grpc.insecure_channel(address)
        self.timeout = timeout
        self._call = self.channel.unary_unary(METHOD, request_serializer=None,
                                              response_deserializer=None)

    def should_rate_limit(self, domain: str, descriptors: list[Descriptor],
                          hits_addend: int | None = None) -> Answer:
        return decode(self._call(encode(domain, descriptors, hits_addend), timeout=self.timeout))

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> "RateLimitClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
