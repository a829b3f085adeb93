#!/usr/bin/env python3
"""no-landlock.py COMMAND...: runs COMMAND as on a kernel without Landlock (its three system calls
fail with ENOSYS, through a seccomp filter), for pacman 7's download sandbox."""
import ctypes, os, struct, sys

def stmt(code, k):
    return struct.pack("HBBI", code, 0, 0, k)

def jump_eq(k, skip):
    return struct.pack("HBBI", 0x15, 0, skip, k)

ERRNO_ENOSYS = 0x00050000 | 38
program = stmt(0x20, 0)  # the system call's number
for number in (444, 445, 446):  # landlock_create_ruleset, _add_rule, _restrict_self
    program += jump_eq(number, 1) + stmt(0x06, ERRNO_ENOSYS)
program += stmt(0x06, 0x7FFF0000)  # allow the rest

class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

libc = ctypes.CDLL(None, use_errno=True)
fprog = Fprog(len(program) // 8, program)
if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:
    sys.exit("no-landlock.py: seccomp: " + os.strerror(ctypes.get_errno()))
os.execvp(sys.argv[1], sys.argv[1:])
