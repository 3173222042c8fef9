"""Stand-ins for ssh, systemctl and an orchestrator CLI, written into a tmp bin/ on PATH.

ssh behaves as the real one does with a command: it joins its command words with spaces and
hands the result to a shell (`sh -c`) on the "remote" side, here the same machine; that is
exactly the re-splitting that breaks nested quoting. systemctl keeps unit states in files and
answers is-active from them. Every call is appended to calls.jsonl as its argv.
"""
from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

LOG_PREFIX = "import json, os, sys\nopen(os.environ['FAKE_CALLS'], 'a').write(json.dumps(" \
             "[os.path.basename(sys.argv[0])] + sys.argv[1:] + [os.environ.get('MLA_VERIFY_BACKEND')]) + '\\n')\n"

SSH = LOG_PREFIX + """import subprocess
args, i = sys.argv[1:], 0
while args[i].startswith('-'):
    i += 2 if args[i] in ('-o', '-p', '-i', '-l', '-F') else 1
sys.exit(subprocess.run(['sh', '-c', ' '.join(args[i + 1:])]).returncode)
"""

SYSTEMCTL = LOG_PREFIX + """from pathlib import Path
if os.environ.get('FAKE_RC'):
    sys.exit(int(os.environ['FAKE_RC']))
state = Path(os.environ['FAKE_SYSTEMD'])
state.mkdir(exist_ok=True)
args = [a for a in sys.argv[1:] if a not in ('--user', '--quiet', '--no-block') and not a.startswith('--kill-who')
        and not a.startswith('--signal')]
verb, unit = args[0], args[-1]
f = state / unit.replace('/', '_')
if verb == 'start':
    f.write_text('active')
elif verb in ('stop', 'kill'):
    f.unlink(missing_ok=True)
elif verb == 'is-active':
    sys.exit(0 if f.exists() else 3)
"""

ORCH = LOG_PREFIX + "sys.exit(int(os.environ.get('FAKE_RC', '0')))\n"


def install(tmp_path: Path, monkeypatch) -> callable:
    """Puts ssh, systemctl and orch on PATH; returns a function listing the calls made so far."""
    log, bindir = tmp_path / "calls.jsonl", tmp_path / "bin"
    bindir.mkdir()
    for name, body in (("ssh", SSH), ("systemctl", SYSTEMCTL), ("orch", ORCH)):
        p = bindir / name
        p.write_text(f"#!{sys.executable}\n{body}")
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_CALLS", str(log))
    monkeypatch.setenv("FAKE_SYSTEMD", str(tmp_path / "systemd"))
    return lambda: [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
