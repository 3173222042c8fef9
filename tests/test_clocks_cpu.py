"""kernel/bench/clocks.py on the CPU: nvidia-smi's CSV read back within the replay's window,
the summary of the samples, the mode bits against the kernel's, and argument errors."""
import re
from datetime import datetime
from pathlib import Path

from kernel.bench import clocks

CSRC = Path(__file__).resolve().parents[1] / "kernel" / "csrc"


def _line(t: float, mhz: str, w: str, reasons: str | None = "0x0000000000000000") -> str:
    stamp = datetime.fromtimestamp(t).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
    return ", ".join([stamp, mhz, w] + ([reasons] if reasons is not None else []))


def test_samples_outside_the_window_and_unreadable_lines_are_dropped():
    t0 = 1_800_000_000.0
    lines = [_line(t0 - 0.5, "1980", "300.1"), _line(t0 + 0.1, "1755", "690.5", "0x0000000000000004"),
             "[N/A], [N/A], [N/A]", _line(t0 + 0.2, "1830", "650.0"), _line(t0 + 2.0, "1980", "200.0")]
    got = clocks.parse_samples(lines, t0, t0 + 1.0)
    assert [s["mhz"] for s in got] == [1755.0, 1830.0]
    s = clocks.summarise(got)
    assert s["n_samples"] == 2 and s["mhz_min"] == 1755.0 and s["mhz_max"] == 1830.0
    assert s["mhz_median"] == (1755.0 + 1830.0) / 2 and s["power_w"] == (690.5 + 650.0) / 2
    assert s["reasons"] == ["0x0000000000000000", "0x0000000000000004"]


def test_samples_without_the_reasons_field_still_count():
    t0 = 1_800_000_000.0
    got = clocks.parse_samples([_line(t0 + 0.1, "1700", "500", None)], t0, t0 + 1)
    assert clocks.summarise(got)["reasons"] == [] and got[0]["mhz"] == 1700.0


def test_no_samples_gives_nones_not_a_crash():
    s = clocks.summarise([])
    assert s["n_samples"] == 0 and s["mhz_median"] is None and s["power_w"] is None


def test_noise_mode_bit_is_the_kernels():
    src = (CSRC / "verify_common.cuh").read_text()
    assert int(re.search(r"MODE_NOISE_RING = (\d+)", src).group(1)) == clocks.MODE_NOISE_RING
    # and no other mode bit has that value
    bits = [int(b) for b in re.findall(r"MODE_\w+ = (\d+)", src)]
    assert bits.count(clocks.MODE_NOISE_RING) == 1
    assert clocks.MODES["no_loads_noise"] & clocks.MODE_NOISE_RING


def test_a_duration_inside_the_ramp_is_named(capsys):
    assert clocks.main(["--out", "/tmp/x", "--dur", "0.2"]) == 2
    assert "--dur" in capsys.readouterr().err
