"""Speed benchmarks (`python -m benchmarks`); never part of the test suite."""
