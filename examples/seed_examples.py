"""The seed's worked examples on gxu: (x + y).relu(), tanh-GELU, transpose, row sum.

Prints each generated kernel (Inductor's body inside the GXU tile loop) and the launch
decisions, then checks the result against eager. Runs on the GPU when present, else on
the emulator:  python examples/seed_examples.py
"""
import math

import torch

import gxusim

torch._inductor.config.force_disable_caches = True  # show every kernel being generated

EXAMPLES = {
    "add_relu": (lambda x, y: (x + y).relu(), lambda: (torch.randn(1 << 20), torch.randn(1 << 20))),
    "tanh_gelu": (lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
                  lambda: (torch.randn(1 << 20),)),
    "transpose": (lambda x: x.t().contiguous(), lambda: (torch.randn(512, 384),)),
    "row_sum": (lambda x: x.sum(dim=1), lambda: (torch.randn(256, 3000),)),
}

for name, (fn, make_inputs) in EXAMPLES.items():
    inputs = make_inputs()
    gxusim.clear_launches()
    out = torch.compile(fn)(*(t.to("gxu") for t in inputs))
    code = gxusim.last_generated_code()
    kernel = code[code.index("@triton.jit"):code.index("''', device_str")]
    print(f"==== {name}\n{kernel}")
    for launch in gxusim.launches():
        print(launch.describe())
    torch.testing.assert_close(out.cpu(), fn(*inputs), atol=1e-4, rtol=1e-4)
    print("matches eager\n")
