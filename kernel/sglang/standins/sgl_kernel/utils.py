"""The one sgl_kernel function the Triton backend calls when it is built."""


def is_arch_support_pdl() -> bool:
    """False: no programmatic dependent launch. SGLang passes it only to its decode kernels
    (`use_pdl`), which the TARGET_VERIFY path never launches."""
    return False
