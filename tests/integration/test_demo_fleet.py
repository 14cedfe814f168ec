"""README's fleet demo, run as written (`scripts/demo.sh --fleet`): two gateway replicas share
one provider budget through the real rate-limit service on a real Redis, so once the fleet has
spent it both replicas skip the primary, though neither spent it alone."""
import os
import re
import subprocess

import pytest

import fleet_store
import harness

if harness.external_mode():
    pytest.skip("runs its own gateways and store", allow_module_level=True)
if os.environ.get("ENVOY_VERSION", "1.40") != "1.40":
    # The demo runs the project's Envoy (.venv, 1.40) whatever the suite's: once is enough.
    pytest.skip("the demo runs Envoy 1.40 from .venv; the 1.40 suite runs it",
                allow_module_level=True)


def test_the_fleet_demo_shows_two_replicas_spending_one_budget():
    why = fleet_store.missing()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the fleet demo must run under CI: {why}")
        pytest.skip(why)
    p = subprocess.run(["scripts/demo.sh", "--fleet"], cwd=harness.REPO_ROOT, capture_output=True,
                       text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rows = re.findall(r"request +(\d+) via replica (\d) \(:\d+\): answered by (\w+) *(.*)", p.stdout)
    assert len(rows) == 10, p.stdout
    answered = [provider for _, _, provider, _ in rows]
    # 60 tokens, 12 an answer: five answers, and at most one sync's overshoot past them.
    primary = answered.count("primary")
    assert 5 <= primary <= 7, answered
    assert answered[:5] == ["primary"] * 5, answered
    # Once spent, every later request goes to the secondary, from either replica.
    assert answered[primary:] == ["secondary"] * (10 - primary), answered
    skipped = [(replica, note) for _, replica, provider, note in rows if provider == "secondary"]
    assert {replica for replica, _ in skipped} == {"1", "2"}, rows
    assert all("budget_exhausted" in note for _, note in skipped), rows
    fleets = re.findall(r'"state": "(\w+)".*?"left": (\d+)', p.stdout)
    assert fleets == [("ok", "0"), ("ok", "0")], p.stdout


def test_readmes_fleet_snippet_is_a_valid_file_that_render_gives_the_service(tmp_path):
    """README's scale-out snippet, with a chain added, validates strictly and renders with the
    rate-limit service's cluster at the address it names."""
    readme = (harness.REPO_ROOT / "README.md").read_text()
    section = readme.split("## Scale-out: several gateways\n", 1)[1].split("\n## ", 1)[0]
    snippet = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert "fleet: {address: 127.0.0.1:8081}" in snippet
    path = tmp_path / "fleet.failover.yaml"
    path.write_text(snippet + "chains:\n  - {name: c, providers: [openai]}\n")
    cli = str(harness.cli_bin())
    p = subprocess.run([cli, "validate", "--strict", str(path)], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0, p.stdout + p.stderr
    out = tmp_path / "envoy.yaml"
    p = subprocess.run([cli, "render", str(path), "--out", str(out)], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 0, p.stdout + p.stderr
    rendered = out.read_text()
    assert "llm_failover_fleet" in rendered and "8081" in rendered, rendered[-2000:]
    # The two commands README gives start the service on that port, for that domain.
    assert "GRPC_PORT=8081" in section and "domain: llm-failover" in section
