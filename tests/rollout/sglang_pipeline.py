"""SGLang 0.5.23's own code from logprobs to the JSON of a /generate answer, run on the CPU.

The scheduler side is the real thing: a `Req` and SGLang's `SchedulerLogprobResultProcessor`
fed with a `LogitsProcessorOutput` the way the logits processor fills it for a prefill
(schedule_batch.py: position p of [logprob_start_len, len) scores input_ids[p + 1], the last
one the sampled token) and for each decode step. The tokenizer side is TokenizerManager's
`convert_logprob_style` / `add_logprob_to_meta_info` / `detokenize_*` and its `ReqState`,
executed verbatim from tokenizer_manager.py's source: that module imports fastapi, which the
CPU environment does not have. The answer is then the JSON of that dict, as the HTTP server
sends it, checked against SGLang's response contract (`sglang.api.v1.api_types.GenerateResponse`).

Only the numbers come from here (a Model of rollout.emulator_model); every list, null and
tuple of the layout is SGLang's.
"""
from __future__ import annotations

import ast
import asyncio
import dataclasses
import importlib.util
import json
import logging
import textwrap
from array import array
from contextlib import contextmanager
from types import MethodType, SimpleNamespace
from typing import Any, Dict, List, Optional, Set, Tuple, Union

import numpy as np
import torch
from sglang.api.v1.api_types import GenerateResponse
from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.managers.io_struct import GenerateReqInput
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.managers.scheduler_components.logprob_result_processor import SchedulerLogprobResultProcessor
from sglang.srt.runtime_context import SpawnRanks, create_context, use_context
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.server_args import ServerArgs

TOKENIZER_SIDE = ("ReqState", "convert_logprob_style", "add_logprob_to_meta_info", "detokenize_logprob_tokens",
                  "detokenize_top_logprobs_tokens")


def _tokenizer_side() -> dict:
    """ReqState and TokenizerManager's logprob methods, compiled from SGLang's file as written."""
    path = importlib.util.find_spec("sglang.srt.managers").submodule_search_locations[0] + "/tokenizer_manager.py"
    src = open(path).read()
    ns = {"__name__": __name__, "dataclasses": dataclasses,
          "asyncio": asyncio, "np": np, "logger": logging.getLogger("sglang-excerpt"), "Any": Any, "Dict": Dict,
          "List": List, "Optional": Optional, "Set": Set, "Tuple": Tuple, "Union": Union}
    found = {}
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in TOKENIZER_SIDE and node.name not in found:
            found[node.name] = textwrap.dedent(" " * node.col_offset + ast.get_source_segment(src, node))
    missing = set(TOKENIZER_SIDE) - set(found)
    if missing:
        raise RuntimeError(f"{path}: no {sorted(missing)} (SGLang changed; this pipeline follows 0.5.23)")
    code = "from __future__ import annotations\n@dataclasses.dataclass\n" + "\n\n".join(found[n] for n in TOKENIZER_SIDE)
    exec(compile(code, f"<excerpt of {path}>", "exec"), ns)
    return ns


_TM = None


@contextmanager
def published():
    """SGLang's runtime context (Req.is_prefill_only reads it) for one request; whatever context
    the process had before (tests/sglang publishes its own) is back afterwards."""
    ctx = create_context(ServerArgs(model_path="dummy"), role="test", ranks=SpawnRanks(world_rank=0, dp_rank=None))
    with use_context(ctx):
        yield


def generate_answer(model, body: dict, output_ids: list[int], output_paths: list[str]) -> dict:
    """The JSON SGLang would send for `body` (one prompt, return_logprob) when the model's
    greedy output is `output_ids`, each token's logprob from the path named in output_paths."""
    global _TM
    _TM = _TM or _tokenizer_side()
    ids = body["input_ids"]
    top_n = int(body.get("top_logprobs_num", 0) or 0)
    obj = GenerateReqInput(**body)
    obj.normalize_batch_and_arguments()  # as the tokenizer manager does on arrival (top_logprobs_num None -> 0)
    with published():
        req = Req("rid", "", array("q", ids), SamplingParams(max_new_tokens=len(output_ids)),
                  return_logprob=True, top_logprobs_num=top_n)
        # the scheduler's normalisation of logprob_start_len (scheduler.py: -1 -> len(input_ids))
        start = body.get("logprob_start_len", -1)
        req.logprob_start_len = len(ids) if start in (None, -1) else start
        proc = SchedulerLogprobResultProcessor(model_config=SimpleNamespace(vocab_size=1 << 20))
        n = proc.calculate_num_input_logprobs(req, len(ids), req.logprob_start_len)
        nxt = list(ids[req.logprob_start_len + 1:]) + [0]  # logprob token ids of the prefill, padded
        positions = range(req.logprob_start_len, len(ids))
        ctx = list(ids)
        steps = []
        for j, (tok, path) in enumerate(zip(output_ids, output_paths)):
            out = LogitsProcessorOutput(next_token_logits=torch.zeros(1, 1))
            out.next_token_logprobs = [model.logprob(ctx, tok, path)]
            if top_n:
                t, lp = model.top1(ctx, path)
                out.next_token_top_logprobs_val, out.next_token_top_logprobs_idx = [[lp]], [[t]]
            if j == 0:
                out.input_token_logprobs = tuple(model.logprob(ids[:p + 1], nxt[k], "prefill")
                                                 for k, p in enumerate(positions))
                tops = [model.top1(ids[:p + 1], "prefill") for p in positions]
                out.input_top_logprobs_val = [[[lp] for _, lp in tops]]
                out.input_top_logprobs_idx = [[[t] for t, _ in tops]]
            proc.add_logprob_return_values(0, req, 0, [tok], n if j == 0 else 0, out)
            ctx.append(tok)
            steps.append(out)
        lg = req.logprob
        recv = SimpleNamespace(
            input_token_logprobs_val=[lg.input_token_logprobs_val], input_token_logprobs_idx=[lg.input_token_logprobs_idx],
            output_token_logprobs_val=[lg.output_token_logprobs_val],
            output_token_logprobs_idx=[lg.output_token_logprobs_idx],
            input_top_logprobs_val=[lg.input_top_logprobs_val] if top_n else None,
            input_top_logprobs_idx=[lg.input_top_logprobs_idx] if top_n else None, input_top_logprobs_val_flat=None,
            output_top_logprobs_val=[lg.output_top_logprobs_val] if top_n else None,
            output_top_logprobs_idx=[lg.output_top_logprobs_idx] if top_n else None,
            input_token_ids_logprobs_val=None, output_token_ids_logprobs_val=None)
    state = _TM["ReqState"](out_list=[], finished=True, event=None, obj=obj, time_stats=None)
    tm = SimpleNamespace()
    for name in TOKENIZER_SIDE[1:]:
        setattr(tm, name, MethodType(_TM[name], tm))
    meta = {"id": "rid", "finish_reason": {"type": "length", "length": len(output_ids)}, "prompt_tokens": len(ids),
            "completion_tokens": len(output_ids), "cached_tokens": 0}
    tm.convert_logprob_style(meta, state, top_n, None, False, recv, 0, True)
    # the HTTP server sends this dict as JSON (http_server.py: orjson_response(ret)); tuples become arrays
    wire = json.loads(json.dumps({"text": "", "output_ids": list(output_ids), "meta_info": meta}))
    GenerateResponse.from_json_value(wire)  # and it must satisfy SGLang's own response contract
    return wire
