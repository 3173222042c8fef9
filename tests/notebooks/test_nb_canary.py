"""03_canary_ab in smoke mode against the real rollout tool: two local emulators, labelled."""
from __future__ import annotations



from notebooks import index


SMOKE = ("-p", "smoke", "true", "-p", "context_tokens", "16384", "-p", "rounds", "5",
         "-p", "max_new_tokens", "4", "-p", "time_scale", "0.01")


def test_canary_ab_smoke_on_emulators(tmp_path, fixture_dir, cli):
    rc = cli(tmp_path, "phase3", *SMOKE, "-p", "data_dir", str(fixture_dir))
    assert rc == 0
    page = (tmp_path / "reports" / "03_canary_ab.html").read_text()
    assert "EMULATED A/B: not a live service" in page and "Gate decision:" in page
    assert "[ab] round" not in page, "console progress leaked into the report"
    rec = index.read_record(tmp_path / "reports" / "03_canary_ab.html")
    assert rec["emulated"] is True and len(rec["endpoints"]) == 2
