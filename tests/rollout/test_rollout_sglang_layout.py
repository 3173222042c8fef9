"""The tool reads SGLang 0.5.23's logprob layout as SGLang's own code builds it (null entry 0
of the input logprobs), sends bodies SGLang's /generate contract accepts, and the emulator
answers in exactly that layout."""
import pytest

from rollout.ab import make_input_ids
from rollout.client import post_json
from rollout.emulator import start_emulator
from rollout.emulator_model import Model
from rollout.sglang_logprobs import LayoutError, decode_body, decoded, score_body, scored, warm_body


@pytest.fixture(scope="module")
def sglang():
    """SGLang's own pipeline (tests/rollout/sglang_pipeline.py) and its request contract."""
    pipeline = pytest.importorskip("sglang_pipeline")
    from sglang.srt.entrypoints.api_contract import generate_contract_error
    return pipeline, generate_contract_error


def greedy(model, prompt, n):
    out, paths, ctx = [], [], list(prompt)
    for j in range(n):
        path = "prefill" if j == 0 else "verify"
        tok, _ = model.top1(ctx, path)
        out.append(tok), paths.append(path), ctx.append(tok)
    return out, paths


def test_scoring_reads_sglangs_null_entry_0(sglang):
    pipeline, _ = sglang
    model = Model("triton")
    prompt, cont = make_input_ids(40, seed=1), make_input_ids(6, seed=2)
    answer = pipeline.generate_answer(model, score_body(prompt, cont), *greedy(model, prompt + cont, 1))
    meta = answer["meta_info"]
    # SGLang's layout, built by SGLang: entry 0 of both arrays is null
    assert meta["input_token_logprobs"][0][0] is None and meta["input_top_logprobs"][0] is None
    lps, top1 = scored(answer, prompt, cont)
    ctx = prompt + cont
    assert lps == pytest.approx([model.logprob(ctx[:len(prompt) + j], cont[j], "prefill") for j in range(6)])
    assert top1 == [model.top1(ctx[:len(prompt) + j], "prefill")[0] for j in range(6)]


@pytest.mark.parametrize("start", [0, 1, 39])
def test_entry_0_is_null_whatever_the_start(sglang, start):
    pipeline, _ = sglang
    prompt = make_input_ids(40, seed=3)
    body = {**score_body(prompt[:-1], prompt[-1:]), "logprob_start_len": start}
    meta = pipeline.generate_answer(Model("flash"), body, [1001], ["prefill"])["meta_info"]
    assert len(meta["input_token_logprobs"]) == 40 - start
    assert meta["input_token_logprobs"][0][0] is None and meta["input_top_logprobs"][0] is None
    assert all(e[0] is not None for e in meta["input_token_logprobs"][1:])


def test_decode_reader_and_layout_errors(sglang):
    pipeline, _ = sglang
    model, prompt = Model("flash"), make_input_ids(30, seed=4)
    out, paths = greedy(model, prompt, 5)
    answer = pipeline.generate_answer(model, decode_body(prompt, 5), out, paths)
    ids, lps = decoded(answer, 5)
    assert ids == out and lps[1] == pytest.approx(model.top1(prompt + out[:1], "verify")[1])
    with pytest.raises(LayoutError, match="asked for 6 tokens"):
        decoded(answer, 6)
    score = pipeline.generate_answer(model, score_body(prompt, out), out[:1], ["prefill"])
    with pytest.raises(LayoutError, match=r"input_token_logprobs\[1\] is for token"):
        scored(score, prompt, [out[1]] + out[1:])


def test_emulator_answers_in_sglangs_layout(sglang, data_dir):
    pipeline, _ = sglang
    prompt = make_input_ids(50, seed=5)
    with start_emulator("flash", data_dir=data_dir, time_scale=0.05) as emu:
        for body in (decode_body(prompt, 6), score_body(prompt, make_input_ids(5, seed=6))):
            body = {**body, "top_logprobs_num": 1}
            got = post_json(emu.url, "/generate", body)
            model = Model("flash")
            n = body["sampling_params"]["max_new_tokens"]
            want = pipeline.generate_answer(model, body, *greedy(model, body["input_ids"], n))
            for key in ("output_token_logprobs", "input_token_logprobs", "output_top_logprobs", "input_top_logprobs"):
                assert got["meta_info"][key] == want["meta_info"][key], key
            assert got["output_ids"] == want["output_ids"]
            pipeline.GenerateResponse.from_json_value(got)  # SGLang's response contract holds for the emulator


def test_request_bodies_pass_sglangs_contract(sglang):
    _, contract_error = sglang
    prompt, cont = make_input_ids(20, seed=7), make_input_ids(4, seed=8)
    bodies = [decode_body(prompt, 8), score_body(prompt, cont), warm_body(prompt),
              {"input_ids": prompt, "stream": True,
               "sampling_params": {"max_new_tokens": 32, "temperature": 0.0, "ignore_eos": True}}]
    for body in bodies:
        assert contract_error(body) is None, body
    # and the check can fail: a sampling key SGLang does not know
    assert contract_error({**bodies[0], "sampling_params": {"max_tokens": 8}}) is not None
