"""The SGLang launch command for a Kimi-K2-class deployment (one GPU group = one server).

Every inventory group uses this template unless it names its own `command`. The arm
(control or candidate) is NOT a flag: both arms run `--attention-backend triton` and the
plugin in every server process reads MLA_VERIFY_BACKEND (triton = control, flash = ours),
so a rollback is an environment change, never a different command line.

The entrypoint is `sglang serve --model-type llm` (SGLang 0.5.23's recommended one: `python -m
sglang.launch_server` still works but warns that `sglang serve` supersedes it; serve loads the
plugins, then hands the same arguments to the same ServerArgs and run_server; `--model-type llm`
skips its diffusion-model detection). `sglang` is the console script SGLang installs ([launch]
`sglang`: the server's PATH, or an absolute path; an inventory that names only its `python` gets
the `sglang` beside that interpreter, where pip put it).

The speculative algorithm and its own parameters (ALGORITHM_KEYS), one template:
- EAGLE3 (the default) with an external draft (`draft_model_path`), for a checkpoint without a
  NextN/MTP layer (Kimi-K2 as published); EAGLE (NEXTN is SGLang's alias) without
  `draft_model_path` on a checkpoint with one NextN layer (DeepSeek-V3), which SGLang loads as
  the draft (without one: `AssertionError: Only 1 nextn layer is supported`, minutes into the
  start). Their keys: speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens.
- DFLASH (SGLang 0.5.23, a block-diffusion drafter): `draft_model_path` (required) and
  speculative_dflash_block_size, the tokens it verifies per request (SGLang sets the draft
  tokens to it and steps / top-k to 1; given EAGLE's flags it warns and overrides them).
- any other algorithm a fork registers (DDTREE, SGLang pull request #29907): passed through as
  named, `draft_model_path` if given, and its own flags from `speculative_args` (an argv list:
  `["--speculative-dflash-block-size", "16", "--speculative-ddtree-budget", "32"]`); this tool
  checks neither the name nor the flags (the fork's parser does, at start).
A key of another algorithm set in [launch] is refused, naming it, so an inventory never carries
a parameter its algorithm ignores.

Flags are those of SGLang 0.5.23 (../shared/reading/sglang.md section 4). This template is
the one source of the launch command: the README shows it rendered, and
tests/sglang/test_sglang_launch_command.py keeps the two identical and resolves each
documented command through `sglang serve`'s argument handling and SGLang's full ServerArgs
resolution against Kimi-K2-shaped configs; tests/rollout/test_rollout_launch.py parses it with
SGLang's own argument parser.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

BACKEND_ENV = "MLA_VERIFY_BACKEND"
ARMS = ("triton", "flash")  # control, candidate
EAGLE_KEYS = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
# Each algorithm this template knows, with its own [launch] keys (each becomes --the-key-name);
# any other algorithm is passed through with `speculative_args`.
ALGORITHM_KEYS = {"EAGLE3": EAGLE_KEYS, "EAGLE": EAGLE_KEYS, "NEXTN": EAGLE_KEYS,
                  "DFLASH": ("speculative_dflash_block_size",)}
ALGORITHMS = tuple(ALGORITHM_KEYS)
NEEDS_DRAFT = ("EAGLE3", "DFLASH")
# The algorithms whose decode-time output_token_logprobs SGLang 0.5.23 computes from the verify
# logits (compute_spec_logprobs: eagle_worker_common.py, dflash_worker_v2.py:2951); the numerics
# gate's "auto" mode asks others for none (DDTree's worker raises on return_logprob).
LOGPROB_ALGORITHMS = ("EAGLE3", "EAGLE", "NEXTN", "DFLASH")
_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")

# Parameters an inventory's [launch] table may override. model paths have no default:
# a launch with a guessed model path would load the wrong weights for minutes.
DEFAULTS = {
    # the console script `sglang serve` runs from (the server's PATH, or an absolute path; unset
    # with `python` set: the `sglang` beside that interpreter)
    "sglang": "sglang",
    # the interpreter a group's own `command` may name as {python}
    "python": "python",
    "model_path": None,
    # Required with EAGLE3 and DFLASH; leave unset with EAGLE for a checkpoint with a NextN layer.
    "draft_model_path": None,
    "speculative_algorithm": "EAGLE3",
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 4,
    # T = 8 draft tokens per verify: the shape the kernel's centre point measures.
    "speculative_num_draft_tokens": 8,
    # DFLASH: its block, the tokens each request verifies (the drafter's trained block size)
    "speculative_dflash_block_size": 16,
    # an algorithm this template does not know (a fork's DDTREE): its flags, as argv items
    "speculative_args": [],
    "context_length": "200k",
    # Captures TARGET_VERIFY graphs too in 0.5.23 (--cuda-graph-max-bs no longer exists).
    "cuda_graph_max_bs_decode": 8,
    "mem_fraction_static": 0.85,
    # Address the server binds; None = the group's host. A remote server the tool reaches
    # over the network usually binds 0.0.0.0.
    "bind_host": None,
    "extra_args": [],
}
SPECULATIVE = "{speculative}"   # where the algorithm's flags go in TEMPLATE

TEMPLATE = [
    "{sglang}", "serve", "--model-type", "llm",
    "--model-path", "{model_path}",
    "--trust-remote-code",
    "--attention-backend", "triton",
    "--page-size", "1",
    "--tp-size", "{tp_size}",
    "--speculative-algorithm", "{speculative_algorithm}",
    SPECULATIVE,
    "--context-length", "{context_length}",
    "--cuda-graph-max-bs-decode", "{cuda_graph_max_bs_decode}",
    "--mem-fraction-static", "{mem_fraction_static}",
    "--enable-metrics",
    "--host", "{bind_host}",
    "--port", "{port}",
]


def flag(key: str) -> str:
    """The SGLang flag of a [launch] key: speculative_num_steps -> --speculative-num-steps."""
    return "--" + key.replace("_", "-")


def check_params(params: dict, *, template: bool = True) -> str | None:
    """What is wrong with a [launch] table's speculative settings (the message names the field),
    or None. `params`: the keys the inventory sets (not the defaults). template=False leaves out
    what only the default launch template needs (a draft model path: groups with their own
    `command` may never render it)."""
    values = {**DEFAULTS, **params}
    algorithm = values["speculative_algorithm"]
    if not isinstance(algorithm, str) or not _NAME.match(algorithm):
        return (f"field 'speculative_algorithm': {algorithm!r} is not an algorithm name (upper case, as SGLang "
                f"spells them: {', '.join(ALGORITHMS)}, or one a fork registers, such as DDTREE)")
    own = ALGORITHM_KEYS.get(algorithm, ())
    for key in sorted(params):
        owners = [a for a, keys in ALGORITHM_KEYS.items() if key in keys]
        if owners and key not in own:
            return (f"field {key!r}: a parameter of {'/'.join(owners)}, not of speculative_algorithm = "
                    f"{algorithm!r} (its own: {', '.join(own) or 'speculative_args'})")
    extra = values["speculative_args"]
    if not isinstance(extra, list) or not all(isinstance(a, (str, int, float)) for a in extra):
        return f"field 'speculative_args': expected a list of argv items, got {extra!r}"
    if extra and algorithm in ALGORITHM_KEYS:
        return (f"field 'speculative_args': for an algorithm this template does not know; {algorithm} takes "
                f"{', '.join(own)}")
    if template and algorithm in NEEDS_DRAFT and not values.get("draft_model_path"):
        other = ("for a checkpoint with a NextN layer: speculative_algorithm = \"EAGLE\" without a draft"
                 if algorithm == "EAGLE3" else "its block-diffusion drafter")
        return f"field 'draft_model_path': not set; {algorithm} needs an external draft model ({other})"
    return None


def speculative_flags(values: dict) -> list[str]:
    """The argv after --speculative-algorithm's value: the draft, then the algorithm's own flags."""
    algorithm = values["speculative_algorithm"]
    out = ["--speculative-draft-model-path", str(values["draft_model_path"])] if values.get("draft_model_path") else []
    for key in ALGORITHM_KEYS.get(algorithm, ()):
        out += [flag(key), str(values[key])]
    return out + [str(a) for a in values["speculative_args"]]


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
    calls this the same way. Raises ValueError naming the [launch] field that is wrong."""
    values = {**DEFAULTS, **params}
    if not values.get("model_path"):
        raise ValueError("[launch] model_path is not set; the default launch template needs it")
    problem = check_params(params)
    if problem:
        raise ValueError(f"[launch] {problem}")
    values.update(host=host, port=port, tp_size=len(gpus), bind_host=values["bind_host"] or host)
    if "sglang" not in params and "python" in params:   # the environment's own console script
        values["sglang"] = str(Path(str(params["python"])).with_name("sglang"))
    at = TEMPLATE.index(SPECULATIVE)
    argv = render(TEMPLATE[:at], values) + speculative_flags(values) + render(TEMPLATE[at + 1:], values)
    return argv + [str(a) for a in values["extra_args"]]


def shell_line(argv: list[str], env: dict[str, str]) -> str:
    """One copy-pasteable shell line: `VAR=.. VAR=.. cmd args` (for plan and logs)."""
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return (prefix + " " if prefix else "") + shlex.join(argv)
