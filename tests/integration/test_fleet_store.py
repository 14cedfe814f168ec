"""The fleet's store itself: Envoy's rate-limit service (envoyproxy/ratelimit at the commit
scripts/ratelimit.sh pins) on a real Redis, asked over gRPC as the filter asks it.

These hold what the filter's fleet sync builds on (docs/internals.md "The fleet's store"): a
descriptor carrying its own limit is counted under a domain whose config names no descriptor; a
per-descriptor hits_addend of 0 reads without counting; the domain must exist; the units the
failover file allows; and the fixture's kill and restart of each process mid-test.
"""
from __future__ import annotations

import time
import uuid

import pytest

import harness

if harness.external_mode():
    # Before the gRPC imports: the compose harness's image has no grpc module.
    pytest.skip("needs its own store", allow_module_level=True)

import grpc  # noqa: E402

from harness import wait_until  # noqa: E402
from ratelimit_client import Descriptor, RateLimitClient  # noqa: E402

DOMAIN = "llm-failover"


def _fresh_hour(rl: RateLimitClient) -> None:
    """Start a test well inside an hour's window (keys are aligned to the hour)."""
    r = rl.should_rate_limit(DOMAIN, [Descriptor([("probe", uuid.uuid4().hex)], 1, "HOUR", 0)])
    left = r.statuses[0].reset_seconds
    if left is not None and left < 10:
        time.sleep(left + 1)


def _key() -> str:
    return uuid.uuid4().hex[:12]


def test_a_limit_override_counts_without_a_descriptor_in_the_domain_config(fleet_store):
    # The service's config is only `domain: llm-failover`: the limit travels in the descriptor.
    assert fleet_store.service.config_path.read_text().strip() == "domain: llm-failover"
    provider = _key()
    with RateLimitClient(fleet_store.service.grpc_address) as rl:
        _fresh_hour(rl)
        spend = Descriptor([("provider", provider)], limit=5, unit="HOUR", hits=3)
        r = rl.should_rate_limit(DOMAIN, [spend])
        assert r.overall_code == "OK"
        s = r.statuses[0]
        assert (s.code, s.limit, s.unit, s.limit_remaining) == ("OK", 5, "HOUR", 2)
        assert 0 < s.reset_seconds <= 3600
        # Redis holds one key for it: domain, entries and the window's start.
        assert any(f"{DOMAIN}_provider_{provider}_" in k for k in fleet_store.redis.scan())

        # hits_addend 0 on the descriptor: read what is left, count nothing.
        check = Descriptor([("provider", provider)], limit=5, unit="HOUR", hits=0)
        for _ in range(3):
            s = rl.should_rate_limit(DOMAIN, [check]).statuses[0]
            assert (s.code, s.limit_remaining) == ("OK", 2)

        # Reaching the limit is still OK with nothing left; only passing it is OVER_LIMIT.
        s = rl.should_rate_limit(DOMAIN, [Descriptor([("provider", provider)], 5, "HOUR", 2)]
                                 ).statuses[0]
        assert (s.code, s.limit_remaining) == ("OK", 0)
        s = rl.should_rate_limit(DOMAIN, [check]).statuses[0]
        assert (s.code, s.limit_remaining) == ("OK", 0)
        r = rl.should_rate_limit(DOMAIN, [Descriptor([("provider", provider)], 5, "HOUR", 1)])
        assert (r.overall_code, r.statuses[0].code, r.statuses[0].limit_remaining) == \
            ("OVER_LIMIT", "OVER_LIMIT", 0)
        # A check after that says OVER_LIMIT too (the counter went past the limit and stays).
        assert rl.should_rate_limit(DOMAIN, [check]).statuses[0].code == "OVER_LIMIT"


def test_each_descriptor_has_its_own_hits_addend(fleet_store):
    a, b, c = _key(), _key(), _key()
    with RateLimitClient(fleet_store.service.grpc_address) as rl:
        _fresh_hour(rl)
        # One request: a reports 7, b only reads, c leaves hits_addend unset and so takes the
        # request's (4); the request-level 0 would mean 1 for c (the service's default).
        r = rl.should_rate_limit(DOMAIN, [
            Descriptor([("provider", a)], limit=100, unit="HOUR", hits=7),
            Descriptor([("provider", b)], limit=100, unit="HOUR", hits=0),
            Descriptor([("provider", c)], limit=100, unit="HOUR")], hits_addend=4)
        assert [s.limit_remaining for s in r.statuses] == [93, 100, 96]
        r = rl.should_rate_limit(DOMAIN, [Descriptor([("provider", c)], limit=100, unit="HOUR")])
        assert r.statuses[0].limit_remaining == 95
        # Two entries make one key: a caller's budget on one provider is not the provider's.
        r = rl.should_rate_limit(DOMAIN, [
            Descriptor([("provider", a), ("caller", "team-a")], limit=10, unit="HOUR", hits=1),
            Descriptor([("provider", a)], limit=100, unit="HOUR", hits=0)])
        assert [s.limit_remaining for s in r.statuses] == [9, 93]


def test_an_unknown_domain_counts_nothing_and_says_so_by_omission(fleet_store):
    # A domain the service's config does not name: every descriptor is OK, with no
    # current_limit and nothing counted, whatever limit it carries. The only sign is the
    # missing current_limit, which the filter reads as "the store refuses the domain".
    with RateLimitClient(fleet_store.service.grpc_address) as rl:
        for _ in range(2):
            r = rl.should_rate_limit("not-configured",
                                     [Descriptor([("provider", "x")], limit=1, unit="HOUR", hits=5)])
            assert r.overall_code == "OK"
            s = r.statuses[0]
            assert (s.code, s.limit, s.limit_remaining, s.reset_seconds) == ("OK", None, 0, None)
    assert not any(k.startswith("not-configured") for k in fleet_store.redis.scan())


@pytest.mark.parametrize("unit,seconds", [("SECOND", 1), ("MINUTE", 60), ("HOUR", 3600),
                                          ("DAY", 86400), ("WEEK", 7 * 86400),
                                          ("MONTH", 30 * 86400), ("YEAR", 365 * 86400)])
def test_every_unit_the_failover_file_allows(fleet_store, unit, seconds):
    # WEEK is 7 in Envoy's RateLimitUnit; at the pinned commit the service's own copy of that
    # enum stops at YEAR (6), but it passes the number through and counts WEEK windows.
    # MONTH and YEAR are 30 and 365 days, aligned to the Unix epoch, not the calendar.
    with RateLimitClient(fleet_store.service.grpc_address) as rl:
        s = rl.should_rate_limit(DOMAIN, [Descriptor([("unit", _key())], 1000, unit, 1)]).statuses[0]
    assert (s.code, s.limit, s.unit) == ("OK", 1000, unit)
    assert s.limit_remaining in (999, 1000)  # 1000 only if a SECOND window turned in between
    assert 0 < s.reset_seconds <= seconds


def test_the_service_and_redis_can_be_killed_and_restarted(fleet_store):
    provider = _key()
    desc = lambda hits: Descriptor([("provider", provider)], limit=50, unit="HOUR", hits=hits)
    addr = fleet_store.service.grpc_address
    with RateLimitClient(addr, timeout=1.0) as rl:
        _fresh_hour(rl)
        assert rl.should_rate_limit(DOMAIN, [desc(5)]).statuses[0].limit_remaining == 45

        # The service killed: calls fail at once; restarted on the same port, the count is
        # where Redis kept it.
        fleet_store.service.kill()
        with pytest.raises(grpc.RpcError) as err:
            rl.should_rate_limit(DOMAIN, [desc(0)])
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        fleet_store.service.start()
        assert fleet_store.service.grpc_address == addr
        wait_until(lambda: rl.should_rate_limit(DOMAIN, [desc(0)]).statuses[0].limit_remaining
                   == 45, 10, "the restarted service's answer")

        # Redis killed under a running service: the service answers with an error (it does not
        # exit); Redis restarted empty (no snapshot), it reconnects and counts from zero.
        fleet_store.redis.kill()
        with pytest.raises(grpc.RpcError) as err:
            rl.should_rate_limit(DOMAIN, [desc(1)])
        assert err.value.code() != grpc.StatusCode.OK
        assert fleet_store.service.running
        fleet_store.redis.start()

        def counts_again():
            try:
                return rl.should_rate_limit(DOMAIN, [desc(2)]).statuses[0].limit_remaining
            except grpc.RpcError:
                return None
        assert wait_until(counts_again, 15, "the service counting on the restarted Redis") == 48
