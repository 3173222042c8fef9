"""kernel/bench/same_output.py's bit comparison on the CPU: what counts as the same output."""
import torch

from kernel.bench.same_output import bits_equal


def test_equal_bytes_are_equal_nan_payloads_included():
    a = torch.tensor([1.0, float("nan"), -2.5], dtype=torch.float32)
    assert bits_equal(a, a.clone())
    o = torch.randn(3, 8, 512).to(torch.bfloat16)
    o[0, 0, 0] = float("nan")
    assert bits_equal(o, o.clone())


def test_one_ulp_a_signed_zero_a_dtype_or_a_shape_differs():
    a = torch.randn(64, dtype=torch.float32)
    b = a.clone()
    b[17] = torch.nextafter(b[17], torch.tensor(float("inf")))
    assert not bits_equal(a, b)
    assert not bits_equal(torch.tensor([0.0]), torch.tensor([-0.0]))
    assert not bits_equal(a, a.to(torch.float64))
    assert not bits_equal(a, a[:63])
    o = torch.randn(2, 4, 512).to(torch.bfloat16)
    p = o.clone()
    p.view(torch.int16)[1, 3, 511] ^= 1
    assert not bits_equal(o, p)


def test_compare_runs_production_once_a_case_and_tier_and_each_variant_at_its_tiers(monkeypatch):
    from kernel.bench import same_output
    calls = []

    def fake_outputs(lib, case, tier, ws):
        calls.append((lib, case, tier))
        o = torch.zeros(2, 1, 512, dtype=torch.bfloat16)
        if lib == "bad":
            o[0, 0, 0] = 1.0
        return o, torch.zeros(2, 1)

    monkeypatch.setattr(same_output, "outputs", fake_outputs)
    rows = same_output.compare("prod", {"ok": ("good", [8]), "off": ("bad", [8, 6])}, [("a", "A"), ("b", "B")], None)
    assert sorted(c for c in calls if c[0] == "prod") == [("prod", "A", 6), ("prod", "A", 8), ("prod", "B", 6), ("prod", "B", 8)]
    assert {(r["build"], r["case"], r["tier"], r["equal"]) for r in rows} == {
        ("ok", "a", 8, True), ("ok", "b", 8, True), ("off", "a", 8, False), ("off", "a", 6, False),
        ("off", "b", 8, False), ("off", "b", 6, False)}
