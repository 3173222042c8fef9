"""The rollout CLI with the production algorithm's inventories (issue 24): a DFLASH inventory
(its block of 16; the numerics gate on logprobs, which DFLASH returns) and a DDTree one (a fork's
algorithm passed through; D = 33 tokens verified; the gate on greedy tokens, since DDTree's worker
rejects return_logprob), each driving a canary against emulators that serve that shape."""
from rollout_helpers import run_tool

EMULATE = ["--speculative-algorithm", "{speculative_algorithm}"]


def test_dflash_inventory_canary(make_fleet):
    f = make_fleet(n=2, launch={"speculative_algorithm": "DFLASH", "speculative_dflash_block_size": 16},
                   extra={g: EMULATE + ["--draft-tokens", "{speculative_dflash_block_size}"] for g in ("g0", "g1")})
    f.up()
    info = f.server_info("g1")
    assert info["speculative_algorithm"] == "DFLASH" and info["speculative_num_draft_tokens"] == 16
    assert info["speed_model"]["T"] == 16
    r = run_tool(f.inv, "canary")
    assert r.returncode == 0, r.stderr
    assert f.state()["status"] == "canary_passed" and f.arm("g0") == "flash"
    num = f.state()["groups"]["g0"]["results"]["numerics"]
    assert num["mode"] == "logprobs" and num["passed"] and num["top1_agreement"] == 1.0


def test_ddtree_inventory_canary_never_asks_for_logprobs(make_fleet):
    f = make_fleet(n=2, launch={"speculative_algorithm": "DDTREE", "speculative_args": [
        "--speculative-dflash-block-size", "16", "--speculative-ddtree-budget", "32"]},
        extra={g: EMULATE + ["--draft-tokens", "33"] for g in ("g0", "g1")})
    f.up()
    assert f.server_info("g0")["speculative_algorithm"] == "DDTREE"
    r = run_tool(f.inv, "plan")
    assert r.returncode == 0 and "no logprobs asked (mode tokens)" in r.stdout, r.stderr
    r = run_tool(f.inv, "canary")
    assert r.returncode == 0, r.stderr
    num = f.state()["groups"]["g0"]["results"]["numerics"]
    assert num["mode"] == "tokens" and num["passed"] and num["token_agreement"] == 1.0
    assert num["contexts"]["long"]["gated"]["positions"] > 0
