"""A worker's devices (GPUs and other generic resources): declared or detected through NVML, bound
to jobs, and their usage sampled.
"""
