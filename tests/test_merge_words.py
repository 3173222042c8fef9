"""The merge as landed (kernel/csrc/combine.cuh, -DMLAV_MERGE_AS_LANDED) is opt-in until a device
measures it: the production library's machine code stores no ready word, polls none and counts no
reader, on sm_90 and sm_120; and the words the variant uses sit where Workspace.merge_words looks."""
import subprocess

import pytest

from kernel import build
from kernel.bench import probe_sass


@pytest.fixture(scope="module")
def functions():
    lib = build.build(build.ARCHS) / build.LIB     # the suite's one build (cached by source hash)
    tool = probe_sass.find_cuobjdump()
    return {a: probe_sass.parse(subprocess.run([tool, "-sass", "-arch", f"sm_{a}", str(lib)], check=True,
                                               capture_output=True, text=True).stdout) for a in ("90", "120")}


def test_production_stores_polls_and_counts_no_merge_word(functions):
    for arch, fs in functions.items():
        verify = {n: ins for n, ins in fs.items() if "mla_verify_kernel" in n}
        merge = {n: ins for n, ins in fs.items() if "mla_verify_combine" in n}
        assert len(verify) >= 30 and len(merge) >= 10, (arch, len(verify), len(merge))
        # the ready word's release store; the merge's relaxed polls, its sleep between them, its count
        assert not [n for n, ins in verify.items() if any(i.op.startswith("STG") and "STRONG.GPU" in i.op for i in ins)]
        assert not [n for n, ins in merge.items()
                    if any(i.op.startswith(("NANOSLEEP", "ATOMG")) or (i.op.startswith("LDG") and "STRONG.GPU" in i.op)
                           for i in ins)]


def test_the_words_are_the_workspaces_last_bytes():
    lib = build.load()
    for sms in (132, 188):
        n = lib.mla_verify_merge_words(sms)
        assert n == 2 * 4 * sms   # ready words and row-tile counts, one each per partial slot (CAP_MULT x SMs)
        # the partials' area (CAP_MULT x SMs slots of 64 rows: log2-LSE and 512 bf16 a row) and the
        # table (256-byte aligned) come first
        table = (64 * 4 * 4 + 255) // 256 * 256
        assert lib.mla_verify_workspace_bytes(sms, 64) == table + 4 * sms * 64 * (4 + 512 * 2) + 4 * n
