"""`--emulate`: stand rollout's SGLang emulator in for the real server, behind the same
wrapper, so the real-server job's orchestration runs on a machine without a GPU (tests).

The wrapper execs `python -m kernel.sglang.real_server.emulated_server -m sglang.launch_server
<SGLang's flags>` (or, for <root>/bin/sglang, `-c <the console script's code> serve <flags>`); this reads the flags the emulator understands (--host, --port,
--model-path, --api-key, the speculative algorithm and the tokens it verifies per request:
DFLASH's block, else EAGLE's draft tokens; --kv-cache-dtype, which the emulator reports in
/server_info as SGLang does), takes the arm from MLA_VERIFY_BACKEND as a real server's plugin
does, and execs `python -m rollout.emulator` in the same process (so the local launcher's
SIGTERM reaches it). MLA_VERIFY_PLANTED_FAULT=1 on the flash arm becomes the emulator's
`corrupt_verify` fault (a wrong verify path, right prefill): what the planted plugin does to
a real server, noted in MLA_VERIFY_PLANTED_LOG the same way.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MODULES = ("sglang.launch_server", "sglang.cli.main")


def emulator_argv(argv: list[str], env: dict) -> list[str]:
    """The emulator's argv for a wrapper invocation `argv` (after the interpreter): `-m
    sglang.launch_server ...`, or `sglang serve ...` as <root>/bin/sglang runs it (`-c` and the
    console script's code, environment.SERVE_CODE)."""
    if len(argv) >= 2 and argv[0] == "-c" and "sglang.cli.main" in argv[1]:
        argv = ["-m", "sglang.cli.main"] + argv[2:]
    if len(argv) < 2 or argv[0] != "-m" or argv[1] not in MODULES:
        raise SystemExit(f"emulated_server: expected -m {' or -m '.join(MODULES)}, got {argv[:3]}")
    rest = argv[2:]
    if argv[1] == "sglang.cli.main":
        if not rest or rest[0] != "serve":
            raise SystemExit(f"emulated_server: only `sglang serve` is emulated, got {rest[:1]}")
        rest = rest[1:]
    p = argparse.ArgumentParser(add_help=False)
    for flag in ("--host", "--port", "--model-path", "--api-key", "--speculative-algorithm",
                 "--speculative-num-draft-tokens", "--speculative-dflash-block-size", "--kv-cache-dtype"):
        p.add_argument(flag)
    known, _ = p.parse_known_args(rest)
    arm = (env.get("MLA_VERIFY_BACKEND") or "triton").strip().lower()
    out = [sys.executable, "-m", "rollout.emulator", "--arm", arm, "--host", known.host or "127.0.0.1",
           "--port", known.port or "30000", "--enable-metrics", "--data-dir", str(ROOT / "reports" / "data"),
           "--time-scale", env.get("MLA_VERIFY_EMULATOR_TIME_SCALE", "0.1"), "--drain-s", "5"]
    if known.model_path:
        out += ["--model-path", known.model_path]
    if known.speculative_algorithm:
        out += ["--speculative-algorithm", known.speculative_algorithm]
    # the tokens each request verifies: DFLASH's block, else EAGLE's draft tokens
    tokens = known.speculative_dflash_block_size or known.speculative_num_draft_tokens
    if tokens:
        out += ["--draft-tokens", tokens]
    if known.kv_cache_dtype:
        out += ["--kv-cache-dtype", known.kv_cache_dtype]
    if known.api_key:
        out += ["--api-key", known.api_key]
    if env.get("MLA_VERIFY_PLANTED_FAULT") == "1" and arm == "flash":
        out += ["--fault", "corrupt_verify", "--fault-arm", "flash"]
    return out


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    out = emulator_argv(argv, dict(os.environ))
    log = os.environ.get("MLA_VERIFY_PLANTED_LOG")
    if "--fault" in out and log:
        with open(log, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "emulated": "corrupt_verify", "time": time.time()}) + "\n")
    os.execv(out[0], out)


if __name__ == "__main__":
    main()
