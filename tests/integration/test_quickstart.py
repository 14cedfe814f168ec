"""README's quick start, run as written: its commands and its file are read from
README.md, not copied here, and run by bash from a clean temporary directory with the built CLI,
module and Envoy the README names, against two local mock providers standing in for OpenAI
(down: it answers 503) and Anthropic.

What the test changes, and only that: the providers' endpoints (`api.openai.com:443`,
`api.anthropic.com:443`) become the mocks' `127.0.0.1` ports, the listener's port 10000 a free
port (other Envoys run on this machine), and Envoy gets `--disable-hot-restart` (several Envoys
at once); README says to run `envoy -c` in another terminal, so the test starts it in the
background and runs the rest once it listens. The set-up block's first line
(`./scripts/setup.sh && ./scripts/build.sh`) is checked, not run: the suite runs after both.

"Watch it fail over" runs as written too, its mock ports moved to free ones."""
from __future__ import annotations

import json
import re
import socket
import subprocess
import time

import pytest

from harness import REPO_ROOT, _spawn, _terminate, external_mode, free_port, start_mock

if external_mode():
    pytest.skip("README's quick start starts its own Envoy from .venv, natively; the "
                "docker-compose run tests its own gateway", allow_module_level=True)

SECTION = "## Quick start with your own providers"


def _quickstart():
    readme = (REPO_ROOT / "README.md").read_text()
    start = readme.index(SECTION)
    end = readme.find("\n## ", start + len(SECTION))
    section = readme[start:end if end > 0 else None]
    blocks = re.findall(r"```(\w*)\n(.*?)```", section, re.S)
    langs = [lang for lang, _ in blocks]
    assert langs == ["sh", "yaml", "sh", "", "sh"], (
        f"README's quick start should be: set-up (sh), the file (yaml), the commands (sh), "
        f"the headers they print, watching it fail over with the mocks (sh); found {langs}")
    return [text for _, text in blocks]


def _bash(script: str, cwd, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], cwd=str(cwd), capture_output=True, text=True,
                          timeout=timeout)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def providers():
    openai, anthropic = start_mock("openai"), start_mock("anthropic")
    yield openai, anthropic
    openai.stop()
    anthropic.stop()


BUILD = "./scripts/setup.sh && ./scripts/build.sh"


def _setup(setup: str) -> str:
    """The set-up block without its first line, which must set up and build."""
    first, _, rest = setup.partition("\n")
    assert first.strip() == BUILD, f"README's set-up should start with {BUILD!r}: {first!r}"
    return rest


def test_readme_quick_start_runs_as_written(providers, tmp_path):
    openai, anthropic = providers
    setup, file_text, commands, expected, _watch = _quickstart()
    setup = _setup(setup)
    for built in ("target/release/llm-failover", "dist/llm_failover.wasm", ".venv/bin/envoy"):
        assert (REPO_ROOT / built).exists(), f"{built} is missing: run ./scripts/build.sh first"
    port = free_port()
    file_text = (file_text.replace("api.openai.com:443", f"127.0.0.1:{openai.port}")
                 .replace("api.anthropic.com:443", f"127.0.0.1:{anthropic.port}")
                 .replace("port: 10000", f"port: {port}"))
    assert f"127.0.0.1:{openai.port}" in file_text and f"port: {port}" in file_text
    (tmp_path / "gateway.failover.yaml").write_text(file_text)
    commands = commands.replace("localhost:10000", f"localhost:{port}")

    lines = commands.splitlines()
    envoy_at = next(i for i, line in enumerate(lines) if line.startswith("envoy "))
    before, envoy_line, after = lines[:envoy_at], lines[envoy_at], lines[envoy_at + 1:]
    # The set-up block runs in the repository (README: "in the repository"), the rest in a
    # clean directory.
    prologue = f"set -euo pipefail\ncd {REPO_ROOT}\n{setup}\ncd {tmp_path}\n"

    steps = _bash(prologue + "\n".join(before), tmp_path)
    assert steps.returncode == 0, f"README's commands failed:\n{steps.stdout}\n{steps.stderr}"
    assert steps.stdout.startswith("gateway.failover.yaml: valid ("), steps.stdout
    assert "warning" not in steps.stderr, steps.stderr  # validate --strict, literally
    assert "anthropic" in steps.stdout and "claude-sonnet-4-5" in steps.stdout, steps.stdout
    assert (tmp_path / "envoy.yaml").exists()

    openai.set_default(status=503)
    envoy_cmd = envoy_line.split("#")[0].strip() + " --disable-hot-restart"
    envoy = _spawn(["bash", "-c", prologue + "exec " + envoy_cmd], cwd=str(tmp_path),
                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not _listening(port):
            assert envoy.poll() is None, (
                f"Envoy exited: {envoy.stdout.read().decode(errors='replace')[-3000:]}")
            assert time.monotonic() < deadline, "Envoy did not listen within 30 s"
            time.sleep(0.1)
        curl = _bash(prologue + "\n".join(after), tmp_path)
    finally:
        _terminate(envoy, grace=3)
        if envoy.stdout:
            envoy.stdout.close()
    assert curl.returncode == 0, curl.stderr
    got = [line.strip().lower() for line in curl.stdout.splitlines() if line.strip()]
    want = [line.strip().lower() for line in expected.splitlines() if line.strip()]
    assert got == want, f"README says the curl prints {want}, it printed {got}"

    # The walk README describes: OpenAI tried once with its key, then Anthropic with its own key
    # and the model rewritten.
    assert openai.request_count() == 1
    sent = anthropic.last_request()
    assert json.loads(sent["body"])["model"] == "claude-sonnet-4-5"
    keys = [v for k, v in sent["headers"] if k.lower() == "x-api-key"]
    assert keys == ["sk-ant-..."], sent["headers"]
    assert not [v for k, v in sent["headers"] if k.lower() == "authorization"]
    # Its endpoint's host, as docs/configuration.md says (`authority`), never the caller's
    # `localhost:PORT`.
    hosts = [v for k, v in sent["headers"] if k.lower() == "host"]
    assert hosts == [f"127.0.0.1:{anthropic.port}"], hosts


def test_readme_watch_it_fail_over_says_which_line_does_what():
    readme = (REPO_ROOT / "README.md").read_text()
    _, _, _, _, watch = _quickstart()
    prose = readme[readme.index("### Watch it fail over"):readme.index(watch)]
    said = re.search(r"The (first|second|third|fourth|fifth) line makes OpenAI answer `503`", prose)
    assert said, prose
    line = watch.splitlines()[["first", "second", "third", "fourth", "fifth"].index(said[1])]
    assert "19101/behaviour" in line and '"status": 503' in line, line
    # Envoy refuses to start without the credentials' variables: README must not promise
    # a run without keys, and must say where they come from.
    assert "without keys" not in prose and "key variables set" in prose, prose


def test_readme_watch_it_fail_over_runs_as_written(tmp_path):
    setup, file_text, commands, expected, watch = _quickstart()
    setup = _setup(setup)
    port = free_port()
    (tmp_path / "gateway.failover.yaml").write_text(file_text.replace("port: 10000",
                                                                      f"port: {port}"))
    for fixed in ("18101", "18102", "19101", "19102"):
        assert fixed in watch, fixed
        watch = watch.replace(fixed, str(free_port()))
    watch = watch.rstrip().replace("envoy -c envoy.yaml", "exec envoy -c envoy.yaml --disable-hot-restart")
    prologue = f"set -euo pipefail\ncd {REPO_ROOT}\n{setup}\ncd {tmp_path}\n"
    # Its mocks and Envoy in one process group, ended together.
    run = _spawn(["bash", "-c", prologue + watch], cwd=str(tmp_path),
                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not _listening(port):
            assert run.poll() is None, (
                f"it exited: {run.stdout.read().decode(errors='replace')[-3000:]}")
            assert time.monotonic() < deadline, "Envoy did not listen within 30 s"
            time.sleep(0.1)
        curl = commands.splitlines()[-2:]  # the Quick start's curl, as README says
        assert curl[0].startswith("curl "), curl
        out = _bash(prologue + "\n".join(curl).replace("localhost:10000", f"localhost:{port}"),
                    tmp_path)
    finally:
        _terminate(run, grace=3)
        if run.stdout:
            run.stdout.close()
    assert out.returncode == 0, out.stderr
    got = [line.strip().lower() for line in out.stdout.splitlines() if line.strip()]
    want = [line.strip().lower() for line in expected.splitlines() if line.strip()]
    assert got == want, f"README says the curl prints {want}, it printed {got}"
