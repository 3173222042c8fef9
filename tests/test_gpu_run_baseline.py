"""kernel.gpu_run stops before measuring when SGLang's kernels are missing and a stage would record
them beside ours (a bench file without them breaks the reports' comparison), unless --no-baseline."""
from kernel.gpu_run import BASELINE_STAGES, STAGES, baseline_missing

E = ImportError("sglang is not installed")


def test_a_comparing_stage_without_sglang_is_an_error_naming_stage_and_fix():
    msg = baseline_missing({"bench", "trace"}, E, allowed=False)
    assert msg and msg.startswith("error: stage(s) bench compare")
    assert "sglang is not installed" in msg and "--no-baseline" in msg and "make sglang-bundle" in msg
    assert "extend-bench" in baseline_missing({"extend-bench", "validate"}, E, allowed=False)


def test_no_baseline_or_no_comparing_stage_goes_on():
    assert baseline_missing({"bench", "validate"}, E, allowed=True) is None
    assert baseline_missing({"trace", "fixed", "mma", "full", "parts", "stream"}, E, allowed=False) is None


def test_every_comparing_stage_is_a_known_stage():
    assert set(BASELINE_STAGES) <= set(STAGES)
