"""The real-server job's `<root>/bin/sglang` (kernel/sglang/real_server/environment.py) runs what
SGLang's `sglang` console script runs, `sglang.cli.main.main()`: the default launch template starts
`sglang serve`, and `python -m sglang.cli.main serve` would only import that module (it has no
`__main__` guard in 0.5.23) and exit 0 without serving. The emulated job reads the same form."""
import subprocess
import sys
from pathlib import Path

from kernel.sglang.real_server import emulated_server
from kernel.sglang.real_server.environment import SERVE_CODE


def test_python_m_sglang_cli_main_would_not_serve():
    import sglang.cli.main as cli
    assert "__main__" not in Path(cli.__file__).read_text()   # why the wrapper calls main() itself


def test_the_wrapper_code_calls_the_console_scripts_main(tmp_path):
    pkg = tmp_path / "sglang" / "cli"
    pkg.mkdir(parents=True)
    (tmp_path / "sglang" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "main.py").write_text("import sys\ndef main():\n    print('MAIN', sys.argv)\n")
    r = subprocess.run([sys.executable, "-c", SERVE_CODE, "serve", "--model-type", "llm", "--port", "1"],
                       capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)}, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "MAIN ['sglang', 'serve', '--model-type', 'llm', '--port', '1']"


def test_the_emulated_job_reads_sglang_serve_through_the_wrapper():
    out = emulated_server.emulator_argv(["-c", SERVE_CODE, "serve", "--model-type", "llm", "--port", "4321",
                                         "--model-path", "/m"], {"MLA_VERIFY_BACKEND": "flash"})
    assert out[out.index("--port") + 1] == "4321" and out[out.index("--arm") + 1] == "flash"
    assert out[out.index("--model-path") + 1] == "/m"
