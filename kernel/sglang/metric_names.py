"""The names of the plugin's Prometheus series and the arm values it writes: the contract
between the writer (metrics.py, inside SGLang) and its reader (`rollout/arm.py`).

No imports: the rollout tool reads these without torch or SGLang, and the plugin never
imports the rollout tool.

  mla_verify_backend_info{backend,kernel_hash,sglang_version,device}  gauge, 1 per live rank
  mla_verify_graph_captures_total{backend}   TARGET_VERIFY CUDA-graph captures
  mla_verify_kernel_calls_total              eager TARGET_VERIFY calls our kernel served
  mla_verify_fallbacks_total{reason}         calls handed back to SGLang, by reason kind
  mla_verify_extend_kernel_calls_total{mode}       EXTEND layer calls our kernel served (extend.py)
  mla_verify_extend_fallbacks_total{mode,reason}   EXTEND layer calls handed back to SGLang's kernel
  mla_verify_extend_graph_captures_total{mode}     EXTEND layer calls our kernel served inside a
                                                   CUDA-graph capture (its replays run without Python)

The EXTEND series are labelled by SGLang's forward mode: "extend" and "mixed" (the target's, and
the draft model's prefill), "draft_extend_v2" (EAGLE's draft model over the verify window after
each verify, eager or captured in SGLang's draft-extend graph), others ("split_prefill") only as a
fallback. Nothing in rollout/ reads them yet (the real-server job reads them from /metrics).
"""
INFO = "mla_verify_backend_info"
INFO_LABELS = ("backend", "kernel_hash", "sglang_version", "device")
CAPTURES = "mla_verify_graph_captures_total"
CALLS = "mla_verify_kernel_calls_total"
FALLBACKS = "mla_verify_fallbacks_total"
ARMS = ("flash", "triton")   # the `backend` label: our kernel installed, or SGLang's own path
EXTEND_CALLS = "mla_verify_extend_kernel_calls_total"
EXTEND_FALLBACKS = "mla_verify_extend_fallbacks_total"
EXTEND_CAPTURES = "mla_verify_extend_graph_captures_total"
