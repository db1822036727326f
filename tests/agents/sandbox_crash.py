"""Test agent: dies of a real segmentation fault (a signal the kernel forces even on a
namespace's PID 1)."""

import ctypes

ctypes.string_at(0)
