"""Every bad inventory gets an error naming the file, the group and the field."""
import socket

import pytest

from rollout_helpers import REPO, run_tool
from rollout.inventory import InventoryError, load

GOOD = '''
[rollout]
startup_deadline_s = 900
[launch]
model_path = "/models/Kimi-K2"
draft_model_path = "/models/Kimi-K2-eagle"
[[group]]
name = "a"
host = "gpu1"
port = 30000
gpus = [0, 1, 2, 3]
launcher = "systemd"
unit = "sglang-{name}@{backend}.service"
ssh = "ops@gpu1"
[[group]]
name = "b"
host = "gpu1"
port = 30001
gpus = [4, 5, 6, 7]
launcher = "command"
start = ["kubectl", "exec", "{host}", "--", "env", "{env}", "{launch}"]
stop = ["kubectl", "exec", "{host}", "--", "sglang-stop", "--port", "{port}", "--within", "{drain_s}"]
[[group]]
name = "c"
host = "127.0.0.1"
port = 30002
gpus = [0, 1]
launcher = "local"
'''


def write(tmp_path, text):
    p = tmp_path / "inv.toml"
    p.write_text(text)
    return p


def test_good_inventory_loads(tmp_path):
    inv = load(write(tmp_path, GOOD))
    assert [g.name for g in inv.groups] == ["a", "b", "c"]
    assert inv.settings["startup_deadline_s"] == 900.0 and inv.settings["drain_deadline_s"] == 600.0
    assert inv.gates["context_tokens"] == 185000 and inv.gates["rounds"] == 5
    assert inv.order() == ["a", "b", "c"] and inv.order("c") == ["c", "a", "b"]
    assert inv.state_dir == (tmp_path / ".rollout").resolve()
    assert inv.group("c").url == "http://127.0.0.1:30002"


def test_defaults_give_20_minute_startup_deadline(tmp_path):
    inv = load(write(tmp_path, GOOD.replace("startup_deadline_s = 900", "")))
    assert inv.settings["startup_deadline_s"] == 1200.0


def group_b_with(field_line_old, field_line_new):
    return GOOD.replace(field_line_old, field_line_new, 1)


BAD = [
    # (id, transform of GOOD, group named in the message, field named in the message)
    ("duplicate gpu", lambda s: s.replace("gpus = [4, 5, 6, 7]", "gpus = [3, 4, 5, 6]"), "b", "gpus"),
    ("duplicate port", lambda s: s.replace("port = 30001", "port = 30000"), "b", "port"),
    ("duplicate port localhost alias", lambda s: s.replace('host = "127.0.0.1"\nport = 30002',
                                                           'host = "localhost"\nport = 30002') +
     '[[group]]\nname = "d"\nhost = "127.0.0.1"\nport = 30002\ngpus = [7]\nlauncher = "local"\n', "d", "port"),
    ("duplicate name", lambda s: s.replace('name = "b"', 'name = "a"'), "a", "name"),
    ("gpu listed twice", lambda s: s.replace("gpus = [0, 1]", "gpus = [1, 1]"), "c", "gpus"),
    ("empty gpus", lambda s: s.replace("gpus = [0, 1]", "gpus = []"), "c", "gpus"),
    ("negative gpu", lambda s: s.replace("gpus = [0, 1]", "gpus = [-1]"), "c", "gpus"),
    ("missing host", lambda s: s.replace('host = "gpu1"\nport = 30001\n', 'port = 30001\n'), "b", "host"),
    ("missing port", lambda s: s.replace("port = 30001\n", ""), "b", "port"),
    ("missing gpus", lambda s: s.replace("gpus = [4, 5, 6, 7]\n", ""), "b", "gpus"),
    ("missing launcher", lambda s: s.replace('launcher = "local"\n', ""), "c", "launcher"),
    ("missing name", lambda s: s.replace('name = "c"\n', ""), "#3", "name"),
    ("unknown launcher", lambda s: s.replace('launcher = "local"', 'launcher = "docker"'), "c", "launcher"),
    ("systemd without unit", lambda s: s.replace('unit = "sglang-{name}@{backend}.service"\n', ""), "a", "unit"),
    ("systemd unit without backend", lambda s: s.replace("@{backend}", ""), "a", "unit"),
    ("command without stop", lambda s: s.replace(s[s.index("stop = ["):s.index("\n", s.index("stop = [")) + 1], ""),
     "b", "stop"),
    ("command unknown placeholder", lambda s: s.replace("{launch}", "{lanch}"), "b", "start"),
    ("command shell string", lambda s: s.replace('start = ["kubectl", "exec", "{host}", "--", "env", "{env}", "{launch}"]',
                                                 "start = \"ssh {host} 'env {env} {launch}'\""), "b", "start"),
    ("command launch inside an item", lambda s: s.replace('"env", "{env}", "{launch}"]', '"sh", "-c", "env {env} {launch}"]'),
     "b", "start"),
    ("name with a slash", lambda s: s.replace('name = "c"', 'name = "../c"'), "../c", "name"),
    ("ssh destination that is an option", lambda s: s.replace('ssh = "ops@gpu1"', 'ssh = "-oProxyCommand=x"'), "a", "ssh"),
    ("field of another launcher", lambda s: s.replace('launcher = "local"', 'launcher = "local"\nunit = "x@{backend}"'),
     "c", "unit"),
    ("unknown field", lambda s: s.replace("gpus = [0, 1]", "gpus = [0, 1]\ngpu_ids = [0]"), "c", "gpu_ids"),
    ("port wrong type", lambda s: s.replace("port = 30002", 'port = "30002"'), "c", "port"),
    ("port out of range", lambda s: s.replace("port = 30002", "port = 70000"), "c", "port"),
    ("local launcher on another host", lambda s: s.replace('host = "127.0.0.1"', 'host = "gpu9"'), "c", "host"),
    ("local command unknown placeholder",
     lambda s: s.replace('launcher = "local"', 'launcher = "local"\ncommand = ["python", "--gpu", "{gpu}"]'), "c", "command"),
]


@pytest.mark.parametrize("case,transform,group,field", BAD, ids=[b[0] for b in BAD])
def test_bad_inventory_names_file_group_field(tmp_path, case, transform, group, field):
    text = transform(GOOD)
    assert text != GOOD, f"case {case} did not change the inventory"
    path = write(tmp_path, text)
    with pytest.raises(InventoryError) as e:
        load(path)
    msg = str(e.value)
    assert str(path) in msg and f"group '{group}'" in msg and f"field '{field}'" in msg, msg


@pytest.mark.parametrize("text,where,field", [
    ("[[group]]\nname = 'a'\n[rollout]\nstartup_deadline = 5\n", "[rollout]", "startup_deadline"),
    ("[gates]\nrounds = 3\n", "[gates]", "rounds"),
    ("[launch]\nmodel = 'x'\n", "[launch]", "model"),
    ("[rollout]\ncanary = 'zz'\n" + GOOD.split("[launch]")[1].split("\n", 3)[3], "[rollout]", "canary"),
    ("[rollout]\n", "", "group"),
    ("[rollout]\nmax_unavailable = 3\n" + GOOD.split("[launch]")[1].split("\n", 3)[3], "[rollout]", "max_unavailable"),
    ("[rollout]\nmax_unavailable = 0\n" + GOOD.split("[launch]")[1].split("\n", 3)[3], "[rollout]", "max_unavailable"),
    ("[auth]\napi_key_env = 'K'\napi_key_file = 'f'\n" + GOOD, "[auth]", "api_key_file"),
    ("[auth]\napi_key = 'sk-123'\n" + GOOD, "[auth]", "api_key"),
    (GOOD.replace("[launch]", "[launch]\nspeculative_algorithm = 'DFLASH'\nspeculative_num_steps = 3"), "[launch]",
     "speculative_num_steps"),
    (GOOD.replace("[launch]", "[launch]\nspeculative_dflash_block_size = 16"), "[launch]",
     "speculative_dflash_block_size"),
    (GOOD.replace("[launch]", "[launch]\nspeculative_algorithm = 'ddtree'"), "[launch]", "speculative_algorithm"),
    (GOOD.replace("[launch]", "[launch]\nspeculative_args = ['--x']"), "[launch]", "speculative_args"),
    ("[gates]\nnumerics_mode = 'text'\n" + GOOD, "[gates]", "numerics_mode"),
])
def test_bad_tables_name_file_table_field(tmp_path, text, where, field):
    path = write(tmp_path, text)
    with pytest.raises(InventoryError) as e:
        load(path)
    msg = str(e.value)
    assert str(path) in msg and where in msg and f"'{field}'" in msg, msg


def test_not_toml_and_missing_file(tmp_path):
    with pytest.raises(InventoryError, match="not valid TOML"):
        load(write(tmp_path, "[[group]\n"))
    with pytest.raises(InventoryError, match="inventory file not found"):
        load(tmp_path / "nope.toml")


def test_same_gpu_ids_on_different_hosts_are_fine(tmp_path):
    text = GOOD.replace('host = "gpu1"\nport = 30001', 'host = "gpu2"\nport = 30001').replace(
        "gpus = [4, 5, 6, 7]", "gpus = [0, 1, 2, 3]")
    assert len(load(write(tmp_path, text)).groups) == 3


def test_two_groups_on_one_gpu_need_share_gpus(tmp_path):
    """A service's group owns its GPUs; a test rig (two servers on one card) says so explicitly."""
    text = GOOD.replace("gpus = [4, 5, 6, 7]", "gpus = [3, 4, 5, 6]")
    with pytest.raises(InventoryError, match=r"group 'b': field 'gpus': GPU 3 on host 'gpu1' is already used by "
                                             r"group 'a' .*share_gpus = true"):
        load(write(tmp_path, text))
    shared = load(write(tmp_path, text.replace("startup_deadline_s = 900", "startup_deadline_s = 900\nshare_gpus = true")))
    assert shared.group("b").gpus == [3, 4, 5, 6]


def test_the_h200_rig_shares_its_one_gpu():
    inv = load(REPO / "rollout" / "inventory.h200-local.toml")
    assert inv.settings["share_gpus"] and [g.gpus for g in inv.groups] == [[0], [0]]


def test_local_launcher_accepts_this_hostname(tmp_path):
    text = GOOD.replace('host = "127.0.0.1"', f'host = "{socket.gethostname()}"')
    assert load(write(tmp_path, text)).group("c").host == socket.gethostname()


def test_cli_reports_bad_inventory_with_exit_1(tmp_path):
    path = write(tmp_path, GOOD.replace('launcher = "local"', 'launcher = "docker"'))
    for verb in ("plan", "canary"):
        r = run_tool(path, verb)
        assert r.returncode == 1
        assert "bad inventory" in r.stderr and str(path) in r.stderr and "'launcher'" in r.stderr
    assert not (tmp_path / ".rollout").exists()


def test_example_inventory_in_repo_is_valid():
    inv = load(REPO / "rollout" / "inventory.example.toml")
    assert len(inv.groups) >= 2


DFLASH = GOOD.replace("[launch]", "[launch]\nspeculative_algorithm = 'DFLASH'\nspeculative_dflash_block_size = 16")
DDTREE = GOOD.replace("[launch]", "[launch]\nspeculative_algorithm = 'DDTREE'\nspeculative_args = "
                      "['--speculative-dflash-block-size', '16', '--speculative-ddtree-budget', '32']")


@pytest.mark.parametrize("text,mode", [(GOOD, "logprobs"), (DFLASH, "logprobs"), (DDTREE, "tokens"),
                                       ("[gates]\nnumerics_mode = 'tokens'\n" + GOOD, "tokens"),
                                       ("[gates]\nnumerics_mode = 'logprobs'\n" + DDTREE, "logprobs")])
def test_the_algorithm_and_its_numerics_mode(tmp_path, text, mode):
    """auto: logprobs where SGLang computes them from the verify logits (EAGLE family, DFLASH),
    tokens for any other algorithm (DDTree's worker raises on return_logprob); explicit wins."""
    inv = load(write(tmp_path, text))
    assert inv.gates["numerics_mode"] == mode and inv.gates["min_token_agreement"] == 0.95


def test_plan_names_the_algorithm_and_the_numerics_mode(tmp_path):
    r = run_tool(write(tmp_path, DDTREE), "plan")
    assert r.returncode == 0, r.stderr
    assert "--speculative-algorithm DDTREE" in r.stdout and "--speculative-ddtree-budget 32" in r.stdout
    assert "no logprobs asked (mode tokens)" in r.stdout


def test_the_example_s_fp8_pool_line_puts_the_flag_on_both_arms(tmp_path):
    """The example's commented fp8_e4m3 line, uncommented, is a valid inventory whose launch
    command carries --kv-cache-dtype fp8_e4m3 once, for the control and the candidate alike."""
    from rollout.launch import launch_argv

    text = (REPO / "rollout" / "inventory.example.toml").read_text()
    line = '#   extra_args = ["--kv-cache-dtype", "fp8_e4m3"]\n'
    assert line in text
    path = tmp_path / "fp8.toml"
    path.write_text(text.replace("[launch]\n", "[launch]\n" + line[4:], 1))
    inv = load(path)
    g = inv.groups[0]
    for arm in ("triton", "flash"):
        argv = launch_argv(inv.launch, host=g.host, port=g.port, gpus=g.gpus, arm=arm)
        assert argv.count("--kv-cache-dtype") == 1 and argv[argv.index("--kv-cache-dtype") + 1] == "fp8_e4m3"
