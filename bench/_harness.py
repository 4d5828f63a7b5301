"""Shared pieces of the benchmark scripts (run as ``python bench/<script>.py``)."""

from __future__ import annotations

import ctypes


def mallopt() -> bool:
    """Ask glibc to keep freed memory (no trimming, no mmap for big blocks); True if it
    took both settings."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return libc.mallopt(m_trim_threshold, 1 << 30) == 1 and libc.mallopt(m_mmap_threshold, 1 << 30) == 1


def load_torch(threads: int, skip: bool) -> str | None:
    """Import PyTorch with ``threads`` threads and a fixed seed; its version, or None
    when skipped or not installed."""
    if skip:
        return None
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    return torch.__version__
