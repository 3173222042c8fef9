"""The SGLang launch command for a Kimi-K2-class deployment (one GPU group = one server).

Every inventory group uses this template unless it names its own `command`. The arm
(control or candidate) is NOT a flag: both arms run `--attention-backend triton` and the
plugin in every server process reads MLA_VERIFY_BACKEND (triton = control, flash = ours),
so a rollback is an environment change, never a different command line.

Two checkpoint kinds, one template:
- without a NextN/MTP layer (Kimi-K2 as published): EAGLE3 with an external draft
  (`speculative_algorithm = "EAGLE3"`, the default, and `draft_model_path`);
- with one NextN layer (DeepSeek-V3): `speculative_algorithm = "EAGLE"` and no
  `draft_model_path`, so SGLang loads the checkpoint's own NextN layer as the draft.
EAGLE without a draft on a checkpoint that has no NextN layer fails at the draft's weight
load (`AssertionError: Only 1 nextn layer is supported`), minutes into the start.

Flags are those of SGLang 0.5.23 (../shared/reading/sglang.md section 4). This template is
the one source of the launch command: the README shows it rendered, and
tests/sglang/test_sglang_launch_command.py keeps the two identical and resolves each
documented command through SGLang's full ServerArgs resolution against Kimi-K2-shaped
configs; tests/rollout/test_rollout_launch.py parses it with SGLang's own argument parser.
"""
from __future__ import annotations

import shlex

BACKEND_ENV = "MLA_VERIFY_BACKEND"
ARMS = ("triton", "flash")  # control, candidate
# EAGLE3 needs an external draft; EAGLE (NEXTN is SGLang's alias of it) uses the target
# checkpoint's NextN layer when no draft path is given.
ALGORITHMS = ("EAGLE3", "EAGLE", "NEXTN")

# Parameters an inventory's [launch] table may override. model paths have no default:
# a launch with a guessed model path would load the wrong weights for minutes.
DEFAULTS = {
    "python": "python",
    "model_path": None,
    # Required with EAGLE3; leave unset with EAGLE for a checkpoint with a NextN layer.
    "draft_model_path": None,
    "speculative_algorithm": "EAGLE3",
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 4,
    # T = 8 draft tokens per verify: the shape the kernel's centre point measures.
    "speculative_num_draft_tokens": 8,
    "context_length": "200k",
    # Captures TARGET_VERIFY graphs too in 0.5.23 (--cuda-graph-max-bs no longer exists).
    "cuda_graph_max_bs_decode": 8,
    "mem_fraction_static": 0.85,
    # Address the server binds; None = the group's host. A remote server the tool reaches
    # over the network usually binds 0.0.0.0.
    "bind_host": None,
    "extra_args": [],
}

TEMPLATE = [
    "{python}", "-m", "sglang.launch_server",
    "--model-path", "{model_path}",
    "--trust-remote-code",
    "--attention-backend", "triton",
    "--page-size", "1",
    "--tp-size", "{tp_size}",
    "--speculative-algorithm", "{speculative_algorithm}",
    "--speculative-num-steps", "{speculative_num_steps}",
    "--speculative-eagle-topk", "{speculative_eagle_topk}",
    "--speculative-num-draft-tokens", "{speculative_num_draft_tokens}",
    "--context-length", "{context_length}",
    "--cuda-graph-max-bs-decode", "{cuda_graph_max_bs_decode}",
    "--mem-fraction-static", "{mem_fraction_static}",
    "--enable-metrics",
    "--host", "{bind_host}",
    "--port", "{port}",
]


def group_env(gpus: list[int], arm: str) -> dict[str, str]:
    """The environment a group's server needs on top of the caller's: GPU set and arm."""
    if arm not in ARMS:
        raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpus), BACKEND_ENV: arm}


def render(argv: list[str], values: dict) -> list[str]:
    """Fill {placeholders} in each argv item; a missing value names the placeholder."""
    out = []
    for item in argv:
        try:
            out.append(item.format(**values))
        except KeyError as e:
            raise ValueError(f"launch template item {item!r} needs {e.args[0]!r}, which is not set") from None
    return out


def launch_argv(params: dict, *, host: str, port: int, gpus: list[int], arm: str) -> list[str]:
    """argv of the default SGLang launch for one group (tp size = number of GPUs). The arm is
    not on the command line (see the module docstring); it is accepted so every launcher
    calls this the same way."""
    values = {**DEFAULTS, **params}
    if not values.get("model_path"):
        raise ValueError("[launch] model_path is not set; the default launch template needs it")
    algorithm = str(values["speculative_algorithm"])
    if algorithm not in ALGORITHMS:
        raise ValueError(f"[launch] speculative_algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    draft = values.get("draft_model_path")
    if algorithm == "EAGLE3" and not draft:
        raise ValueError("[launch] draft_model_path is not set; EAGLE3 needs an external draft model "
                         "(for a checkpoint with a NextN layer: speculative_algorithm = \"EAGLE\" without a draft)")
    values.update(host=host, port=port, tp_size=len(gpus), bind_host=values["bind_host"] or host)
    argv = render(TEMPLATE, values)
    if draft:
        at = argv.index("--speculative-algorithm") + 2
        argv[at:at] = ["--speculative-draft-model-path", str(draft)]
    return argv + [str(a) for a in values["extra_args"]]


def shell_line(argv: list[str], env: dict[str, str]) -> str:
    """One copy-pasteable shell line: `VAR=.. VAR=.. cmd args` (for plan and logs)."""
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return (prefix + " " if prefix else "") + shlex.join(argv)
