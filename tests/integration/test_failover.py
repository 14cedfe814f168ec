"""Router-mode failover through a real Envoy with the built filter (issue 4)."""
import pytest

DEMO = "envoy/demo.failover.yaml"


@pytest.fixture
def demo(gateway):
    mocks = gateway.mocks("primary", "secondary", "tertiary")
    return mocks, gateway


def test_503_falls_over_to_the_secondary_and_headers_say_so(demo):
    (primary, secondary, tertiary), gateway = demo
    primary.set_default(status=503)
    gw = gateway.start(DEMO)
    r = gw.chat("gpt-4o")
    assert r.status == 200, r.text()
    assert r.header("x-llm-provider") == "secondary"
    assert r.header("x-llm-attempts") == "2"
    assert r.header("x-llm-fallback-count") == "1"
    assert r.header("x-llm-fallback-reason") == "overloaded"
    assert r.header("x-llm-failover-retry") is None
    assert r.header("x-envoy-attempt-count") is None
    assert primary.request_count() == 1 and secondary.request_count() == 1
    assert tertiary.request_count() == 0
