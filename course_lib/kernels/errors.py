"""Errors raised by the kernel tool chain (NVRTC, the CPU emulator, the CuPy loader)."""

from __future__ import annotations

from ..errors import DeviceError


class KernelError(DeviceError):
    """A CUDA kernel that cannot be built, emulated or launched as asked."""


class KernelCompileError(KernelError):
    """A compiler (NVRTC or g++) rejected a kernel; the message names file and line."""


class UnsupportedConstructError(KernelError):
    """The kernel uses a CUDA feature that the CPU emulator does not model."""


class KernelLaunchError(KernelError):
    """A launch with a bad configuration (grid, block, shared memory) or bad arguments."""


class UnsafeCacheError(KernelError, PermissionError):
    """A kernel cache directory that other users could plant libraries in."""
