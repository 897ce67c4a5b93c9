"""Autocast for gxu: `torch.autocast("gxu", dtype=...)` with CUDA's casting policy.

Autocast runs at the `AutocastPrivateUse1` dispatch key, which torch includes only while
autocast is enabled for gxu. Every op falls through it, except those in the tables below:
matrix-like ops run in the autocast dtype (fp16 or bf16), precision-sensitive ones in
float32, and mixed-type ops at the widest floating type of their inputs, as torch's CUDA
autocast lists them (aten/src/ATen/autocast_mode.cpp). Casts are ordinary gxu ops, so
autograd sees them and gradients flow back in each parameter's own dtype.

Internals used (checked on torch 2.11 and 2.13): the `AutocastPrivateUse1` key and
`torch._C._ExcludeDispatchKeyGuard`.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils._pytree import tree_map

_AUTOCAST_KEY = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)
_FLOATING = (torch.float16, torch.bfloat16, torch.float32)

# Op names (all overloads) by casting policy.
LOWER_PRECISION = (
    "mm", "bmm", "matmul", "linear", "addmm", "addmv", "addr", "addbmm", "baddbmm", "mv",
    "dot", "vdot", "einsum", "chain_matmul", "linalg_multi_dot", "prelu", "conv1d", "conv2d",
    "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "convolution", "_convolution", "scaled_dot_product_attention", "lstm_cell", "gru_cell",
    "rnn_tanh_cell", "rnn_relu_cell",
)
FLOAT32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow", "softplus", "layer_norm", "native_layer_norm",
    "group_norm", "frobenius_norm", "nuclear_norm", "cosine_similarity", "poisson_nll_loss",
    "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div",
    "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss",
    "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "softmax", "log_softmax", "cumsum", "cumprod", "prod", "sum", "linalg_vector_norm",
)
WIDEST = (
    "cat", "stack", "addcdiv", "addcmul", "atan2", "bilinear", "cross", "grid_sampler",
    "index_put", "scatter_add", "tensordot",
)


def _is_floating_gxu(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == "gxu" and \
        value.dtype in _FLOATING


def _cast_to(dtype: torch.dtype) -> Callable[[Any], Any]:
    return lambda value: value.to(dtype) if _is_floating_gxu(value) and value.dtype != dtype \
        else value


def _lower_precision(args: tuple, kwargs: dict) -> torch.dtype:
    return torch.get_autocast_dtype("gxu")


def _float32(args: tuple, kwargs: dict) -> torch.dtype:
    return torch.float32


def _widest(args: tuple, kwargs: dict) -> torch.dtype:
    widest = torch.float16
    for value in torch.utils._pytree.tree_leaves((args, kwargs)):
        if _is_floating_gxu(value):
            widest = torch.promote_types(widest, value.dtype)
    return widest


def _autocast_kernel(op: torch._ops.OpOverload,
                     dtype_for: Callable[[tuple, dict], torch.dtype]) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        cast = _cast_to(dtype_for(args, kwargs))
        with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_KEY):
            return op(*tree_map(cast, args), **tree_map(cast, kwargs))
    return kernel


_libraries: list[torch.library.Library] = []


def register() -> None:
    """Install the fallthrough and the casting kernels for `AutocastPrivateUse1` (once)."""
    if _libraries:
        return
    fallthrough = torch.library.Library("_", "IMPL")
    fallthrough.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    aten = torch.library.Library("aten", "IMPL")
    for names, dtype_for in ((LOWER_PRECISION, _lower_precision), (FLOAT32, _float32),
                             (WIDEST, _widest)):
        for name in names:
            packet = getattr(torch.ops.aten, name, None)
            if packet is None:
                continue  # not an aten op in this torch version
            for overload in packet.overloads():
                op = getattr(packet, overload)
                if any(a.alias_info is not None and a.alias_info.is_write
                       for a in op._schema.arguments):
                    continue  # out= and in-place variants keep their outputs' dtype
                qualified = name if overload == "default" else f"{name}.{overload}"
                aten.impl(qualified, _autocast_kernel(op, dtype_for), "AutocastPrivateUse1")
    _libraries.extend([fallthrough, aten])
