"""A cgroup whose sockets start with a shorter SYN timeout, as a host's own
sock_ops BPF program may set it (BPF_SOCK_OPS_TIMEOUT_INIT): the program is
assembled and attached here (bpf(2) through ctypes, no compiler), and
removed with the cgroup. A process joins through `wrapper`, the argv prefix
that moves it in before it execs (sockets belong to their creator's
cgroup)."""

import ctypes
import os
import struct

import netns

NR_BPF = 321                       # x86_64
BPF_PROG_LOAD, BPF_PROG_ATTACH = 5, 8
BPF_PROG_TYPE_SOCK_OPS = 13
BPF_CGROUP_SOCK_OPS = 3
BPF_SOCK_OPS_TIMEOUT_INIT = 1
ATTR_SIZE = 128

_libc = ctypes.CDLL(None, use_errno=True)


def _bpf(cmd, attr):
    buf = ctypes.create_string_buffer(attr.ljust(ATTR_SIZE, b"\0"), ATTR_SIZE)
    r = _libc.syscall(NR_BPF, cmd, buf, ATTR_SIZE)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, "bpf(%d): %s" % (cmd, os.strerror(e)))
    return r


def _insn(code, dst=0, src=0, off=0, imm=0):
    return struct.pack("<BBhi", code, dst | src << 4, off, imm)


def timeout_init_program(jiffies):
    """sock_ops: reply = jiffies to BPF_SOCK_OPS_TIMEOUT_INIT, else nothing."""
    return b"".join([
        _insn(0x61, dst=2, src=1, off=0),                           # r2 = ctx->op
        _insn(0x55, dst=2, off=2, imm=BPF_SOCK_OPS_TIMEOUT_INIT),   # if r2 != 1 goto out
        _insn(0xb7, dst=3, imm=jiffies),                            # r3 = jiffies
        _insn(0x63, dst=1, src=3, off=4),                           # ctx->reply = r3
        _insn(0xb7, dst=0, imm=1),                                  # out: r0 = 1
        _insn(0x95),                                                # exit
    ])


class SynTimeoutCgroup:
    """with SynTimeoutCgroup(jiffies) as cg: a cgroup named after this run
    (netns.sweep removes it if we die) with the program attached."""

    def __init__(self, jiffies):
        self.jiffies = jiffies
        self.name = "%s%d-synrto" % (netns.PREFIX, os.getpid())
        self.path = os.path.join(netns.cgroup2_mounts()[0], self.name)
        self.wrapper = netns.cgroup_join_argv(self.name)

    def __enter__(self):
        os.makedirs(self.path, exist_ok=True)
        code = timeout_init_program(self.jiffies)
        lic = ctypes.create_string_buffer(b"GPL")
        insns = ctypes.create_string_buffer(code, len(code))
        prog = -1
        try:
            prog = _bpf(BPF_PROG_LOAD, struct.pack(
                "<IIQQIIQII16s", BPF_PROG_TYPE_SOCK_OPS, len(code) // 8,
                ctypes.addressof(insns), ctypes.addressof(lic), 0, 0, 0, 0, 0, b"slot_synrto"))
            cg = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
            try:
                _bpf(BPF_PROG_ATTACH, struct.pack("<IIII", cg, prog, BPF_CGROUP_SOCK_OPS, 0))
            finally:
                os.close(cg)
        except BaseException:
            self._remove()
            raise
        finally:
            if prog >= 0:
                os.close(prog)     # the attachment holds the program
        return self

    def _remove(self):
        try:
            os.rmdir(self.path)    # detaches the program and frees it
        except OSError:
            pass

    def __exit__(self, *exc):
        self._remove()
        return False
