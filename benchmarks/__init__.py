"""Side-by-side timings of pytest-npu-lazy (``python -m benchmarks``); not part of the package or of CI."""
