"""Stand-in for FlashInfer holding only `flashinfer.sampling`'s two renormalizations, in torch.

SGLang 0.5.23 resolves `top_k_renorm_prob` / `top_p_renorm_prob` lazily from
`flashinfer.sampling` on every CUDA machine (sglang/kernels/ops/sampling/renorm.py), and the
DFLASH worker calls them at startup (DFlashWorkerV2.prewarm_sampling rehearses a non-greedy
verify), so a GPU image without FlashInfer cannot start a DFLASH server. Nothing else is here:
`from flashinfer import X` still fails as it does without FlashInfer, and the real-server
environment sets SGLANG_IS_FLASHINFER_AVAILABLE=false so SGLang's find_spec check never takes
this package for FlashInfer (its backends and samplers stay off, as on the image). The server
bundle adds FlashInfer's own headers under data/include (server_bundle.FLASHINFER_WHEEL): the same
startup JIT-compiles SGLang's tree_speculative_sampling_target_only, which includes them.
"""
