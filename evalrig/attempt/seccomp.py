"""The seccomp filter every sandbox's program runs under (docs/security.md, "Kernel state
outside the sandbox"): a classic BPF program, the bytes of a `struct sock_filter` array.

It denies what would reach kernel state that outlives the sandbox or escape its limits:

- `add_key`, `request_key`, `keyctl`: EPERM. A uid's user keyring lives in the kernel as long
  as the uid has keys, across attempts and runs; one attempt could leave a note for a later
  one of the same pool uid.
- `unshare` and `clone` with CLONE_NEWUSER: EPERM. In a user namespace of its own the agent
  could mount a tmpfs the disk watch never sees, and write past its disk allowance.
- `clone3`: ENOSYS, so the C library falls back to `clone` (its flags are in memory, where a
  filter cannot look).
- a system call of another ABI (i386 or x32 on x86_64, arm32 on aarch64): the process is
  killed; those tables number the calls above differently.

Built here once, for the native architecture (x86_64 and aarch64; None elsewhere: the run
then says so in its sandbox warnings). bwrap gets these bytes on a pipe (`--seccomp FD`);
evalrig-drop has them compiled in (evalrig.attempt.privdrop passes them to the compiler), so
the two sandboxes run the same program.
"""

from __future__ import annotations

import errno
import platform
import struct

# linux/filter.h, linux/bpf_common.h
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K

# linux/seccomp.h
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_KILL_PROCESS = 0x80000000

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
_NR, _ARCH, _ARG0_LOW = 0, 4, 16  # args[0]'s low half (both architectures are little-endian)

CLONE_NEWUSER = 0x10000000

# (audit arch, add_key, request_key, keyctl, unshare, clone, clone3, first foreign number)
_TABLES = {
    "x86_64": (0xC000003E, 248, 249, 250, 272, 56, 435, 0x40000000),  # x32's bit
    "aarch64": (0xC00000B7, 217, 218, 219, 97, 220, 435, None),
}


def program(machine: str | None = None) -> bytes | None:
    """The filter for `machine` (default: this one's), or None where there is no table."""
    table = _TABLES.get(machine or platform.machine())
    if table is None:
        return None
    arch, add_key, request_key, keyctl, unshare, clone, clone3, foreign = table
    # (code, jump-if-true label, jump-if-false label, k); a label names a return below.
    code: list[tuple[int, str | None, str | None, int]] = [
        (_LD_W_ABS, None, None, _ARCH),
        (_JEQ, None, "kill", arch),
        (_LD_W_ABS, None, None, _NR),
    ]
    if foreign is not None:
        code.append((_JGE, "kill", None, foreign))
    code += [
        (_JEQ, "eperm", None, add_key),
        (_JEQ, "eperm", None, request_key),
        (_JEQ, "eperm", None, keyctl),
        (_JEQ, "enosys", None, clone3),
        (_JEQ, "flags", None, unshare),
        (_JEQ, "flags", None, clone),
        (_RET, None, None, _ALLOW),
    ]
    labels = {"flags": len(code)}
    code += [
        (_LD_W_ABS, None, None, _ARG0_LOW),
        (_JSET, "eperm", None, CLONE_NEWUSER),
        (_RET, None, None, _ALLOW),
    ]
    for name, action in (("eperm", _ERRNO | errno.EPERM), ("enosys", _ERRNO | errno.ENOSYS),
                         ("kill", _KILL_PROCESS)):
        labels[name] = len(code)
        code.append((_RET, None, None, action))
    out = b""
    for at, (op, true, false, k) in enumerate(code):
        jt = labels[true] - at - 1 if true else 0
        jf = labels[false] - at - 1 if false else 0
        out += struct.pack("=HBBI", op, jt, jf, k)
    return out


def c_initializer(filter_bytes: bytes) -> str:
    """The program as a C initializer of `struct sock_filter[]` ({code, jt, jf, k}, ...)."""
    rows = [struct.unpack_from("=HBBI", filter_bytes, i) for i in range(0, len(filter_bytes), 8)]
    return ",".join(f"{{{code},{jt},{jf},{k}u}}" for code, jt, jf, k in rows)
