#!/usr/bin/env python3
"""Sequential reads through a Cairn mount's read-ahead see every write.

    readahead.py write PATH      writes a 48 MiB file, 1 MiB blocks of i % 251
    readahead.py same PATH       reads it sequentially while this process
                                 writes into it (buffered, then fsynced)
    readahead.py other PATH      another mount's write (then close)
    readahead.py reopened PATH   a new open sees both writes

The kernel's cached pages of the file are dropped before each pass
(POSIX_FADV_DONTNEED), so the reads reach the mount.
"""
import os
import sys

MIB = 1 << 20
mode, path = sys.argv[1], sys.argv[2]
want = bytearray(b"".join(bytes([i % 251]) * MIB for i in range(48)))
OURS = (20 * MIB + 12345, b"\xee" * MIB)
THEIRS = (30 * MIB + 7, b"\xbb" * 5000)


def put(at_bytes):
    at, data = at_bytes
    want[at : at + len(data)] = data


def read_all(fd):
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    out = bytearray()
    while True:
        b = os.read(fd, MIB)
        if not b:
            return bytes(out)
        out += b


def check(got, what):
    if got != bytes(want):
        first = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), len(got))
        sys.exit(f"{what}: {len(got)} bytes read, first wrong byte at {first}")


if mode == "write":
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(fd, want)
    os.fsync(fd)
    os.close(fd)
elif mode == "same":
    r = os.open(path, os.O_RDONLY)
    w = os.open(path, os.O_WRONLY)
    os.posix_fadvise(r, 0, 0, os.POSIX_FADV_DONTNEED)
    head = b"".join(os.read(r, MIB) for _ in range(8))
    check(head + bytes(want[8 * MIB :]), "the first 8 MiB")
    # Written while chunks past it are read ahead: laid over them.
    put(OURS)
    os.pwrite(w, OURS[1], OURS[0])
    rest = bytearray()
    while b := os.read(r, MIB):
        rest += b
    check(head + bytes(rest), "a write buffered meanwhile")
    # Sent to the OSDs: what was read ahead before is not served.
    os.fsync(w)
    os.lseek(r, 0, os.SEEK_SET)
    check(read_all(r), "a write sent meanwhile")
elif mode == "other":
    fd = os.open(path, os.O_WRONLY)
    os.pwrite(fd, THEIRS[1], THEIRS[0])
    os.close(fd)
elif mode == "reopened":
    put(OURS)
    put(THEIRS)
    check(read_all(os.open(path, os.O_RDONLY)), "another mount's write")
else:
    sys.exit(f"unknown mode {mode}")
