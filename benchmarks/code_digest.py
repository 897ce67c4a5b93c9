"""One digest of the code a machine runs: the Python files of the package and the tests, in
a fixed order (the GPU machine's copy of the tree keeps a stale `.git`, so its `git log` does
not say which commit its files are; compare this line with the same command's here).

    python3 benchmarks/code_digest.py
"""
import hashlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("gxusim", "compiler", "device", "tests")


def digest() -> str:
    sha = hashlib.sha1()
    for path in sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py")
                       if "__pycache__" not in p.parts):
        sha.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return sha.hexdigest()[:16]


if __name__ == "__main__":
    print(f"code digest {digest()}")
