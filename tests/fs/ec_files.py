#!/usr/bin/env python3
"""Files on a file system whose data pool is erasure-coded: written
sequentially, then overwritten in place at random offsets, appended to,
truncated down and extended, each operation applied to a byte array too;
each file must read back as that array. Prints each file's name and
sha256. With --check, only reads the files and prints the same."""
import hashlib
import os
import random
import sys

root = sys.argv[1]
check = "--check" in sys.argv
FILES = [("seq", 9 * 1024 * 1024 + 123), ("small", 3000), ("stripes", 200_000)]


def digest(data):
    return hashlib.sha256(bytes(data)).hexdigest()


if check:
    for name, _ in FILES:
        with open(os.path.join(root, name), "rb") as f:
            print(name, digest(f.read()))
    sys.exit(0)

rng = random.Random(22)
for name, size in FILES:
    path = os.path.join(root, name)
    model = bytearray(rng.randbytes(size))
    with open(path, "wb") as f:
        for at in range(0, size, 1 << 20):
            f.write(model[at:at + (1 << 20)])
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(path, os.O_RDWR)
    try:
        for step in range(40):
            kind = rng.randrange(4)
            if kind == 0:
                at = rng.randrange(len(model) + 65536)
                data = rng.randbytes(rng.randrange(1, 65536))
                os.pwrite(fd, data, at)
                if len(model) < at + len(data):
                    model.extend(bytes(at + len(data) - len(model)))
                model[at:at + len(data)] = data
            elif kind == 1:
                data = rng.randbytes(rng.randrange(1, 20000))
                os.pwrite(fd, data, len(model))
                model.extend(data)
            elif kind == 2:
                to = rng.randrange(len(model) + 1)
                os.ftruncate(fd, to)
                del model[to:]
            else:
                to = len(model) + rng.randrange(1, 100_000)
                os.ftruncate(fd, to)
                model.extend(bytes(to - len(model)))
            if step % 10 == 9:
                os.fsync(fd)
        os.fsync(fd)
    finally:
        os.close(fd)
    with open(path, "rb") as f:
        got = f.read()
    if got != bytes(model):
        first = next((i for i, (a, b) in enumerate(zip(got, model)) if a != b), min(len(got), len(model)))
        sys.exit(f"{name}: {len(got)} bytes read, {len(model)} expected, first difference at {first}")
    print(name, digest(model))
