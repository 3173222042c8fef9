"""Inventory: the GPU groups of a service and how to start and stop each one (TOML).

    [rollout]   canary, max_unavailable, startup/drain/progress deadlines, gate retries,
                state_dir, results_dir, rollback_all, share_gpus (test rigs only)
    [launch]    parameters of the default SGLang launch template (rollout/launch.py): the
                speculative algorithm and its own parameters (a key of another one is refused)
    [gates]     numerics, speed and metric thresholds
    [auth]      api_key_env or api_key_file: the servers' --api-key, never written anywhere
    [[group]]   name, host, port, gpus, launcher = "local" | "systemd" | "command", and
                local: command (optional argv, default the launch template)
                systemd: unit (holds {backend}), ssh (optional destination), user (bool)
                command: start, stop, status (argv lists; status exit 0 = running on that
                arm, 1 = not), ssh (optional destination: the argv runs there)

Every error names the file, the group and the field, so a typo is fixed in one read.
"""
from __future__ import annotations

import os
import re
import socket
import stat
import string
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from rollout.launch import DEFAULTS as LAUNCH_DEFAULTS
from rollout.launch import LOGPROB_ALGORITHMS, check_params

LAUNCHERS = ("local", "systemd", "command")
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")

NUMERICS_MODES = ("auto", "logprobs", "tokens")

# field -> (type, default); a default of REQUIRED makes the field mandatory.
REQUIRED = object()
ROLLOUT_FIELDS = {
    "canary": (str, None),
    # at most this many groups out of service at once, on every path (rollback included)
    "max_unavailable": (int, 1),
    "startup_deadline_s": (float, 1200.0),  # CUDA-graph capture at 200k context takes minutes
    "drain_deadline_s": (float, 600.0),
    "health_timeout_s": (float, 30.0),
    # one invocation may not run longer; past it the tool halts where every group serves
    "progress_deadline_s": (float, 7200.0),
    # a gate that hits a transient error (connection, timeout, 5xx) is retried this often
    "gate_retries": (int, 2),
    "gate_retry_wait_s": (float, 5.0),
    "state_dir": (str, ".rollout"),
    "results_dir": (str, "reports/data"),
    "rollback_all": (bool, False),
    # true: groups on one host may list the same GPU. Only for a test rig that runs a control and
    # a candidate on one card (rollout/inventory.h200-local.toml); a service's group owns its GPUs.
    "share_gpus": (bool, False),
}
GATE_FIELDS = {
    "numerics_prompts": (int, 8),
    "numerics_prompt_tokens": (int, 64),
    "numerics_new_tokens": (int, 16),
    # the long-context numerics prompt: default the speed gate's context_tokens; 0 = none
    "numerics_long_context_tokens": (int, None),
    "min_top1_agreement": (float, 0.95),
    "max_mean_abs_logprob_diff": (float, 0.05),
    # "logprobs", "tokens" (no logprobs asked: rollout/numerics_tokens.py), or "auto": logprobs for
    # the algorithms that return verify-path logprobs (rollout.launch.LOGPROB_ALGORITHMS), else tokens
    "numerics_mode": (str, "auto"),
    "min_token_agreement": (float, 0.95),
    "context_tokens": (int, 185000),
    "rounds": (int, 5),
    "max_new_tokens": (int, 32),
    "speed_threshold": (float, 0.02),
    "ci_level": (float, 0.95),
    "seed": (int, 0),
    "request_timeout_s": (float, 900.0),
    # metric check over SGLang's /metrics, candidate vs control, during gates and the pause
    "max_error_rate": (float, 0.01),
    "max_queue_reqs": (int, 64),
    "min_accept_length_ratio": (float, 0.9),
    "max_itl_ratio": (float, 1.25),
    "min_metric_requests": (int, 3),
}
AUTH_FIELDS = {
    "api_key_env": (str, None),
    "api_key_file": (str, None),
}
GROUP_FIELDS = {
    "name": (str, REQUIRED),
    "host": (str, REQUIRED),
    "port": (int, REQUIRED),
    "gpus": (list, REQUIRED),
    "launcher": (str, REQUIRED),
    "command": (list, None),
    "unit": (str, None),
    "ssh": (str, None),
    "user": (bool, False),
    "start": (list, None),
    "stop": (list, None),
    "status": (list, None),
}
LAUNCHER_REQUIRES = {"local": (), "systemd": ("unit",), "command": ("start", "stop")}
LAUNCHER_ALLOWS = {"local": ("command",), "systemd": ("unit", "ssh", "user"),
                   "command": ("start", "stop", "status", "ssh")}
COMMAND_PLACEHOLDERS = {"name", "host", "port", "gpus", "backend", "drain_s"}
# argv items that are exactly one of these expand to several items
COMMAND_SPLICES = {"{launch}", "{env}"}
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # group names become file names
SSH_DEST = re.compile(r"^[^\s-][^\s]*$")
LOCAL_PLACEHOLDERS = {"python", "name", "host", "port", "gpus", "tp_size", "backend"} | set(LAUNCH_DEFAULTS)


class InventoryError(ValueError):
    pass


class SecretError(InventoryError):
    """The API key named by [auth] cannot be read (the message never holds the key)."""


@dataclass
class Group:
    name: str
    host: str
    port: int
    gpus: list[int]
    launcher: str
    command: list[str] | None = None
    unit: str | None = None
    ssh: str | None = None
    user: bool = False
    start: str | None = None
    stop: str | None = None
    status: str | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


@dataclass
class Inventory:
    path: Path
    groups: list[Group]
    launch: dict
    settings: dict
    gates: dict
    auth: dict = field(default_factory=lambda: {"api_key_env": None, "api_key_file": None})
    state_dir: Path = field(init=False)
    results_dir: Path = field(init=False)

    def __post_init__(self):
        # state lives beside the inventory (one service, one state); results beside the repo.
        self.state_dir = (self.path.parent / self.settings["state_dir"]).resolve()
        self.results_dir = Path(self.settings["results_dir"]).resolve()

    def api_key(self) -> str | None:
        """The servers' API key from [auth] (an environment variable or a 0600 file), or None.
        Registered with rollout.redact, so no text the tool writes can carry it."""
        from rollout.redact import register
        env, file = self.auth["api_key_env"], self.auth["api_key_file"]
        if env:
            key = os.environ.get(env, "").strip()
            if not key:
                raise SecretError(f"{self.path}: [auth]: field 'api_key_env': environment variable {env} is not set "
                                  f"or empty")
        elif file:
            path = (self.path.parent / file).resolve()
            try:
                mode = path.stat().st_mode
                key = path.read_text().strip()
            except OSError as e:
                raise SecretError(f"{self.path}: [auth]: field 'api_key_file': cannot read {path}: "
                                  f"{e.strerror}") from None
            if mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise SecretError(f"{self.path}: [auth]: field 'api_key_file': {path} is readable by other users "
                                  f"(mode {stat.S_IMODE(mode):o}); `chmod 600 {path}`")
            if not key:
                raise SecretError(f"{self.path}: [auth]: field 'api_key_file': {path} is empty")
        else:
            return None
        register(key)
        return key

    def group(self, name: str) -> Group:
        for g in self.groups:
            if g.name == name:
                return g
        raise InventoryError(f"{self.path}: no group named {name!r} (groups: {', '.join(g.name for g in self.groups)})")

    def order(self, canary: str | None = None) -> list[str]:
        """Group names in rollout order: the canary first, then the inventory's order."""
        first = self.group(canary or self.settings["canary"] or self.groups[0].name).name
        return [first] + [g.name for g in self.groups if g.name != first]


def _check(value, typ, where: str):
    if typ is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    ok = isinstance(value, typ) and not (typ in (int, float) and isinstance(value, bool))
    if not ok:
        raise InventoryError(f"{where}: must be {typ.__name__}, got {value!r}")
    return value


def _table(raw: dict, fields: dict, where: str) -> dict:
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise InventoryError(f"{where}: field {unknown[0]!r}: unknown field (known: {', '.join(fields)})")
    out = {}
    for name, (typ, default) in fields.items():
        if name not in raw:
            if default is REQUIRED:
                raise InventoryError(f"{where}: field {name!r}: missing")
            out[name] = default
        else:
            out[name] = _check(raw[name], typ, f"{where}: field {name!r}")
    return out


def _placeholders(template: str) -> set[str]:
    return {f for _, f, _, _ in string.Formatter().parse(template) if f}


def _group(raw, i: int, path: Path) -> Group:
    label = raw.get("name") if isinstance(raw, dict) and isinstance(raw.get("name"), str) else f"#{i + 1}"
    where = f"{path}: group {label!r}"
    if not isinstance(raw, dict):
        raise InventoryError(f"{where}: must be a table ([[group]])")
    for name in ("start", "stop", "status"):
        if isinstance(raw.get(name), str):
            raise InventoryError(f"{where}: field {name!r}: must be an argv list, e.g. [\"orch\", \"stop\", "
                                 f"\"{{name}}\"], not a shell string: a shell re-splits values that hold spaces, "
                                 f"quotes or ';' (see rollout/inventory.example.toml), got {raw[name]!r}")
    v = _table(raw, GROUP_FIELDS, where)
    if not NAME.match(v["name"]):
        raise InventoryError(f"{where}: field 'name': letters, digits, '_', '.', '-' only (it names files), "
                             f"got {v['name']!r}")
    if v["ssh"] is not None and not SSH_DEST.match(v["ssh"]):
        raise InventoryError(f"{where}: field 'ssh': a destination like user@host (no spaces, no leading '-'), "
                             f"got {v['ssh']!r}")
    if not 1 <= v["port"] <= 65535:
        raise InventoryError(f"{where}: field 'port': must be 1..65535, got {v['port']}")
    if not v["gpus"] or not all(isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in v["gpus"]):
        raise InventoryError(f"{where}: field 'gpus': must be a non-empty list of GPU ids >= 0, got {v['gpus']!r}")
    if len(set(v["gpus"])) != len(v["gpus"]):
        raise InventoryError(f"{where}: field 'gpus': lists a GPU twice: {v['gpus']!r}")
    kind = v["launcher"]
    if kind not in LAUNCHERS:
        raise InventoryError(f"{where}: field 'launcher': unknown launcher {kind!r} (known: {', '.join(LAUNCHERS)})")
    for name in LAUNCHER_REQUIRES[kind]:
        if v[name] is None:
            raise InventoryError(f"{where}: field {name!r}: missing (launcher {kind!r} needs it)")
    for name in ("command", "unit", "ssh", "start", "stop", "status"):
        if v[name] not in (None, False) and name not in LAUNCHER_ALLOWS[kind]:
            raise InventoryError(f"{where}: field {name!r}: not used by launcher {kind!r}")
    if kind == "local":
        if v["host"] not in LOCAL_HOSTS and v["host"] != socket.gethostname():
            raise InventoryError(f"{where}: field 'host': launcher 'local' runs on this machine, got {v['host']!r}")
        if v["command"] is not None:
            if not v["command"] or not all(isinstance(a, str) for a in v["command"]):
                raise InventoryError(f"{where}: field 'command': must be a non-empty list of strings")
            bad = set().union(*map(_placeholders, v["command"])) - LOCAL_PLACEHOLDERS
            if bad:
                raise InventoryError(f"{where}: field 'command': unknown placeholder {{{sorted(bad)[0]}}}")
    if kind == "systemd" and (_placeholders(v["unit"]) - {"backend", "name"} or "backend" not in _placeholders(v["unit"])):
        # One unit instance per arm (Environment=MLA_VERIFY_BACKEND=%i) makes the arm visible
        # to systemctl, so stop/start/is-active never guess which backend is running.
        raise InventoryError(f"{where}: field 'unit': must hold {{backend}} (e.g. 'sglang-{{name}}@{{backend}}.service') "
                             f"and no other placeholder but {{name}}, got {v['unit']!r}")
    if kind == "command":
        for name in ("start", "stop", "status"):
            if v[name] is not None:
                _command_argv(v[name], f"{where}: field {name!r}")
    return Group(**v)


def _command_argv(argv, where: str) -> None:
    """A command template is an argv list run without a local shell: each value stays one
    argument whatever it holds (spaces, quotes, ';'). {launch} and {env} are whole items that
    expand to the launch argv and to NAME=value items (for `env`)."""
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise InventoryError(f"{where}: must be a non-empty list of strings (argv; a shell string would "
                             f"re-split values with spaces, quotes or ';' -- see rollout/inventory.example.toml)")
    for item in argv:
        if item in COMMAND_SPLICES:
            continue
        used = _placeholders(item)
        inside = used & {s.strip("{}") for s in COMMAND_SPLICES}
        if inside:
            raise InventoryError(f"{where}: {{{sorted(inside)[0]}}} must be an argv item of its own, got {item!r}")
        bad = used - COMMAND_PLACEHOLDERS
        if bad:
            raise InventoryError(f"{where}: unknown placeholder {{{sorted(bad)[0]}}} "
                                 f"(known: {', '.join(sorted(COMMAND_PLACEHOLDERS | {'launch', 'env'}))})")


def load(path: str | Path) -> Inventory:
    """Read and validate an inventory file; raises InventoryError naming file, group, field."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise InventoryError(f"{path}: inventory file not found") from None
    except tomllib.TOMLDecodeError as e:
        raise InventoryError(f"{path}: not valid TOML: {e}") from None
    unknown = sorted(set(raw) - {"rollout", "launch", "gates", "auth", "group"})
    if unknown:
        raise InventoryError(f"{path}: table [{unknown[0]}]: unknown (known: rollout, launch, gates, auth, group)")
    settings = _table(raw.get("rollout", {}), ROLLOUT_FIELDS, f"{path}: [rollout]")
    gates = _table(raw.get("gates", {}), GATE_FIELDS, f"{path}: [gates]")
    auth = _table(raw.get("auth", {}), AUTH_FIELDS, f"{path}: [auth]")
    if auth["api_key_env"] and auth["api_key_file"]:
        raise InventoryError(f"{path}: [auth]: field 'api_key_file': give api_key_env or api_key_file, not both")
    for name in ("gate_retries",):
        if settings[name] < 0:
            raise InventoryError(f"{path}: [rollout]: field {name!r}: must be >= 0, got {settings[name]}")
    for name in ("startup_deadline_s", "drain_deadline_s", "health_timeout_s", "progress_deadline_s"):
        if settings[name] <= 0:
            raise InventoryError(f"{path}: [rollout]: field {name!r}: must be > 0, got {settings[name]}")
    if gates["rounds"] < 5:
        raise InventoryError(f"{path}: [gates]: field 'rounds': at least 5 interleaved rounds, got {gates['rounds']}")
    launch = raw.get("launch", {})
    unknown = sorted(set(launch) - set(LAUNCH_DEFAULTS))
    if unknown:
        raise InventoryError(f"{path}: [launch]: field {unknown[0]!r}: unknown (known: {', '.join(LAUNCH_DEFAULTS)})")
    problem = check_params(launch, template=False)
    if problem:
        raise InventoryError(f"{path}: [launch]: {problem}")
    groups_raw = raw.get("group")
    if not isinstance(groups_raw, list) or not groups_raw:
        raise InventoryError(f"{path}: field 'group': missing (at least one [[group]] table)")
    groups = [_group(g, i, path) for i, g in enumerate(groups_raw)]
    seen_name, seen_addr, seen_gpu = {}, {}, {}
    for g in groups:
        where = f"{path}: group {g.name!r}"
        if g.name in seen_name:
            raise InventoryError(f"{where}: field 'name': duplicate group name")
        seen_name[g.name] = g
        host = "127.0.0.1" if g.host in LOCAL_HOSTS else g.host
        if (host, g.port) in seen_addr:
            raise InventoryError(f"{where}: field 'port': {g.host}:{g.port} is already used by group {seen_addr[host, g.port]!r}")
        seen_addr[host, g.port] = g.name
        for gpu in g.gpus:
            if (host, gpu) in seen_gpu and not settings["share_gpus"]:
                raise InventoryError(f"{where}: field 'gpus': GPU {gpu} on host {g.host!r} is already used by group "
                                     f"{seen_gpu[host, gpu]!r} (a test rig with two servers on one card: [rollout] "
                                     f"share_gpus = true)")
            seen_gpu.setdefault((host, gpu), g.name)
    if not 1 <= settings["max_unavailable"] < len(groups):
        raise InventoryError(f"{path}: [rollout]: field 'max_unavailable': must be at least 1 and less than the "
                             f"number of groups ({len(groups)}), so one group always serves; got "
                             f"{settings['max_unavailable']}")
    if gates["numerics_long_context_tokens"] is None:
        gates["numerics_long_context_tokens"] = gates["context_tokens"]
    if gates["numerics_mode"] not in NUMERICS_MODES:
        raise InventoryError(f"{path}: [gates]: field 'numerics_mode': {gates['numerics_mode']!r} is not one of "
                             f"{', '.join(NUMERICS_MODES)}")
    if gates["numerics_mode"] == "auto":
        algorithm = launch.get("speculative_algorithm", LAUNCH_DEFAULTS["speculative_algorithm"])
        gates["numerics_mode"] = "logprobs" if algorithm in LOGPROB_ALGORITHMS else "tokens"
    inv = Inventory(path=path.resolve(), groups=groups, launch=launch, settings=settings, gates=gates, auth=auth)
    if settings["canary"] is not None and settings["canary"] not in seen_name:
        raise InventoryError(f"{path}: [rollout]: field 'canary': no group named {settings['canary']!r}")
    return inv
