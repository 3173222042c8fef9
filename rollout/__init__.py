"""Staged rollout of the MLA verify kernel onto a live SGLang service (`python -m rollout`)."""
