import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# The suite runs without the cache across runs (fixtures are linted from the repository, whose
# root would receive a `.tpf_cache/`); the cache's own tests turn it back on in tmp dirs. Set
# here, it reaches the flake8 and tpf subprocesses the tests start too.
os.environ["TPF_NO_CACHE"] = "1"

# CI sets CI=true, under which `tpf check --baseline` never creates a missing baseline (exit 2).
# The tests of that rule set CI themselves; every other test runs as on a developer's machine,
# the same in CI and out of it.
os.environ.pop("CI", None)
