"""API keys: read from the environment or a 0600 file named in the inventory, sent as SGLang
expects (Authorization: Bearer), and never printed, logged or recorded; secret-looking flags
in [launch] extra_args are redacted wherever a command line is shown or written."""
import json

import pytest

from rollout.client import EndpointError, get_json, request
from rollout.emulator import start_emulator
from rollout.inventory import load
from rollout_helpers import run_tool

REDACTED = "REDACTED"

KEY = "sk-rollout-test-9f3c2a"
EXTRA_SECRET = "adminsecret-7d1e"


def everything_written(f) -> str:
    """Every file the tool wrote (state, audit, pid files, server logs, results)."""
    texts = []
    for root in (f.state_dir, f.results):
        for p in root.rglob("*"):
            if p.is_file():
                texts.append(p.read_text(errors="replace"))
    return "\n".join(texts)


def test_a_keyed_service_is_rolled_out_and_the_key_never_written(make_fleet, monkeypatch):
    monkeypatch.setenv("ROLLOUT_TEST_KEY", KEY)
    f = make_fleet(n=2, auth={"api_key_env": "ROLLOUT_TEST_KEY"}, api_key=KEY)
    f.up()
    # the servers really want the key (SGLang: everything but /health*, /ready, /metrics)
    assert request(f.url("g0"), "GET", "/server_info")[0] == 401
    assert request(f.url("g0"), "GET", "/health")[0] == 200
    r = run_tool(f.inv, "canary")
    assert r.returncode == 0, r.stderr
    assert f.state()["status"] == "canary_passed" and f.arm("g0") == "flash"
    out = [r.stdout + r.stderr]
    for verb in ("status", "plan"):
        x = run_tool(f.inv, verb)
        out.append(x.stdout + x.stderr)
    assert KEY not in "\n".join(out) and KEY not in everything_written(f)
    # /server_info hands the key back (SGLang returns every server arg); the result keeps none of it
    assert get_json(f.url("g0"), "/server_info", api_key=KEY)["api_key"] == KEY
    assert "--api-key REDACTED" in f.events("start", group="g0", arm="flash")[0]["command"]
    for p in (f.state_dir / "pids").glob("*.json"):
        assert oct(p.stat().st_mode & 0o777) == "0o600"


def test_without_the_key_the_tool_says_what_is_missing(make_fleet, monkeypatch):
    monkeypatch.delenv("ROLLOUT_TEST_KEY", raising=False)
    f = make_fleet(n=2, auth={"api_key_env": "ROLLOUT_TEST_KEY"})
    r = run_tool(f.inv, "canary")
    assert r.returncode == 1 and "[auth]" in r.stderr and "ROLLOUT_TEST_KEY is not set" in r.stderr


def test_key_file_must_be_private(tmp_path):
    from rollout.inventory import SecretError
    key = tmp_path / "key"
    key.write_text(KEY + "\n")
    inv_path = tmp_path / "inv.toml"
    inv_path.write_text('[auth]\napi_key_file = "key"\n[[group]]\nname = "a"\nhost = "127.0.0.1"\nport = 1\n'
                        'gpus = [0]\nlauncher = "local"\n[[group]]\nname = "b"\nhost = "127.0.0.1"\nport = 2\n'
                        'gpus = [1]\nlauncher = "local"\n')
    key.chmod(0o644)
    with pytest.raises(SecretError, match="readable by other users.*chmod 600") as e:
        load(inv_path).api_key()
    assert KEY not in str(e.value)
    key.chmod(0o600)
    assert load(inv_path).api_key() == KEY


def test_client_sends_bearer_and_a_401_names_the_fix(data_dir):
    with start_emulator("flash", data_dir=data_dir, time_scale=0.05, extra_args=["--api-key", KEY]) as emu:
        assert get_json(emu.url, "/server_info", api_key=KEY)["emulated_arm"] == "flash"
        with pytest.raises(EndpointError, match=r"HTTP 401 \(the server wants an API key: set \[auth\]") as e:
            get_json(emu.url, "/server_info", api_key="wrong-key")
        assert not e.value.transient and "wrong-key" not in str(e.value)


def test_emulator_decides_auth_as_sglang_does(data_dir):
    from sglang.srt.utils.auth import AuthLevel, decide_request_auth
    paths = ["/health", "/health_generate", "/ready", "/metrics", "/server_info", "/model_info", "/generate",
             "/flush_cache", "/v1/completions"]
    with start_emulator("triton", data_dir=data_dir, time_scale=0.05, extra_args=["--api-key", KEY]) as emu:
        for path in paths:
            for sent in (None, KEY, "nope-nope"):
                want = decide_request_auth(method="GET", path=path, api_key=KEY, admin_api_key=None,
                                           authorization_header=f"Bearer {sent}" if sent else None,
                                           auth_level=AuthLevel.NORMAL).allowed
                status, _, _ = request(emu.url, "GET", path, timeout=5, api_key=sent)
                assert (status != 401) == want, (path, sent, status)


def test_extra_args_secrets_are_redacted_in_plan_audit_and_pid_files(make_fleet):
    f = make_fleet(n=2)
    text = f.inv.read_text()
    for name in f.names:  # a local command line carrying a secret flag, as [launch] extra_args would
        text = text.replace('"--enable-metrics"]', f'"--enable-metrics", "--api-key", "{EXTRA_SECRET}"]', 1)
    f.inv.write_text(text)
    r = run_tool(f.inv, "plan")
    assert r.returncode == 0 and EXTRA_SECRET not in r.stdout and "--api-key REDACTED" in r.stdout
    f.up()
    assert EXTRA_SECRET not in everything_written(f)
    argv = json.loads((f.state_dir / "pids" / "g0.json").read_text())["argv"]
    assert argv[argv.index("--api-key") + 1] == REDACTED


def test_redaction_by_shape_and_by_value():
    from rollout.redact import redact_argv
    argv = ["python", "--api-key", "k1k1k1", "--hf-token=t0t0t0", "--tokenizer-path", "/tok", "--ssl-keyfile", "/k"]
    assert redact_argv(argv) == ["python", "--api-key", REDACTED, f"--hf-token={REDACTED}", "--tokenizer-path",
                                 "/tok", "--ssl-keyfile", "/k"]


def test_launch_extra_args_are_redacted_in_plan(tmp_path):
    inv = tmp_path / "inv.toml"
    inv.write_text(f'[launch]\nmodel_path = "/m"\ndraft_model_path = "/d"\nextra_args = ["--api-key", "{KEY}"]\n'
                   '[[group]]\nname = "a"\nhost = "gpu1"\nport = 1\ngpus = [0]\nlauncher = "systemd"\n'
                   'unit = "s@{backend}"\n'
                   '[[group]]\nname = "b"\nhost = "gpu2"\nport = 1\ngpus = [0]\nlauncher = "command"\n'
                   'start = ["orch", "{launch}"]\nstop = ["orch", "stop"]\n')
    r = run_tool(inv, "plan")
    assert r.returncode == 0, r.stderr
    assert KEY not in r.stdout and r.stdout.count("--api-key REDACTED") >= 2
    assert not (tmp_path / ".rollout").exists()
