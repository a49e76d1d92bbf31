"""int8 Linear layers whose answers do not depend on the batch: per-token activations, per-channel weights.

PyTorch's dynamic quantization scales a Linear's activations once per tensor, so a row's result
depends on the rows computed with it. Here each token (row of the flattened input) gets its own
scale and each output channel of the weight its own; the int8 product is accumulated exactly in
int32 (``torch._int_mm``), then rescaled element by element. A row's answer is the same alone or in
any batch, and the matrix products run about three times faster than fp32 on a CPU.

Used by the speech template (``--quantize int8``, parameter ``tritonhf.quantize``) and by the gate
at ``gallery add``, so the gate measures what is served.
"""

from __future__ import annotations

from typing import Any

PARAM_QUANTIZE = "tritonhf.quantize"


def int8_linear_layers(model: Any) -> Any:
    """``model`` with every ``torch.nn.Linear`` replaced by its per-token int8 form (in place; returned)."""
    import torch

    for name, child in list(model.named_children()):
        if isinstance(child, torch.nn.Linear):
            setattr(model, name, _int8_linear(child))
        else:
            int8_linear_layers(child)
    return model


def _int8_linear(linear: Any) -> Any:
    import torch

    class Int8Linear(torch.nn.Module):
        """y = (q(x) @ q(W)^T) * scale(x) * scale(W) + b, with q(x) per row and q(W) per output channel."""

        qweight: torch.Tensor  # [in, out] int8 (buffers: they follow .to())
        scale: torch.Tensor  # [out] float32

        def __init__(self) -> None:
            super().__init__()
            weight = linear.weight.detach().float()
            scale = weight.abs().amax(dim=1).clamp(min=1e-12) / 127.0
            self.register_buffer("qweight", torch.round(weight / scale[:, None]).to(torch.int8).t().contiguous())
            self.register_buffer("scale", scale)
            self.bias = linear.bias
            self.out_features = linear.out_features

        def forward(self, x: Any) -> Any:
            flat = x.reshape(-1, x.shape[-1])
            rows = flat.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127.0
            product = torch._int_mm(torch.round(flat / rows).to(torch.int8), self.qweight)
            found = product.to(torch.float32).mul_(rows).mul_(self.scale)
            if self.bias is not None:
                found.add_(self.bias)
            return found.reshape(*x.shape[:-1], self.out_features).to(x.dtype)

    return Int8Linear()
