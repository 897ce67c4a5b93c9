"""Triton kernels the emulator tests and benchmark run (plain modules, importable under
TRITON_INTERPRET=1 too, so Triton's interpreter can serve as the reference)."""
