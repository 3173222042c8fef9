"""The canary between two real SGLang 0.5.23 servers on one GPU, driven by the rollout CLI
(`python -m kernel.sglang.real_server`, job.py); see README.md."""
