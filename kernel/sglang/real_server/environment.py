"""The launch environment of SGLang 0.5.23's real server on the GPU machine: where everything
lives (Paths, one state root under /tmp), the unpacked server bundle, the launch wrapper, the
runtime inventory and the planted plugin's temporary dist-info.

How the environment reaches a server: the rollout tool's local launcher starts the launch
template's `sglang serve ...` (<root>/bin/sglang, beside `[launch] python`) with its own
environment plus CUDA_VISIBLE_DEVICES and MLA_VERIFY_BACKEND. `[launch] python` is the wrapper written here
(<root>/bin/python), which sets everything else and execs the GPU image's python3, so a
server started by hand from the same inventory gets the same environment:
  PYTHONPATH            the repository (the plugin's code) : the bundle's site (SGLang, the
                        wheels, the stand-ins, the plugin's dist-info) : its server-only/ (stand-ins
                        only a server sees) [: MLA_VERIFY_EXTRA_PYTHONPATH]
  SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK=1   the engine asserts a sglang-kernel version
  SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python   the Rust tree core links torch 2.14
  SGLANG_IS_FLASHINFER_AVAILABLE=false     the bundle's flashinfer stand-in (sampling only, for
                                           DFLASH's startup) is not FlashInfer: SGLang's backends
                                           and samplers that need it stay off, as on the image
  SGLANG_FORCE_FUSED_OP_BACKEND unset      =torch sends the NextN MoE to a CPU path that
                                           breaks draft CUDA-graph capture
  MLA_VERIFY_CACHE      the bundle's prebuilt kernel library
  MLA_VERIFY_STANDIN_LOG, MLA_VERIFY_PLANTED_LOG   which stand-ins / planted faults ran
  SGLANG_TORCH_PROFILER_DIR                where /start_profile traces go
MLA_VERIFY_EXTRA_PYTHONPATH is how the planted step gives one server the planted plugin's
dist-info: the rollout tool passes its own environment through to the servers it starts.
`<root>/bin/sglang` runs `sglang serve` the same way, for a launch template that uses it (the
default one does): the console script's own call, `sglang.cli.main.main()` (SERVE_CODE), since
`python -m sglang.cli.main` runs that module without calling main() and exits at once.
With `emulate`, the wrapper runs rollout's emulator instead (emulated_server.py): the job's
orchestration on a machine without a GPU. The KV pool is a flag, not the environment: the
runtime inventory's [launch] extra_args carry `--kv-cache-dtype fp8_e4m3` for an fp8 run.
"""
from __future__ import annotations

import json
import os
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ..server_bundle import STANDIN_ENV

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_ROOT = Path("/tmp/mla-real-server")
EXAMPLE_INVENTORY = ROOT / "rollout" / "inventory.h200-local.toml"
# The speculative algorithms the job serves, each with its example inventory and its own default
# state root (an EAGLE run's servers, state and results are never a DFLASH run's)
ALGORITHMS = ("EAGLE", "DFLASH")
EXAMPLES = {"EAGLE": EXAMPLE_INVENTORY, "DFLASH": ROOT / "rollout" / "inventory.h200-local-dflash.toml"}
DEFAULT_ROOTS = {"EAGLE": DEFAULT_ROOT, "DFLASH": Path("/tmp/mla-real-server-dflash")}
# SGLang's KV pools the kernel reads (kernel/sglang/strict.py SERVED_KV): auto (the model's bf16,
# the examples' launch as measured) or fp8_e4m3 (what a Kimi-K2.6 deployment may run). fp8 is the
# algorithm's example with `--kv-cache-dtype fp8_e4m3` on both arms' command line, under its own
# root and on its own ports, so a bf16 fleet of the same algorithm can stay up beside it
KV_DTYPES = ("auto", "fp8_e4m3")
FP8_PORT_SHIFT = 4    # past both bf16 examples (30000-30003): EAGLE fp8 30004-30005, DFLASH fp8 30006-30007
DFLASH_BLOCK = 16     # the block of DFlash's published drafts (z-lab's *-DFlash-b16)
EXTRA_PATH_ENV = "MLA_VERIFY_EXTRA_PYTHONPATH"


def default_root(algorithm: str, kv_cache_dtype: str = "auto") -> Path:
    """The state root of one configuration: the algorithm's, with -fp8 for the fp8_e4m3 pool."""
    root = DEFAULT_ROOTS[algorithm]
    return root if kv_cache_dtype == "auto" else root.with_name(root.name + "-fp8")


def kv_words(kv_cache_dtype: str) -> str:
    """A KV pool in words, as the job's table and phase 3 name it."""
    return "bf16 KV pool (--kv-cache-dtype auto)" if kv_cache_dtype == "auto" else f"{kv_cache_dtype} KV pool"


def kv_clause(kv_cache_dtype: str) -> str:
    """", <the pool in words>" to append to a run's label, "" for auto: labels name the fp8 pool
    and leave SGLang's default unsaid, as every run's before --kv-cache-dtype did."""
    return "" if kv_cache_dtype == "auto" else ", " + kv_words(kv_cache_dtype)


SERVER_ENV = {
    "SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK": "1",
    "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND": "python",
    **STANDIN_ENV,
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}
UNSET = ("SGLANG_FORCE_FUSED_OP_BACKEND",)


@dataclass(frozen=True)
class Paths:
    """Everything the job keeps on the GPU machine, under one root (survives between device
    calls while the machine stays warm)."""
    root: Path = DEFAULT_ROOT

    @property
    def bundle(self) -> Path:       # the unpacked archive: site/, kernel-cache/
        return self.root / "bundle"

    @property
    def site(self) -> Path:
        return self.bundle / "site"

    @property
    def kernel_cache(self) -> Path:
        return self.bundle / "kernel-cache"

    @property
    def server_only(self) -> Path:  # stand-ins for the server alone (server_bundle.SERVER_ONLY_PACKAGES)
        return self.bundle / "server-only"

    @property
    def unpacked_stamp(self) -> Path:
        return self.root / "bundle.json"

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def wrapper(self) -> Path:
        return self.bin / "python"

    def model(self, layers: int) -> Path:
        return self.root / "models" / f"L{layers}"

    def draft(self, layers: int, block_size: int) -> Path:   # a DFlash draft for model(layers)
        return self.root / "models" / f"L{layers}-dflash-b{block_size}"

    @property
    def algorithm_file(self) -> Path:   # the configuration this root serves (written by setup; served())
        return self.root / "algorithm.json"

    def served(self) -> dict | None:
        """{"algorithm", "block_size", "kv_cache_dtype"} this root serves, None before setup. A
        marker written before --kv-cache-dtype has no kv_cache_dtype: that root served auto."""
        if not self.algorithm_file.exists():
            return None
        return {"kv_cache_dtype": "auto", **json.loads(self.algorithm_file.read_text())}

    @property
    def inventory(self) -> Path:
        return self.root / "inventory.toml"

    @property
    def state_dir(self) -> Path:
        return self.root / "rollout-state"

    @property
    def rollout_results(self) -> Path:
        return self.root / "results" / "rollout"

    def step_results(self, layers: int) -> Path:
        return self.root / "results" / f"L{layers}"

    @property
    def groups_file(self) -> Path:  # which model the rollout groups were started with
        return self.root / "groups.json"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def planted_site(self) -> Path:
        return self.root / "planted-site"

    @property
    def standin_log(self) -> Path:
        return self.root / "standins.log"

    @property
    def planted_log(self) -> Path:
        return self.root / "planted.log"

    @property
    def profiles(self) -> Path:
        return self.root / "profiles"

    @property
    def started_once(self) -> Path:  # a server came up here before: SGLang's JIT kernels are compiled
        return self.root / "jit-warm"


def server_env(paths: Paths) -> dict[str, str]:
    """What the wrapper exports for a real server (besides PYTHONPATH)."""
    return {**SERVER_ENV, "MLA_VERIFY_CACHE": str(paths.kernel_cache), "MLA_VERIFY_STANDIN_LOG": str(paths.standin_log),
            "MLA_VERIFY_PLANTED_LOG": str(paths.planted_log), "SGLANG_TORCH_PROFILER_DIR": str(paths.profiles)}


def wrapper_script(paths: Paths, *, python: str, emulate: dict | None = None) -> str:
    """The shell text of <root>/bin/python. emulate: {"time_scale": float} runs the emulator."""
    q = shlex.quote
    lines = ["#!/bin/sh", "# Written by kernel/sglang/real_server/environment.py: the launch environment of "
             "SGLang 0.5.23 from the server bundle."]
    if emulate is None:
        path = f"{ROOT}:{paths.site}:{paths.server_only}"
        env, target = server_env(paths), [python]
    else:
        path = str(ROOT)
        env = {"CUDA_VISIBLE_DEVICES": "0", "MLA_VERIFY_PLANTED_LOG": str(paths.planted_log),
               "MLA_VERIFY_EMULATOR_TIME_SCALE": str(emulate.get("time_scale", 0.1))}
        target = [python, "-m", "kernel.sglang.real_server.emulated_server"]
    lines.append(f'export PYTHONPATH={q(path)}"${{{EXTRA_PATH_ENV}:+:${EXTRA_PATH_ENV}}}"')
    lines += [f"export {k}={q(v)}" for k, v in env.items()]
    lines += [f"unset {k}" for k in UNSET]
    lines.append("exec " + " ".join(q(a) for a in target) + ' "$@"')
    return "\n".join(lines) + "\n"


# What SGLang's `sglang` console script runs (entry point sglang.cli.main:main), as `python -c`.
SERVE_CODE = "import sys; sys.argv[0] = 'sglang'; from sglang.cli.main import main; sys.exit(main())"


def write_wrappers(paths: Paths, *, python: str, emulate: dict | None = None) -> Path:
    """<root>/bin/python (the wrapper) and <root>/bin/sglang (`sglang serve` through it)."""
    paths.bin.mkdir(parents=True, exist_ok=True)
    paths.wrapper.write_text(wrapper_script(paths, python=python, emulate=emulate))
    sglang = paths.bin / "sglang"
    sglang.write_text(f"#!/bin/sh\nexec {shlex.quote(str(paths.wrapper))} -c {shlex.quote(SERVE_CODE)} \"$@\"\n")
    for f in (paths.wrapper, sglang):
        f.chmod(0o755)
    return paths.wrapper


def cli_env(paths: Paths, extra: dict | None = None, base: dict | None = None) -> dict[str, str]:
    """The environment of `python -m rollout ...` (and so of every server it starts): the
    caller's, with <root>/bin first on PATH and the repository importable."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = f"{paths.bin}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT)
    env.pop(EXTRA_PATH_ENV, None)
    env.pop("MLA_VERIFY_PLANTED_FAULT", None)
    for k in UNSET:
        env.pop(k, None)
    env.update(extra or {})
    return env


# -- the runtime inventory ---------------------------------------------------------------------
def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} {v!r} as TOML")


def dump_toml(data: dict) -> str:
    """TOML text of an inventory-shaped dict (tables of scalars and lists; arrays of tables)."""
    lines = []
    for key, value in data.items():
        items = value if isinstance(value, list) else [value]
        for item in items:
            lines.append(f"[[{key}]]" if isinstance(value, list) else f"[{key}]")
            lines += [f"{k} = {_toml_value(v)}" for k, v in item.items()]
            lines.append("")
    return "\n".join(lines)


def parse_override(text: str) -> tuple[str, object]:
    """'key=value' with a TOML value (context_tokens=4096, seed=1)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--gate: expected key=value, got {text!r}")
    try:
        return key.strip(), tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"--gate {text!r}: the value is not a TOML value ({e})") from None


def runtime_inventory(paths: Paths, layers: int, *, algorithm: str = "EAGLE", block_size: int | None = None,
                      kv_cache_dtype: str = "auto", example: Path | None = None, ports=None, gates=None,
                      settings=None) -> dict:
    """The repository's example inventory of `algorithm` (EXAMPLES) with this root's paths,
    `layers`' model (and for DFLASH its draft and block_size, default the example's), and the
    given ports / [gates] / [rollout] overrides. kv_cache_dtype fp8_e4m3 adds `--kv-cache-dtype
    fp8_e4m3` to [launch] extra_args (every group's command line, both arms: the arm stays the
    environment) and moves the example's ports by FP8_PORT_SHIFT unless `ports` are given; auto
    leaves the launch as measured (SGLang's default, no flag). Returns the dict (write_inventory
    writes it)."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm: expected one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    if kv_cache_dtype not in KV_DTYPES:
        raise ValueError(f"kv_cache_dtype: expected one of {', '.join(KV_DTYPES)}, got {kv_cache_dtype!r}")
    raw = tomllib.loads(Path(example or EXAMPLES[algorithm]).read_text())
    if raw["launch"].get("speculative_algorithm") != algorithm:
        raise ValueError(f"example {example}: its [launch] speculative_algorithm is "
                         f"{raw['launch'].get('speculative_algorithm')!r}, not {algorithm!r}")
    raw["launch"].update(python=str(paths.wrapper), model_path=str(paths.model(layers)))
    if algorithm == "DFLASH":
        block = block_size or raw["launch"]["speculative_dflash_block_size"]
        raw["launch"].update(draft_model_path=str(paths.draft(layers, block)), speculative_dflash_block_size=block)
    elif block_size is not None:
        raise ValueError(f"block_size: DFLASH's parameter, not {algorithm}'s (got {block_size})")
    if kv_cache_dtype != "auto":
        extra = [str(a) for a in raw["launch"].get("extra_args", [])]
        if "--kv-cache-dtype" in extra:   # two values on one command line: SGLang's parser keeps the last
            raise ValueError(f"example {example or EXAMPLES[algorithm]}: its [launch] extra_args set --kv-cache-dtype "
                             f"already; kv_cache_dtype {kv_cache_dtype!r} would be a second value")
        raw["launch"]["extra_args"] = extra + ["--kv-cache-dtype", kv_cache_dtype]
        if ports is None:
            ports = [g["port"] + FP8_PORT_SHIFT for g in raw["group"]]
    raw["rollout"].update(state_dir=str(paths.state_dir), results_dir=str(paths.rollout_results), **(settings or {}))
    raw.setdefault("gates", {}).update(gates or {})
    if ports is not None:
        if len(ports) != len(raw["group"]):
            raise ValueError(f"--ports: {len(raw['group'])} groups need {len(raw['group'])} ports, got {ports}")
        for g, port in zip(raw["group"], ports):
            g["port"] = int(port)
    return raw


def write_inventory(paths: Paths, raw: dict) -> Path:
    """Write <root>/inventory.toml and validate it with the rollout tool's own loader."""
    from rollout.inventory import load

    example = EXAMPLES[raw["launch"]["speculative_algorithm"]].relative_to(ROOT)
    paths.inventory.parent.mkdir(parents=True, exist_ok=True)
    extra = [str(a) for a in raw["launch"].get("extra_args", [])]
    kv = f", with --kv-cache-dtype {extra[extra.index('--kv-cache-dtype') + 1]} in [launch] extra_args" \
        if "--kv-cache-dtype" in extra[:-1] else ""
    paths.inventory.write_text(f"# Written by kernel/sglang/real_server from {example}{kv}\n" + dump_toml(raw))
    load(paths.inventory)
    return paths.inventory


# -- the planted plugin ------------------------------------------------------------------------
def write_planted_dist_info(paths: Paths) -> Path:
    """A dist-info (outside the bundle and the repository) whose only entry point is the
    planted fault; its folder goes on one server's PYTHONPATH (MLA_VERIFY_EXTRA_PYTHONPATH)."""
    from .planted_fault import PLANTED_ENTRY_POINT

    d = paths.planted_site / "mla_verify_planted_fault-0.0.0.dist-info"
    d.mkdir(parents=True, exist_ok=True)
    (d / "METADATA").write_text("Metadata-Version: 2.1\nName: mla-verify-planted-fault\nVersion: 0.0.0\n")
    (d / "entry_points.txt").write_text(f"[sglang.srt.plugins]\n{PLANTED_ENTRY_POINT} = "
                                        f"kernel.sglang.real_server.planted_fault:register\n")
    return paths.planted_site


def planted_env(paths: Paths) -> dict[str, str]:
    return {EXTRA_PATH_ENV: str(write_planted_dist_info(paths)), "MLA_VERIFY_PLANTED_FAULT": "1"}

