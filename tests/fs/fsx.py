#!/usr/bin/env python3
"""fsx-style random operation tester for Cairn's file system, by comparison with a reference.

A seeded RNG generates a sequence of operations on a few files (f0..fN-1):
writes at random offsets and lengths with random bytes (unaligned, page
aligned, near EOF, and straddling every --boundary multiple, 4 MiB by
default), reads of random ranges (also past EOF), truncates up and down (by
fd and by path), fallocate (posix_fallocate, mode 0, KEEP_SIZE), punch hole,
writes past EOF that leave holes, mmap reads and mmap writes (MAP_SHARED +
msync), O_APPEND writes, rename between the files, link and unlink (open fds
keep working on unlinked files), fsync, fdatasync, open/close/reopen, stat.
Each operation is applied to the same relative path in a scratch directory
under REFDIR (a local file system, the truth) and under TARGETDIR (the file
system under test), and the outcomes are compared operation by operation:
bytes read, bytes written, sizes, nlink, errno names.  On the first mismatch
it prints the seed, the operation's index, the operation, both outcomes and
the last 20 operations, keeps the scratch directories, and exits 1.  At the
end every file (and every still-open, possibly unlinked, file) is read back
whole on both sides and compared.

Offsets: operations start below --max-size; a write may run up to --max-op
bytes past it, so files stay below max-size + max-op (4.25 MiB by default)
and writes do cross the 4 MiB boundary.  The sequence depends only on the
seed and the options (sizes steering it are read from the reference), so a
failing run is replayed with the same --seed (add -v to print every op, or
--ops to stop right after the failure).

    python3 tests/fs/fsx.py --reference /var/tmp/fsref --target /mnt/cairn --ops 5000 --seed 1
    python3 tests/fs/fsx.py ... --seed 7 --files 2 --max-size 16777216 --skip punch,mapwrite
    python3 tests/fs/fsx.py --list-ops

Exit status: 0 all equal, 1 a mismatch, 2 a usage or setup error.
Standard library only (plus ctypes); Linux.
"""

import argparse
import collections
import ctypes
import errno
import mmap
import os
import pickle
import random
import shutil
import signal
import sys
import tempfile
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
libc.fallocate.restype = ctypes.c_int
FALLOC_FL_KEEP_SIZE = 1
FALLOC_FL_PUNCH_HOLE = 2
PAGE = mmap.ALLOCATIONGRANULARITY
KiB, MiB = 1024, 1024 * 1024


def fallocate(fd, mode, off, length):
    if libc.fallocate(fd, mode, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def en(e):
    return "E:" + errno.errorcode.get(e.errno, str(e.errno))


# --------------------------------------------------------------------------
# operations: each takes a Tree and the op's parameters, returns a tuple

class Tree:
    def __init__(self, root):
        self.root = root
        self.fds = {}               # handle id -> fd

    def p(self, name):
        return os.path.join(self.root, name)


def fsize(fd):
    return os.fstat(fd).st_size


def x_open(t, h, name, creat):
    fd = os.open(t.p(name), os.O_RDWR | (os.O_CREAT if creat else 0), 0o644)
    t.fds[h] = fd
    st = os.fstat(fd)
    return ("opened", st.st_size, st.st_nlink)


def x_close(t, h):
    os.close(t.fds.pop(h))
    return ("closed",)


def x_write(t, h, off, data):
    fd = t.fds[h]
    return (os.pwrite(fd, data, off), fsize(fd))


def x_read(t, h, off, n):
    return (os.pread(t.fds[h], n, off),)


def x_truncate(t, h, size):
    fd = t.fds[h]
    os.ftruncate(fd, size)
    return (fsize(fd),)


def x_truncate_path(t, name, size):
    os.truncate(t.p(name), size)
    st = os.stat(t.p(name))
    return (st.st_size,)


def x_fallocate(t, h, how, off, n):
    fd = t.fds[h]
    if how == "posix":
        os.posix_fallocate(fd, off, n)
    else:
        fallocate(fd, {"mode0": 0, "keep_size": FALLOC_FL_KEEP_SIZE,
                       "punch": FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE}[how], off, n)
    return (fsize(fd),)


def x_mapread(t, h, off, n):
    fd = t.fds[h]
    size = fsize(fd)
    if off >= size:
        return ("past-eof", size)
    end = min(off + n, size)
    start = off - off % PAGE
    with mmap.mmap(fd, end - start, offset=start, access=mmap.ACCESS_READ) as m:
        return (m[off - start:end - start],)


def x_mapwrite(t, h, off, data):
    fd = t.fds[h]
    end = off + len(data)
    if end > fsize(fd):
        os.ftruncate(fd, end)
    start = off - off % PAGE
    with mmap.mmap(fd, end - start, offset=start) as m:
        m[off - start:end - start] = data
        m.flush()
    return (fsize(fd),)


def x_append(t, name, data):
    fd = os.open(t.p(name), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.lseek(fd, 0, os.SEEK_SET)            # must not matter
        n = os.write(fd, data)
        return (n, fsize(fd), os.lseek(fd, 0, os.SEEK_CUR))
    finally:
        os.close(fd)


def x_rename(t, a, b):
    os.rename(t.p(a), t.p(b))
    return ("renamed",)


def x_link(t, a, b):
    os.link(t.p(a), t.p(b))
    return (os.stat(t.p(b)).st_nlink,)


def x_unlink(t, name):
    os.unlink(t.p(name))
    return ("unlinked",)


def x_fsync(t, h, data_only):
    (os.fdatasync if data_only else os.fsync)(t.fds[h])
    return ("synced",)


def x_stat(t, name):
    st = os.stat(t.p(name))
    return (oct(st.st_mode), st.st_size, st.st_nlink)


def x_fstat(t, h):
    st = os.fstat(t.fds[h])
    return (oct(st.st_mode), st.st_size, st.st_nlink)


def x_readall(t, name):
    with open(t.p(name), "rb") as f:
        return (f.read(),)


EXEC = {"open": x_open, "close": x_close, "write": x_write, "holewrite": x_write, "read": x_read,
        "truncate": x_truncate, "truncate_path": x_truncate_path, "fallocate": x_fallocate,
        "punch": x_fallocate, "mapread": x_mapread, "mapwrite": x_mapwrite, "append": x_append,
        "rename": x_rename, "link": x_link, "unlink": x_unlink, "fsync": x_fsync, "fdatasync": x_fsync,
        "stat": x_stat, "fstat": x_fstat, "readall": x_readall, "reopen": None}

WEIGHTS = {"write": 18, "read": 14, "mapread": 5, "mapwrite": 4, "truncate": 5, "truncate_path": 2,
           "fallocate": 3, "punch": 2, "holewrite": 4, "append": 4, "rename": 2, "link": 2, "unlink": 2,
           "fsync": 1, "fdatasync": 1, "reopen": 4, "open": 2, "close": 2, "stat": 3, "fstat": 2,
           "readall": 1}


def run(t, op):
    """Apply op to tree t: its outcome tuple, or ('E:ERRNO',)."""
    try:
        return EXEC[op.kind](t, *op.args)
    except OSError as e:
        return (en(e),)
    except (ValueError, OverflowError) as e:     # e.g. mmap refusing a length
        return ("%s: %s" % (type(e).__name__, e),)


def run_in_child(t, op):
    """run() in a forked child (it shares t's fds), so that a SIGBUS from a
    mapping of the file under test becomes an outcome instead of killing fsx."""
    sys.stdout.flush()
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(rfd)
            data = pickle.dumps(run(t, op))
            with os.fdopen(wfd, "wb") as f:
                f.write(data)
        finally:
            os._exit(0)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if data:
        return pickle.loads(data)
    if os.WIFSIGNALED(status):
        return ("killed by %s" % signal.Signals(os.WTERMSIG(status)).name,)
    return ("child died, status %d" % status,)


# --------------------------------------------------------------------------
# generator

class Op:
    def __init__(self, kind, args, desc):
        self.kind, self.args, self.desc = kind, args, desc

    def __str__(self):
        return "%-13s %s" % (self.kind, self.desc)


class Fsx:
    def __init__(self, a, ref, tgt):
        self.a = a
        self.rng = random.Random(a.seed)
        self.ref, self.tgt = Tree(ref), Tree(tgt)
        self.names = ["f%d" % i for i in range(a.files)]
        self.handles = {}            # handle id -> name it was opened by
        self.next_h = 0
        self.kinds = [k for k in WEIGHTS if k not in a.skip]
        self.weights = [WEIGHTS[k] for k in self.kinds]
        self.cap = a.max_size + a.max_op
        self.history = collections.deque(maxlen=20)
        self.counts = collections.Counter()

    # --- helpers reading the reference's state to steer the generator
    def hsize(self, h):
        return fsize(self.ref.fds[h])

    def exists(self, name):
        return os.path.exists(self.ref.p(name))

    def length(self):
        r, m = self.rng.random(), self.a.max_op
        if r < 0.35:
            return self.rng.randint(1, 4096)
        if r < 0.65:
            return self.rng.randint(1, min(64 * KiB, m))
        if r < 0.85:
            return self.rng.randint(1, m)
        return PAGE * self.rng.randint(1, max(1, m // PAGE))

    def offset(self, size, n):
        """A start offset below max_size for an op of n bytes on a file of size."""
        r, ms, rng = self.rng.random(), self.a.max_size, self.rng
        if r < 0.25:
            off = rng.randrange(ms)
        elif r < 0.45:                      # straddle a boundary (4 MiB by default)
            bounds = list(range(self.a.boundary, ms + 1, self.a.boundary)) or [ms]
            b = rng.choice(bounds)
            off = b - rng.randint(1, max(1, n - 1)) if n > 1 else b - 1
        elif r < 0.55:                      # straddle a MiB boundary
            b = MiB * rng.randint(1, max(1, ms // MiB))
            off = b - rng.randint(1, max(1, n - 1)) if n > 1 else b - 1
        elif r < 0.75:                      # around EOF
            off = size + rng.randint(-n, 4096)
        elif r < 0.9:                       # page aligned
            off = PAGE * rng.randrange(max(1, ms // PAGE))
        else:                               # small and unaligned
            off = rng.randrange(min(ms, 64 * KiB))
        return max(0, min(off, ms - 1))

    def pick_h(self):
        return self.rng.choice(sorted(self.handles))

    def hdesc(self, h):
        return "h%d(%s)" % (h, self.handles[h])

    def gen(self):
        """Next op, chosen with the weights among those that make sense now."""
        rng = self.rng
        kind = rng.choices(self.kinds, self.weights)[0]
        needs_handle = kind in ("close", "write", "holewrite", "read", "truncate", "fallocate", "punch",
                                "mapread", "mapwrite", "fsync", "fdatasync", "fstat", "reopen")
        if needs_handle and not self.handles or kind == "open" and len(self.handles) >= 2 * len(self.names):
            kind = "open" if not self.handles else "close"
        if kind == "open":
            name = rng.choice(self.names)
            creat = rng.random() < 0.8
            h = self.next_h
            self.next_h += 1
            return Op("open", (h, name, creat), "h%d %s%s" % (h, name, " O_CREAT" if creat else ""))
        if kind == "append":
            name, n = rng.choice(self.names), self.length()
            size = os.stat(self.ref.p(name)).st_size if self.exists(name) else 0
            if size + n > self.cap:         # keep files below the cap
                if size >= self.cap - 1:
                    new = rng.randint(0, self.a.max_size)
                    return Op("truncate_path", (name, new), "%s %d -> %d" % (name, size, new))
                n = self.cap - size
            return Op("append", (name, rng.randbytes(n)), "%s len=%d size=%d" % (name, n, size))
        if kind in ("rename", "link"):
            a, b = rng.choice(self.names), rng.choice(self.names)
            return Op(kind, (a, b), "%s -> %s" % (a, b))
        if kind in ("unlink", "stat", "readall"):
            name = rng.choice(self.names)
            return Op(kind, (name,), name)
        if kind == "truncate_path":
            name = rng.choice(self.names)
            size = os.stat(self.ref.p(name)).st_size if self.exists(name) else 0
            new = self.new_size(size)
            return Op(kind, (name, new), "%s %d -> %d" % (name, size, new))
        h = self.pick_h()
        size = self.hsize(h)
        hd = self.hdesc(h)
        if kind in ("close", "reopen", "fstat"):
            return Op(kind, (h,), hd)
        if kind in ("fsync", "fdatasync"):
            return Op(kind, (h, kind == "fdatasync"), hd)
        if kind in ("write", "mapwrite"):
            n = self.length()
            off = self.offset(size, n)
            return Op(kind, (h, off, rng.randbytes(n)), "%s off=%d len=%d end=%d size=%d" % (hd, off, n, off + n, size))
        if kind == "holewrite":
            n = rng.randint(1, 8192)
            off = min(size + rng.randint(1, MiB), self.a.max_size - 1)
            return Op(kind, (h, off, rng.randbytes(n)), "%s off=%d len=%d size=%d" % (hd, off, n, size))
        if kind in ("read", "mapread"):
            n = self.length()
            if kind == "mapread" and size == 0:
                kind = "read"
            if kind == "mapread":
                off = rng.randrange(size)
            else:
                off = self.offset(size, n) if rng.random() < 0.3 else rng.randrange(max(1, size + 100))
            return Op(kind, (h, off, n), "%s off=%d len=%d size=%d" % (hd, off, n, size))
        if kind == "truncate":
            new = self.new_size(size)
            return Op(kind, (h, new), "%s %d -> %d" % (hd, size, new))
        if kind == "fallocate":
            how = rng.choice(["posix", "mode0", "keep_size"])
            n = self.length()
            off = self.offset(size, n)
            return Op(kind, (h, how, off, n), "%s %s off=%d len=%d size=%d" % (hd, how, off, n, size))
        if kind == "punch":
            n = self.length()
            off = rng.randrange(max(1, size))
            return Op(kind, (h, "punch", off, n), "%s off=%d len=%d size=%d" % (hd, off, n, size))
        raise AssertionError(kind)

    def new_size(self, size):
        rng = self.rng
        r = rng.random()
        if r < 0.45:
            return rng.randint(0, size)
        if r < 0.55:
            return self.rng.choice([0, size, PAGE * rng.randint(0, self.a.max_size // PAGE)])
        return min(size + rng.randint(1, self.a.max_op), self.cap)

    # --- execution and comparison
    def apply(self, i, op):
        if op.kind == "reopen":             # close and open the same name again
            h = op.args[0]
            name = self.handles[h]
            outs = []
            for sub in (Op("close", (h,), ""), Op("open", (h, name, False), "")):
                r1, r2 = run(self.ref, sub), run(self.tgt, sub)
                outs.append((r1, r2))
                if sub.kind == "close":
                    del self.handles[h]
                elif r1[0] == "opened" and r2[0] == "opened":
                    self.handles[h] = name
                else:                       # one side failed: drop whatever opened
                    for t, r in ((self.ref, r1), (self.tgt, r2)):
                        if r[0] == "opened":
                            os.close(t.fds.pop(h))
            return tuple(o[0] for o in outs), tuple(o[1] for o in outs)
        r1 = run(self.ref, op)
        r2 = run_in_child(self.tgt, op) if op.kind in ("mapread", "mapwrite") else run(self.tgt, op)
        if op.kind == "open":
            h, name = op.args[0], op.args[1]
            if r1[0] == "opened" and r2[0] == "opened":
                self.handles[h] = name
            else:
                for t, r in ((self.ref, r1), (self.tgt, r2)):
                    if r[0] == "opened":
                        os.close(t.fds.pop(h))
        elif op.kind == "close":
            self.handles.pop(op.args[0], None)
        return r1, r2

    def final_checks(self):
        """Whole content of every name and every open handle, on both sides."""
        out = []
        for name in self.names:
            out.append(("name " + name, Op("stat", (name,), name), Op("readall", (name,), name)))
        for h in sorted(self.handles):
            out.append(("handle " + self.hdesc(h), Op("fstat", (h,), ""), Op("read", (h, 0, self.cap + MiB), "")))
        for label, *ops in out:
            for op in ops:
                r1, r2 = run(self.ref, op), run(self.tgt, op)
                if r1 != r2:
                    return label + " " + op.kind, r1, r2
        return None

    def close_all(self):
        for t in (self.ref, self.tgt):
            for fd in t.fds.values():
                os.close(fd)
            t.fds.clear()


def show(outcome, other=None):
    """An outcome for printing: bytes as length (+ first difference with other)."""
    parts = []
    for i, v in enumerate(outcome):
        if isinstance(v, bytes):
            s = "<%d bytes>" % len(v)
            o = other[i] if other is not None and i < len(other) else None
            if isinstance(o, bytes) and o != v:
                d = next((j for j in range(min(len(v), len(o))) if v[j] != o[j]), min(len(v), len(o)))
                s += " first difference at +%d: %s" % (d, v[d:d + 16].hex())
            parts.append(s)
        else:
            parts.append(repr(v))
    return "(" + ", ".join(parts) + ")"


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reference", help="directory on a local reference file system")
    ap.add_argument("--target", help="directory on the file system under test")
    ap.add_argument("--ops", type=int, default=5000, help="number of operations (default 5000)")
    ap.add_argument("--seed", type=int, default=None, help="RNG seed (default: from the clock, printed)")
    ap.add_argument("--files", type=int, default=4, help="number of files (default 4)")
    ap.add_argument("--max-size", type=int, default=4 * MiB, help="operations start below this offset (default 4 MiB)")
    ap.add_argument("--max-op", type=int, default=256 * KiB, help="largest single read/write (default 256 KiB)")
    ap.add_argument("--boundary", type=int, default=4 * MiB, help="writes straddle multiples of this (default 4 MiB)")
    ap.add_argument("--skip", default="", help="comma-separated op kinds to leave out (see --list-ops)")
    ap.add_argument("--list-ops", action="store_true", help="list the op kinds and their weights")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directories even on success")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every operation")
    a = ap.parse_args()
    if a.list_ops:
        for k, w in WEIGHTS.items():
            print("%-14s %d" % (k, w))
        return 0
    if not a.reference or not a.target:
        ap.error("--reference and --target are required")
    a.skip = {s.strip() for s in a.skip.split(",") if s.strip()}
    unknown = a.skip - set(WEIGHTS)
    if unknown:
        ap.error("unknown op kinds: %s" % ", ".join(sorted(unknown)))
    if a.files < 1 or a.max_size < 2 * PAGE or a.max_op < 1 or a.boundary < 1:
        ap.error("bad --files/--max-size/--max-op/--boundary")
    if a.seed is None:
        a.seed = int(time.time() * 1000) % 1000000007
    ref, tgt = os.path.realpath(a.reference), os.path.realpath(a.target)
    for p in (ref, tgt):
        if not os.path.isdir(p):
            print("not a directory: %s" % p, file=sys.stderr)
            return 2
    if ref == tgt:
        print("--reference and --target must differ", file=sys.stderr)
        return 2
    dirs = [tempfile.mkdtemp(prefix="fsx.%d." % a.seed, dir=p) for p in (ref, tgt)]
    f = Fsx(a, *dirs)
    print("fsx: seed %d, %d ops, %d files, max-size %d, max-op %d, boundary %d; ref %s, target %s" % (
        a.seed, a.ops, a.files, a.max_size, a.max_op, a.boundary, dirs[0], dirs[1]))
    sys.stdout.flush()
    start = time.monotonic()
    failed = False
    try:
        # every file starts open and created, so the first ops have something to work on
        setup = [Op("open", (i, n, True), "h%d %s O_CREAT" % (i, n)) for i, n in enumerate(f.names)]
        f.next_h = len(setup)
        ops = ((-len(setup) + j, op) for j, op in enumerate(setup))
        for i, op in ops:
            f.apply(i, op)
        for i in range(a.ops):
            op = f.gen()
            r1, r2 = f.apply(i, op)
            f.counts[op.kind] += 1
            if a.verbose:
                print("#%d %s -> %s" % (i, op, show(r1)))
            if r1 != r2:
                failed = True
                print("MISMATCH at op #%d (seed %d): %s" % (i, a.seed, op))
                print("  ref:    %s" % show(r1, r2))
                print("  target: %s" % show(r2, r1))
                print("last %d operations before it:" % len(f.history))
                for j, (o, res) in f.history:
                    print("  #%d %s -> %s" % (j, o, res))
                break
            f.history.append((i, (str(op), show(r1))))
        if not failed:
            bad = f.final_checks()
            if bad:
                failed = True
                label, r1, r2 = bad
                print("MISMATCH in the final comparison (seed %d, after %d ops): %s" % (a.seed, a.ops, label))
                print("  ref:    %s" % show(r1, r2))
                print("  target: %s" % show(r2, r1))
                print("last %d operations:" % len(f.history))
                for j, (o, res) in f.history:
                    print("  #%d %s -> %s" % (j, o, res))
    finally:
        f.close_all()
        if failed or a.keep:
            print("kept %s and %s" % tuple(dirs))
        else:
            for d in dirs:
                shutil.rmtree(d, ignore_errors=True)
    dt = time.monotonic() - start
    summary = ", ".join("%s %d" % kv for kv in sorted(f.counts.items()))
    if failed:
        print("FAIL: seed %d (%.1fs)" % (a.seed, dt))
        return 1
    print("ok: %d ops, seed %d, all outcomes and final contents equal (%.1fs)\n  %s" % (a.ops, a.seed, dt, summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
