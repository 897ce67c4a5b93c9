"""Fused recurrent cells on gxu: the kernels torch's LSTM and GRU ask a GPU-like device for.

For a PrivateUse1 input, torch's RNN code takes the GPU path and calls
`_thnn_fused_lstm_cell` / `_thnn_fused_gru_cell` (and their backward ops), which only CUDA
implements. On the cuda target they run there (the fallback); on the emulator target each
is written here with aten ops, with CUDA's results and workspace layouts, so `nn.LSTM` and
`nn.GRU` run and train on gxu as on CUDA.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from gxusim import target

from . import ops

Tensor = torch.Tensor


def _gates(input_gates: Tensor, hidden_gates: Tensor, input_bias: Optional[Tensor],
           hidden_bias: Optional[Tensor]) -> Tensor:
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias + hidden_bias
    return gates


def lstm_cell(input_gates: Tensor, hidden_gates: Tensor, cx: Tensor,
              input_bias: Optional[Tensor] = None, hidden_bias: Optional[Tensor] = None
              ) -> tuple[Tensor, Tensor, Tensor]:
    """(hy, cy, workspace): the workspace holds the activated gates [i, f, g, o]."""
    i, f, g, o = _gates(input_gates, hidden_gates, input_bias, hidden_bias).chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    return o * cy.tanh(), cy, torch.cat((i, f, g, o), 1)


def lstm_cell_backward(grad_hy: Optional[Tensor], grad_cy: Optional[Tensor], cx: Tensor,
                       cy: Tensor, workspace: Tensor, has_bias: bool
                       ) -> tuple[Tensor, Tensor, Optional[Tensor]]:
    """(grad_gates, grad_cx, grad_bias) from the forward's workspace."""
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    grad_hy = torch.zeros_like(cy) if grad_hy is None else grad_hy
    grad_c = grad_hy * o * (1 - tanh_cy * tanh_cy)
    if grad_cy is not None:
        grad_c = grad_c + grad_cy
    grad_gates = torch.cat((grad_c * g * i * (1 - i), grad_c * cx * f * (1 - f),
                            grad_c * i * (1 - g * g), grad_hy * tanh_cy * o * (1 - o)), 1)
    return grad_gates, grad_c * f, grad_gates.sum(0) if has_bias else None


def gru_cell(input_gates: Tensor, hidden_gates: Tensor, hx: Tensor,
             input_bias: Optional[Tensor] = None, hidden_bias: Optional[Tensor] = None
             ) -> tuple[Tensor, Tensor]:
    """(hy, workspace): the workspace holds [r, z, n, hx, the hidden part of n]."""
    if input_bias is not None:
        input_gates, hidden_gates = input_gates + input_bias, hidden_gates + hidden_bias
    input_r, input_z, input_n = input_gates.chunk(3, 1)
    hidden_r, hidden_z, hidden_n = hidden_gates.chunk(3, 1)
    r, z = (input_r + hidden_r).sigmoid(), (input_z + hidden_z).sigmoid()
    n = (input_n + r * hidden_n).tanh()
    return n + z * (hx - n), torch.cat((r, z, n, hx, hidden_n), 1)


def gru_cell_backward(grad_hy: Tensor, workspace: Tensor, has_bias: bool
                      ) -> tuple[Tensor, Tensor, Tensor, Optional[Tensor], Optional[Tensor]]:
    """(grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias)."""
    r, z, n, hx, hidden_n = workspace.chunk(5, 1)
    grad_n = grad_hy * (1 - z) * (1 - n * n)
    grad_r = grad_n * hidden_n * r * (1 - r)
    grad_z = grad_hy * (hx - n) * z * (1 - z)
    grad_input = torch.cat((grad_r, grad_z, grad_n), 1)
    grad_hidden = torch.cat((grad_r, grad_z, grad_n * r), 1)
    biases = (grad_input.sum(0), grad_hidden.sum(0)) if has_bias else (None, None)
    return grad_input, grad_hidden, grad_hy * z, *biases


KERNELS: dict[str, Callable[..., Any]] = {
    "_thnn_fused_lstm_cell": lstm_cell,
    "_thnn_fused_lstm_cell_backward_impl": lstm_cell_backward,
    "_thnn_fused_gru_cell": gru_cell,
    "_thnn_fused_gru_cell_backward": gru_cell_backward,
}


def _kernel(name: str, composed: Callable[..., Any]) -> Callable[..., Any]:
    on_backing = ops.fallback_for(f"aten::{name}")

    def kernel(*args: Any, **kwargs: Any) -> Any:
        run = on_backing if target.backing_device().type == "cuda" else composed
        return run(*args, **kwargs)
    return kernel


_libraries: list[torch.library.Library] = []


def register() -> None:
    """Register the cells as gxu kernels (once)."""
    if _libraries:
        return
    library = torch.library.Library("aten", "IMPL")
    for name, composed in KERNELS.items():
        library.impl(name, _kernel(name, composed), "PrivateUse1")
    _libraries.append(library)
