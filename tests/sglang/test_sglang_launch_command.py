"""The README's control and candidate launch commands parse with SGLang 0.5.23's own
argument parser and differ only in MLA_VERIFY_BACKEND."""
import argparse
import importlib.util
import pathlib
import re
import shlex

from sglang.srt.server_args import ServerArgs

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def _commands():
    text = README.read_text()
    section = re.search(r"^## Serving with SGLang\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert section, "README has no '## Serving with SGLang' section"
    return [line for line in section.group(1).splitlines() if line.startswith("CUDA_VISIBLE_DEVICES=")]


def _split(line):
    words = shlex.split(line)
    env = {}
    while "=" in words[0] and not words[0].startswith("-"):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    assert words[:3] == ["python", "-m", "sglang.launch_server"], words[:3]
    return env, words[3:]


def test_control_and_candidate_differ_only_in_the_switch():
    cmds = [_split(c) for c in _commands()]
    assert [env["MLA_VERIFY_BACKEND"] for env, _ in cmds] == ["triton", "flash"]
    (env_a, args_a), (env_b, args_b) = cmds
    assert args_a == args_b
    assert {k: v for k, v in env_a.items() if k != "MLA_VERIFY_BACKEND"} == \
        {k: v for k, v in env_b.items() if k != "MLA_VERIFY_BACKEND"}


def test_every_flag_exists_in_sglang_0_5_23():
    assert importlib.util.find_spec("sglang.launch_server") is not None
    parser = argparse.ArgumentParser(prog="sglang serve", exit_on_error=False)
    ServerArgs.add_cli_args(parser)
    for line in _commands():
        env, argv = _split(line)
        args, unknown = parser.parse_known_args(argv)
        assert unknown == [], f"flags SGLang 0.5.23 does not know: {unknown}"
        assert (args.attention_backend, args.page_size, args.tp_size) == ("triton", 1, 8)
        assert (args.speculative_algorithm, args.speculative_num_steps, args.speculative_eagle_topk,
                args.speculative_num_draft_tokens) == ("EAGLE", 3, 4, 8)
        assert (args.host, args.port, args.context_length) == ("0.0.0.0", 30000, 200_000)
        assert len(env["CUDA_VISIBLE_DEVICES"].split(",")) == args.tp_size
