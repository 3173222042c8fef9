"""Names a reviewer reads: what each implementation in the figures is, and readable column
names for every table (figures.table refuses a snake_case header that is not listed here).
"""
from __future__ import annotations

# impl key in the bench JSON -> (label in figures and tables, what it is, said once per page)
IMPLS = {
    "flash": ("ours (split-KV verify kernel)",
              "this repository's kernel (`kernel/csrc/`): the prefix is split across thread "
              "blocks, each KV row is read once for all H x T query rows of a request, and the "
              "partial results are merged by their log-sum-exp."),
    "sglang_extend": ("SGLang extend_attention_fwd (CUDA today)",
                      "SGLang 0.5.23's Triton `extend_attention_fwd`: what its Triton attention "
                      "backend runs for TARGET_VERIFY on CUDA servers today, so the path a live "
                      "service would replace (the control arm of the canary)."),
    "sglang_verify_mla": ("SGLang verify_shared_kv_fwd (split-KV, AMD only)",
                          "SGLang's split-KV grouped-head verify kernel `verify_shared_kv_fwd` "
                          "(module `verify_mla`). SGLang's server calls it only on AMD GPUs and "
                          "only for chain-shaped draft trees, so **CUDA servers never run it**: "
                          "it shows what split-KV alone achieves, not what a CUDA service runs."),
    "torch_naive": ("naive PyTorch",
                    "scores materialised in PyTorch, softmax, matmul; skipped where its score "
                    "matrix would not fit in about 4 GB."),
}
IMPL_LABELS = {k: v[0] for k, v in IMPLS.items()}

# Every snake_case column a report table shows, renamed.
COLUMNS = {
    "worst_rel_err": "worst relative error", "worst_lse_rel_err": "worst LSE relative error",
    "nan_outputs": "outputs with NaN", "unwritten_rows": "unwritten output rows",
    "all_pass": "all pass", "tree": "draft tree", "layout": "cache layout", "cases": "cases",
    "page_size": "page size", "prefix_lens": "prefix lengths", "id": "case",
    "rel_err": "ours vs oracle (relative error)",
    "sglang_rel_err": "SGLang vs oracle (relative error)",
    "rel_err_vs_sglang": "ours vs SGLang (relative error)",
    "triton_us": "control, us per layer", "plugin_us": "candidate, us per layer",
    "triton_ms_per_step": "control, ms per step", "plugin_ms_per_step": "candidate, ms per step",
    "speedup": "speed-up", "rel_err_plugin_vs_triton": "candidate vs control (relative error)",
    "graph_replay_matches_eager": "CUDA-graph replay matches eager",
}
NA_NOTE = ("n/a: that implementation did not run at this shape in the benchmark (SGLang's "
           "split-KV verify refuses some shapes and handles chain trees only; naive PyTorch is "
           "skipped where its scores would not fit in memory).")


def impl_glossary(impls) -> str:
    """Markdown list explaining each implementation that a page shows, in IMPLS order."""
    shown = [k for k in IMPLS if k in set(impls)]
    return "\n".join(f"- **{IMPLS[k][0]}**: {IMPLS[k][1]}" for k in shown)
