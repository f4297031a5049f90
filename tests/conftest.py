import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# The suite runs without the cache across runs (fixtures are linted from the repository, whose
# root would receive a `.tpf_cache/`); the cache's own tests turn it back on in tmp dirs. Set
# here, it reaches the flake8 and tpf subprocesses the tests start too.
os.environ["TPF_NO_CACHE"] = "1"
