"""`python -m flake8_torch_preflight` is the `tpf` command."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
