"""GPU probe: does stock Inductor on plain CUDA tensors still compile after `import gxusim`?
Copies any wrapper module that fails to import into $OUT for inspection."""
import os
import re
import shutil

import torch

import gxusim  # noqa: F401  (registers gxu)

torch._inductor.config.force_disable_caches = True
compiled = torch.compile(lambda x, y: (x + y).relu())
try:
    compiled(torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda"))
    print("stock cuda compile after import gxusim: ok")
except Exception as error:
    print("stock cuda compile after import gxusim: FAILED", str(error)[-300:])
    found = re.search(r"Failed to import (\S+\.py)", str(error))
    if found:
        shutil.copy(found.group(1), os.path.join(os.environ.get("OUT", "."), "failed_stock.py"))
