"""Kernel confinement a sandboxed process applies to itself: resource limits, Landlock and a
seccomp filter. Standard library only: the sandbox's runner imports it in a bare interpreter
(``python -I -S``), and the parent imports it to probe what the kernel offers.

- Landlock (Linux >= 5.13, unprivileged): every filesystem access the kernel's ABI knows is
  handled; writes are allowed only beneath the working directory, reads and execution only
  beneath the system and Python directories. From ABI 4 every TCP bind and connect is denied;
  from ABI 6 abstract unix sockets and signals to processes outside the sandbox too.
- seccomp: ``socket()`` and ``io_uring_setup()`` fail with EACCES, so no socket of any family
  can be made, unix sockets on the filesystem (a database's) included, which neither a network
  namespace nor Landlock stop; so do ``ptrace()`` and ``process_vm_readv/writev()``, so the
  code cannot reach into the runner's supervisor (which alone writes the trusted report).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import resource
import struct

_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2

FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_TRUNCATE, FS_IOCTL_DEV = 1 << 14, 1 << 15
_FS_ACCESS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1}
"""every filesystem access right an ABI version knows (ABI 5 and later: 16 rights)"""
READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
_NET_TCP = 0b11  # bind and connect
_SCOPE_UNIX_AND_SIGNAL = 0b11

_SECCOMP_ARCH = {  # machine -> (AUDIT_ARCH_*, syscall numbers of socket, io_uring_setup, ptrace,
    # process_vm_readv and process_vm_writev)
    "x86_64": (0xC000003E, (41, 425, 101, 310, 311)),
    "aarch64": (0xC00000B7, (198, 425, 117, 270, 271)),
}


class ConfineError(OSError):
    """The kernel refused a confinement step."""


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise ConfineError(code, f"{what}: {os.strerror(code)}")
    return result


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 without Landlock."""
    if platform.system() != "Linux":
        return 0
    version = _libc().syscall(_SYS_LANDLOCK_CREATE_RULESET, None, 0, _LANDLOCK_CREATE_RULESET_VERSION)
    return max(int(version), 0)


def seccomp_supported() -> bool:
    return platform.system() == "Linux" and platform.machine() in _SECCOMP_ARCH


def restrict_paths(abi: int, writable: list[str], readable: list[str], devices: list[str]) -> None:
    """Landlock this process and its future children: all access beneath ``writable``, read and
    execute beneath ``readable``, read and write of the ``devices`` files (/dev/null); nothing
    else. Paths that do not exist are skipped."""
    fs_all = _FS_ACCESS_BY_ABI.get(abi, (1 << 16) - 1)
    attr = struct.pack("=Q", fs_all)
    if abi >= 4:
        attr += struct.pack("=Q", _NET_TCP)
    if abi >= 6:
        attr += struct.pack("=Q", _SCOPE_UNIX_AND_SIGNAL)
    libc = _libc()
    ruleset = _check(libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, attr, len(attr), 0), "landlock_create_ruleset")
    device_access = (FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV) & fs_all
    try:
        for paths, access in ((writable, fs_all), (readable, READ), (devices, device_access)):
            for path in paths:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue
                try:
                    # a directory rule may hold any right; a file rule only the rights of files
                    allowed = access if os.path.isdir(path) else access & (FS_EXECUTE | device_access)
                    rule = struct.pack("=Qi", allowed, fd)
                    _check(libc.syscall(_SYS_LANDLOCK_ADD_RULE, ruleset, _LANDLOCK_RULE_PATH_BENEATH, rule, 0),
                           f"landlock_add_rule {path}")
                finally:
                    os.close(fd)
        no_new_privileges()
        _check(libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)


def no_new_privileges() -> None:
    _check(_libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def deny_sockets() -> None:
    """A seccomp filter: socket(), io_uring_setup(), ptrace() and process_vm_readv/writev() fail
    with EACCES; a syscall of another architecture (x32, i386 on x86_64) kills the process, so
    the filter cannot be sidestepped."""
    audit_arch, denied = _SECCOMP_ARCH[platform.machine()]
    ld_abs, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06

    def op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
        return struct.pack("=HBBI", code, jt, jf, k)

    kill, allow, deny = 0x80000000, 0x7FFF0000, 0x00050000 | errno.EACCES
    program = [op(ld_abs, 4), op(jeq, audit_arch, 1, 0), op(ret, kill), op(ld_abs, 0)]
    if platform.machine() == "x86_64":  # x32 syscalls carry bit 30
        program += [op(jge, 0x40000000, 0, 1), op(ret, kill)]
    program += [op(jeq, nr, len(denied) - i, 0) for i, nr in enumerate(denied)]
    program += [op(ret, allow), op(ret, deny)]
    code = ctypes.create_string_buffer(b"".join(program))
    fprog = _SockFprog(len(program), ctypes.addressof(code))
    no_new_privileges()
    _check(_libc().prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "seccomp")


def tasks_of(uid: int) -> int:
    """Tasks (threads included: what RLIMIT_NPROC counts) whose real uid is ``uid``."""
    count = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as status:
                fields = dict(line.split(":", 1) for line in status if line.startswith(("Uid:", "Threads:")))
        except (OSError, ValueError):
            continue
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            count += int(fields.get("Threads", "1"))
    return count


def set_limits(*, cpu_s: float, memory_mb: int, file_size_mb: float, processes: int, own_user_namespace: bool) -> None:
    """Resource limits of this process and its children.

    RLIMIT_NPROC counts the processes of a user. In a user namespace of its own (Linux >= 5.14)
    the count is the namespace's: this process and its supervisor, so the limit is
    ``processes`` more than those two. Elsewhere it counts every process of the uid, so the
    limit is ``processes`` more than the uid has now. It never binds uid 0 (root is exempt).
    """
    cpu = max(1, round(cpu_s))
    _lower(resource.RLIMIT_CORE, 0)
    _lower(resource.RLIMIT_CPU, cpu, cpu + 1)
    _lower(resource.RLIMIT_AS, memory_mb << 20)
    _lower(resource.RLIMIT_FSIZE, int(file_size_mb * (1 << 20)))
    existing = 2 if own_user_namespace and _kernel_at_least(5, 14) else tasks_of(os.getuid())
    _lower(resource.RLIMIT_NPROC, existing + processes)
    _lower(resource.RLIMIT_NOFILE, 64)


def _lower(limit: int, soft: int, hard: int | None = None) -> None:
    """Set a limit, never above the hard limit the process already has (which it cannot raise)."""
    _, current = resource.getrlimit(limit)
    hard = soft if hard is None else hard
    if current != resource.RLIM_INFINITY:
        soft, hard = min(soft, current), min(hard, current)
    resource.setrlimit(limit, (soft, hard))


def _kernel_at_least(major: int, minor: int) -> bool:
    try:
        found = tuple(int(part) for part in platform.release().split("-")[0].split(".")[:2])
    except ValueError:
        return False
    return found >= (major, minor)
