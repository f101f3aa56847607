"""``python3 -m tilefmha``: prints the environment (GPUs, driver, NVRTC, kernel cache)."""

from ._environment import report

print(report())
