"""torch's device-backend autoloading for gxu, opt-in: with `GXUSIM_AUTOLOAD=1`, `import
torch` imports gxusim, so `torch.gxu` is there as `torch.cuda` is, also in processes a
program spawns (multiprocessing, DataLoader workers) that unpickle gxu tensors.

Opt-in because registering gxu makes it torch's accelerator in that process, which breaks
autograd on plain CUDA tensors (README, known limitations): an installed package must not
do that to every torch program. A module of its own, outside the gxusim package, because
torch imports the entry point's module (`torch.backends` entry points, pyproject.toml)
whether or not the variable is set, and importing any part of gxusim registers gxu.
"""
import os


def load() -> None:
    """Called by `import torch` (when TORCH_DEVICE_BACKEND_AUTOLOAD is not "0")."""
    if os.environ.get("GXUSIM_AUTOLOAD", "0") == "1":
        import gxusim  # noqa: F401  (registers gxu)
