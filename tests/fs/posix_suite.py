#!/usr/bin/env python3
"""POSIX conformance suite for Cairn's file system, by comparison with a reference.

Every check runs twice: once in an empty scratch directory under REFDIR (a
local file system such as ext4, taken as the truth) and once in one under
TARGETDIR (the file system under test, e.g. the Cairn FUSE mount).  A check
is a small function that works on relative paths (the runner makes the
scratch directory its cwd) and returns a dict of normalised outcomes: return
values, errno names ("E:ENOENT"), file contents or digests, the stat fields
that must agree (type, permission bits, size of non-directories, nlink, uid,
gid) and relations between times ("newer"/"same"), never inode numbers,
absolute times, directory sizes, st_blocks or statfs numbers.  The two dicts
must be equal.

Covered: open flags (O_CREAT|O_EXCL, O_TRUNC, O_APPEND, O_DIRECT, O_SYNC,
O_TMPFILE), EBADF/EISDIR/ENOENT/ENOTDIR, pread/pwrite, sparse files, truncate,
fallocate (posix and mode 0/KEEP_SIZE/PUNCH_HOLE), fsync/fdatasync, rename and
renameat2 (NOREPLACE, EXCHANGE), hard links, symlinks and loops, mkdir/rmdir
and directory nlink, FIFOs, sockets and device nodes, readdir (5,000 entries,
'.'/'..', unlink during the scan, d_type, seeking), chmod/chown/utimes and
time updates, permission checks as non-root users (uid 4242 with
supplementary group 4343, uid 4244) in forked children, sticky and setgid
directories, setuid clearing, xattrs, statfs, mmap, flock/lockf locks, name
and path length limits, unusual name bytes, a removed cwd.

Run as root (the permission, chown, trusted.* and mknod checks need it;
without root they are skipped):

    python3 tests/fs/posix_suite.py --reference /var/tmp/fsref --target /mnt/cairn
    python3 tests/fs/posix_suite.py ... --only 'rename_*,xattr_user'   # globs
    python3 tests/fs/posix_suite.py ... --skip punch_hole -v
    python3 tests/fs/posix_suite.py --list

Output: one line per check, "ok NAME", "skip NAME: why", "FAIL NAME: key:
ref=... target=..." (a mismatch) or "ERROR NAME: ..." (the check crashed on
the reference: a bug in the check or an unsuitable reference); then a
summary.  Exit status 0 only if nothing failed.  The scratch directories
(REFDIR/posix-suite.XXXX, TARGETDIR/posix-suite.XXXX) are removed unless
--keep.  Standard library only (plus ctypes); Linux, x86_64 or aarch64.

To add a check: write a function that builds its files in the cwd and
returns a dict, and decorate it with @check (or @check(root=True)).
"""

import argparse
import ctypes
import errno
import fcntl
import fnmatch
import hashlib
import mmap
import os
import pickle
import platform
import random
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
import traceback

# --------------------------------------------------------------------------
# ctypes wrappers for calls the os module lacks

libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW = 0x100
AT_SYMLINK_FOLLOW = 0x400
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
FALLOC_FL_KEEP_SIZE = 1
FALLOC_FL_PUNCH_HOLE = 2
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2
SYS_GETDENTS64 = {"x86_64": 217, "aarch64": 61}.get(platform.machine())
SYS_RENAMEAT2 = {"x86_64": 316, "aarch64": 276}.get(platform.machine())

libc.syscall.restype = ctypes.c_long
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
libc.fallocate.restype = ctypes.c_int
libc.getxattr.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
libc.getxattr.restype = ctypes.c_ssize_t
libc.utimensat.restype = ctypes.c_int


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _oserror():
    e = ctypes.get_errno()
    return OSError(e, os.strerror(e))


def renameat2(old, new, flags):
    o, n = os.fsencode(old), os.fsencode(new)
    fn = getattr(libc, "renameat2", None)
    if fn is not None:
        fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        fn.restype = ctypes.c_int
        rc = fn(AT_FDCWD, o, AT_FDCWD, n, flags)
    else:
        rc = libc.syscall(ctypes.c_long(SYS_RENAMEAT2), ctypes.c_int(AT_FDCWD), o,
                          ctypes.c_int(AT_FDCWD), n, ctypes.c_uint(flags))
    if rc != 0:
        raise _oserror()


def fallocate(fd, mode, offset, length):
    if libc.fallocate(fd, mode, offset, length) != 0:
        raise _oserror()


def linkat_follow(old, new):
    """linkat(AT_FDCWD, old, AT_FDCWD, new, AT_SYMLINK_FOLLOW) (os.link calls link(2))."""
    if libc.linkat(ctypes.c_int(AT_FDCWD), os.fsencode(old), ctypes.c_int(AT_FDCWD),
                   os.fsencode(new), ctypes.c_int(AT_SYMLINK_FOLLOW)) != 0:
        raise _oserror()


def utimensat(path, atime, mtime, flags=0):
    """atime/mtime: (sec, nsec); nsec may be UTIME_NOW or UTIME_OMIT."""
    ts = (Timespec * 2)(Timespec(*atime), Timespec(*mtime))
    if libc.utimensat(ctypes.c_int(AT_FDCWD), os.fsencode(path), ts, ctypes.c_int(flags)) != 0:
        raise _oserror()


def getxattr_raw(path, name, size):
    """getxattr(2) with a caller-chosen buffer size: returns the length."""
    buf = ctypes.create_string_buffer(max(size, 1)) if size else None
    n = libc.getxattr(os.fsencode(path), os.fsencode(name), buf, size)
    if n < 0:
        raise _oserror()
    return n


def getdents(fd, bufsize=32768):
    """One getdents64(2) call: a list of (name bytes, d_type, d_off)."""
    buf = ctypes.create_string_buffer(bufsize)
    n = libc.syscall(ctypes.c_long(SYS_GETDENTS64), ctypes.c_int(fd), buf, ctypes.c_size_t(bufsize))
    if n < 0:
        raise _oserror()
    raw, out, pos = buf.raw[:n], [], 0
    while pos < n:
        _ino, off, reclen, typ = struct.unpack_from("=QqHB", raw, pos)
        out.append((raw[pos + 19:pos + reclen].split(b"\0", 1)[0], typ, off))
        pos += reclen
    return out


def getdents_all(fd, bufsize=32768):
    out = []
    while True:
        batch = getdents(fd, bufsize)
        if not batch:
            return out
        out.extend(batch)


# --------------------------------------------------------------------------
# helpers for checks

KiB, MiB = 1024, 1024 * 1024
USER_A = (4242, 4242, (4343,))      # uid, gid, supplementary groups
USER_A_NOSUP = (4242, 4242, ())
USER_B = (4244, 4244, ())
SIDE = "ref"                         # "ref" or "target" while a check runs

FTYPES = {stat.S_IFREG: "reg", stat.S_IFDIR: "dir", stat.S_IFLNK: "lnk", stat.S_IFIFO: "fifo",
          stat.S_IFSOCK: "sock", stat.S_IFCHR: "chr", stat.S_IFBLK: "blk"}


class Skip(Exception):
    pass


class ChildCrash(Exception):
    pass


def en(e):
    """Errno name of an OSError, as 'E:NAME'."""
    return "E:" + errno.errorcode.get(e.errno, str(e.errno))


def E(fn, *a, **kw):
    """Call fn; its result ('ok' for None) or 'E:ERRNO'."""
    try:
        r = fn(*a, **kw)
    except OSError as e:
        return en(e)
    return "ok" if r is None else r


def lockerr(r):
    """POSIX lets a conflicting F_SETLK fail with EACCES or EAGAIN."""
    return "E:EAGAIN|EACCES" if r in ("E:EAGAIN", "E:EACCES") else r


def opened(path, flags, mode=0o644):
    """open() and close at once: 'ok' or 'E:ERRNO'."""
    try:
        fd = os.open(path, flags, mode)
    except OSError as e:
        return en(e)
    os.close(fd)
    return "ok"


def norm(st):
    d = {"type": FTYPES.get(stat.S_IFMT(st.st_mode), "?"), "mode": oct(stat.S_IMODE(st.st_mode)),
         "nlink": st.st_nlink, "uid": st.st_uid, "gid": st.st_gid}
    if not stat.S_ISDIR(st.st_mode):
        d["size"] = st.st_size          # directory sizes are file-system specific
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        d["rdev"] = (os.major(st.st_rdev), os.minor(st.st_rdev))
    return d


def S(path, follow=True):
    """Normalised stat, or 'E:ERRNO'."""
    try:
        return norm(os.stat(path, follow_symlinks=follow))
    except OSError as e:
        return en(e)


def FS(fd):
    return norm(os.fstat(fd))


def T(path, follow=True):
    st = os.stat(path, follow_symlinks=follow)
    return (st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns)


def rel(a, b):
    return "same" if a == b else ("newer" if b > a else "older")


def trel(before, after):
    """Relations of (mtime, ctime) between two T() samples."""
    return {"mtime": rel(before[1], after[1]), "ctime": rel(before[2], after[2])}


def tick():
    """Sleep past the file system's timestamp granularity."""
    time.sleep(0.02)


def dg(b):
    """Small values verbatim, big ones as length + digest."""
    if isinstance(b, str) or len(b) <= 64:
        return b
    return "%dB:%s" % (len(b), hashlib.sha256(b).hexdigest()[:20])


def rand(n, seed=1):
    return random.Random(seed).randbytes(n)


def wr(path, data, mode=0o644, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC):
    fd = os.open(path, flags, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def rd(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        return en(e)
    try:
        chunks = []
        while True:
            c = os.read(fd, 1 << 20)
            if not c:
                return b"".join(chunks)
            chunks.append(c)
    except OSError as e:
        return en(e)
    finally:
        os.close(fd)


def preadall(fd, n, off):
    out = []
    while n > 0:
        c = os.pread(fd, n, off)
        if not c:
            break
        out.append(c)
        n -= len(c)
        off += len(c)
    return b"".join(out)


def exists(path):
    return os.path.lexists(path)


def describe(e):
    tb = traceback.extract_tb(e.__traceback__)
    where = ""
    for fr in reversed(tb):
        if fr.filename == __file__:
            where = " (line %d)" % fr.lineno
            break
    return "%s: %s%s" % (type(e).__name__, e, where)


def in_child(fn, user=None):
    """Run fn() in a forked child (optionally as user=(uid, gid, groups));
    return its (picklable) result.  Raises ChildCrash if fn raised."""
    sys.stdout.flush()
    sys.stderr.flush()
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(rfd)
            try:
                if user is not None:
                    uid, gid, groups = user
                    os.setgroups(list(groups))
                    os.setresgid(gid, gid, gid)
                    os.setresuid(uid, uid, uid)
                out = ("ok", fn())
            except BaseException as e:  # noqa: B036 - report everything
                out = ("crash", describe(e))
            try:
                data = pickle.dumps(out)
            except Exception as e:
                data = pickle.dumps(("crash", "unpicklable result: %s" % e))
            with os.fdopen(wfd, "wb") as f:
                f.write(data)
        finally:
            os._exit(0)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        if os.WIFSIGNALED(status):
            raise ChildCrash("child killed by %s" % signal.Signals(os.WTERMSIG(status)).name)
        raise ChildCrash("child died without a result (status %d)" % status)
    kind, val = pickle.loads(data)
    if kind != "ok":
        raise ChildCrash(val)
    return val


def as_user(fn, user=USER_A):
    return in_child(fn, user)


def run_exec(path, user=None):
    """exec path (optionally as user): 'exit:N' or 'E:ERRNO'."""
    kw = {}
    if user is not None:
        kw = dict(user=user[0], group=user[1], extra_groups=list(user[2]))
    try:
        p = subprocess.run([path], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, **kw)
    except OSError as e:
        return en(e)
    return "exit:%d" % p.returncode


# --------------------------------------------------------------------------
# registry

class Check:
    def __init__(self, fn, root, isolate):
        self.fn, self.root, self.isolate, self.name = fn, root, isolate, fn.__name__
        self.doc = (fn.__doc__ or "").strip().split("\n")[0]


CHECKS = []


def check(fn=None, *, root=False, isolate=False):
    """Register a check.  root: needs root.  isolate: run it in a forked
    child, so that a signal (SIGBUS from a bad mmap) fails only this check."""
    def reg(f):
        CHECKS.append(Check(f, root, isolate))
        return f
    return reg(fn) if fn is not None else reg


# ==========================================================================
# open(2)

@check
def open_creat_excl():
    """O_CREAT|O_EXCL creates once, then EEXIST (also on a dangling symlink and a dir)."""
    r = {}
    r["create"] = opened("f", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
    r["stat"] = S("f")
    r["again"] = opened("f", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    r["creat_existing"] = opened("f", os.O_WRONLY | os.O_CREAT)
    os.symlink("dangling_target", "ln")
    r["excl_on_dangling_symlink"] = opened("ln", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    r["symlink_target_created"] = exists("dangling_target")
    os.mkdir("d")
    r["excl_on_dir"] = opened("d", os.O_RDONLY | os.O_CREAT | os.O_EXCL)
    os.umask(0o027)
    r["umask_create"] = opened("g", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    r["umask_stat"] = S("g")
    return r


@check
def open_trunc():
    """O_TRUNC empties an existing file and updates mtime/ctime."""
    r = {}
    wr("f", rand(10000))
    t0 = T("f")
    tick()
    fd = os.open("f", os.O_WRONLY | os.O_TRUNC)
    r["fstat"] = FS(fd)
    os.write(fd, b"new")
    os.close(fd)
    r["stat"] = S("f")
    r["times"] = trel(t0, T("f"))
    r["content"] = rd("f")
    wr("g", b"abc")
    r["rdonly_trunc"] = opened("g", os.O_RDONLY | os.O_TRUNC)
    r["rdonly_trunc_size"] = os.stat("g").st_size
    wr("e", b"")
    t0 = T("e")
    tick()
    r["trunc_empty"] = opened("e", os.O_WRONLY | os.O_TRUNC)
    r["trunc_empty_times"] = trel(t0, T("e"))
    return r


@check
def open_append():
    """O_APPEND: every write (even after lseek, and pwrite) goes to the end."""
    r = {}
    fd = os.open("f", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(fd, b"hello")
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, b"world")
    r["pos"] = os.lseek(fd, 0, os.SEEK_CUR)
    os.pwrite(fd, b"XY", 0)             # Linux: pwrite on O_APPEND appends
    fd2 = os.open("f", os.O_WRONLY)
    os.write(fd2, b"J")                  # plain fd overwrites at 0
    os.write(fd, b"!")
    r["content"] = rd("f")
    r["read_on_wronly"] = E(os.read, fd, 1)
    fl = fcntl.fcntl(fd, fcntl.F_GETFL)
    r["getfl_append"] = bool(fl & os.O_APPEND)
    fcntl.fcntl(fd, fcntl.F_SETFL, fl & ~os.O_APPEND)
    os.lseek(fd, 1, os.SEEK_SET)
    os.write(fd, b"E")
    r["after_clear_append"] = rd("f")
    fd3 = os.open("f", os.O_RDWR | os.O_APPEND)
    os.write(fd3, b"+tail")
    r["rdwr_append_read"] = os.pread(fd3, 100, 0)
    for x in (fd, fd2, fd3):
        os.close(x)
    r["stat"] = S("f")
    return r


@check
def open_direct():
    """O_DIRECT: aligned 4096-byte I/O with mmap-allocated buffers."""
    r = {}
    try:
        fd = os.open("f", os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644)
    except OSError as e:
        if e.errno == errno.EINVAL and SIDE == "ref":
            raise Skip("the reference refuses O_DIRECT (EINVAL)")
        return {"open": en(e)}
    wbuf = mmap.mmap(-1, 8192)
    wbuf[:] = rand(8192, 3)
    r["write_8k"] = E(os.pwrite, fd, wbuf, 0)
    r["write_4k_at_12k"] = E(os.pwrite, fd, memoryview(wbuf)[:4096], 12288)
    r["fstat"] = FS(fd)
    rbuf = mmap.mmap(-1, 16384)
    r["read"] = E(os.preadv, fd, [rbuf], 0)
    r["read_data"] = dg(bytes(rbuf))
    r["read_eof"] = E(os.preadv, fd, [rbuf], 16384)
    r["getfl_direct"] = bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT)
    os.close(fd)
    r["buffered_content"] = dg(rd("f"))
    # buffered writer, then O_DIRECT reader must see the data
    wr("g", rand(4096, 4))
    fd = os.open("g", os.O_RDONLY | os.O_DIRECT)
    rbuf2 = mmap.mmap(-1, 4096)
    r["direct_after_buffered"] = E(os.preadv, fd, [rbuf2], 0)
    r["direct_after_buffered_ok"] = bytes(rbuf2) == rand(4096, 4)
    os.close(fd)
    wbuf.close()
    rbuf.close()
    rbuf2.close()
    return r


@check
def open_sync():
    """O_SYNC and O_DSYNC writes succeed, the flags are reported by F_GETFL."""
    r = {}
    fd = os.open("f", os.O_WRONLY | os.O_CREAT | os.O_SYNC, 0o644)
    r["write"] = os.write(fd, rand(10000))
    r["getfl_sync"] = (fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_SYNC) == os.O_SYNC
    os.close(fd)
    fd = os.open("f", os.O_WRONLY | os.O_DSYNC)
    r["pwrite_dsync"] = os.pwrite(fd, b"dsync", 5000)
    r["getfl_dsync"] = bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DSYNC)
    os.close(fd)
    r["content"] = dg(rd("f"))
    r["stat"] = S("f")
    return r


@check
def open_rdonly_write_ebadf():
    """Writing an O_RDONLY fd is EBADF (ftruncate EINVAL), reading O_WRONLY is EBADF."""
    r = {}
    wr("f", b"data")
    fd = os.open("f", os.O_RDONLY)
    r["write"] = E(os.write, fd, b"x")
    r["pwrite"] = E(os.pwrite, fd, b"x", 0)
    r["ftruncate"] = E(os.ftruncate, fd, 0)
    r["posix_fallocate"] = E(os.posix_fallocate, fd, 0, 100)
    r["read"] = E(os.read, fd, 10)
    os.close(fd)
    fd = os.open("f", os.O_WRONLY)
    r["read_wronly"] = E(os.read, fd, 1)
    r["pread_wronly"] = E(os.pread, fd, 1, 0)
    os.close(fd)
    r["closed_fd_write"] = E(os.write, fd, b"x")
    r["content"] = rd("f")
    return r


@check
def open_dir_eisdir():
    """Opening a directory for writing is EISDIR; reading a dir fd is EISDIR."""
    r = {}
    os.mkdir("d")
    wr("f", b"x")
    r["wronly"] = opened("d", os.O_WRONLY)
    r["rdwr"] = opened("d", os.O_RDWR)
    r["creat"] = opened("d", os.O_WRONLY | os.O_CREAT)
    r["rdonly"] = opened("d", os.O_RDONLY)
    fd = os.open("d", os.O_RDONLY)
    r["read_dir_fd"] = E(os.read, fd, 10)
    os.close(fd)
    r["o_directory_on_file"] = opened("f", os.O_RDONLY | os.O_DIRECTORY)
    r["o_directory_on_dir"] = opened("d", os.O_RDONLY | os.O_DIRECTORY)
    r["truncate_dir"] = E(os.truncate, "d", 0)
    return r


@check
def open_enoent():
    """Missing names: ENOENT from open, stat, unlink, rmdir, rename, link, ..."""
    r = {}
    r["open"] = opened("nope", os.O_RDONLY)
    r["creat_in_missing_dir"] = opened("nodir/f", os.O_WRONLY | os.O_CREAT)
    r["stat"] = S("nope")
    r["lstat"] = S("nope", follow=False)
    r["unlink"] = E(os.unlink, "nope")
    r["rmdir"] = E(os.rmdir, "nope")
    r["rename"] = E(os.rename, "nope", "x")
    r["link"] = E(os.link, "nope", "x")
    r["chmod"] = E(os.chmod, "nope", 0o644)
    r["readlink"] = E(os.readlink, "nope")
    r["mkdir_missing_parent"] = E(os.mkdir, "a/b")
    r["truncate"] = E(os.truncate, "nope", 0)
    os.symlink("nowhere", "dangling")
    r["open_dangling"] = opened("dangling", os.O_RDONLY)
    r["listdir"] = E(os.listdir, "nope")
    return r


@check
def open_enotdir():
    """A regular file used as a directory is ENOTDIR."""
    r = {}
    wr("f", b"x")
    r["open_under_file"] = opened("f/x", os.O_RDONLY)
    r["creat_under_file"] = opened("f/x", os.O_WRONLY | os.O_CREAT)
    r["mkdir_under_file"] = E(os.mkdir, "f/x")
    r["stat_trailing_slash"] = S("f/")
    r["open_trailing_slash"] = opened("f/", os.O_RDONLY)
    r["listdir_file"] = E(os.listdir, "f")
    r["rmdir_file"] = E(os.rmdir, "f")
    r["rename_under_file"] = E(os.rename, "f", "f/y")
    r["symlink_under_file"] = E(os.symlink, "t", "f/l")
    return r


@check
def open_tmpfile():
    """O_TMPFILE: an unnamed file, linkable through /proc/self/fd."""
    r = {}
    try:
        fd = os.open(".", os.O_TMPFILE | os.O_RDWR, 0o600)
    except OSError as e:
        return {"open": en(e)}
    os.write(fd, b"tmpdata")
    r["fstat"] = FS(fd)
    r["listdir"] = sorted(os.listdir("."))
    r["link"] = E(linkat_follow, "/proc/self/fd/%d" % fd, "named")
    os.close(fd)
    r["stat"] = S("named")
    r["content"] = rd("named")
    return r


# ==========================================================================
# data

@check
def pread_pwrite():
    """pread/pwrite at offsets, reads at and past EOF, lseek."""
    r = {}
    fd = os.open("f", os.O_RDWR | os.O_CREAT, 0o644)
    os.pwrite(fd, rand(10000), 0)
    os.pwrite(fd, b"ABCDEFGH", 4093)
    r["pwrite_extend"] = os.pwrite(fd, b"tail", 9998)
    r["size"] = os.fstat(fd).st_size
    r["pread_mid"] = dg(os.pread(fd, 100, 4090))
    r["pread_boundary"] = os.pread(fd, 8, 4093)
    r["pread_at_eof"] = os.pread(fd, 10, 10002)
    r["pread_past_eof"] = os.pread(fd, 10, 20000)
    r["pread_straddle_eof"] = os.pread(fd, 100, 9990)
    r["pos_unchanged"] = os.lseek(fd, 0, os.SEEK_CUR)
    os.lseek(fd, 100, os.SEEK_SET)
    os.write(fd, b"abc")
    r["pos_after_write"] = os.lseek(fd, 0, os.SEEK_CUR)
    r["seek_end"] = os.lseek(fd, 0, os.SEEK_END)
    r["seek_end_minus"] = os.lseek(fd, -5, os.SEEK_END)
    r["read_from_pos"] = os.read(fd, 100)
    r["seek_negative"] = E(os.lseek, fd, -1, os.SEEK_SET)
    r["pwrite_negative"] = E(os.pwrite, fd, b"x", -1)
    r["pread_negative"] = E(os.pread, fd, 1, -1)
    r["write_zero"] = os.pwrite(fd, b"", 50000)
    r["size_after_zero_write"] = os.fstat(fd).st_size
    os.close(fd)
    r["content"] = dg(rd("f"))
    return r


@check
def sparse_file():
    """Writing far past EOF: size follows, holes read as zeros."""
    r = {}
    fd = os.open("f", os.O_RDWR | os.O_CREAT, 0o644)
    os.pwrite(fd, b"start", 0)
    os.pwrite(fd, b"end", 10 * MiB + 123)
    r["size"] = os.fstat(fd).st_size
    r["hole_zero"] = os.pread(fd, MiB, 4 * MiB) == bytes(MiB)
    r["hole_head"] = os.pread(fd, 20, 0)
    r["around_end"] = os.pread(fd, 20, 10 * MiB + 113)
    os.pwrite(fd, b"mid", 5 * MiB - 1)       # straddles a 4 KiB page and a MiB boundary
    r["mid"] = os.pread(fd, 7, 5 * MiB - 3)
    os.lseek(fd, 12 * MiB, os.SEEK_SET)       # lseek past EOF then write
    os.write(fd, b"far")
    r["size2"] = os.fstat(fd).st_size
    r["hole2_zero"] = os.pread(fd, 100, 11 * MiB) == bytes(100)
    os.close(fd)
    r["content"] = dg(rd("f"))
    return r


@check
def large_offset():
    """A write at 1 TiB + 5 makes a sparse file of that size."""
    r = {}
    fd = os.open("f", os.O_RDWR | os.O_CREAT, 0o644)
    off = (1 << 40) + 5
    r["pwrite"] = E(os.pwrite, fd, b"far away", off)
    r["size"] = os.fstat(fd).st_size
    r["pread"] = E(os.pread, fd, 20, off - 4)
    r["pread_hole"] = E(os.pread, fd, 8, 1 << 39)
    r["truncate_down"] = E(os.ftruncate, fd, 3)
    r["size2"] = os.fstat(fd).st_size
    os.close(fd)
    return r


@check
def truncate_up_down():
    """ftruncate/truncate up and down; data past a cut reads as zeros after re-extension."""
    r = {}
    data = rand(100000, 5)
    wr("f", data)
    fd = os.open("f", os.O_RDWR)
    t0 = T("f")
    tick()
    os.ftruncate(fd, 50001)
    r["down_times"] = trel(t0, T("f"))
    r["down_size"] = os.fstat(fd).st_size
    r["down_prefix_ok"] = os.pread(fd, 60000, 0) == data[:50001]
    os.ftruncate(fd, 200000)
    r["up_size"] = os.stat("f").st_size
    r["up_zero"] = os.pread(fd, 149999, 50001) == bytes(149999)
    os.truncate("f", 10)
    os.truncate("f", 70000)
    r["path_trunc_content"] = dg(rd("f"))
    # cached data beyond a non-page-aligned cut must not come back
    os.pwrite(fd, b"\xaa" * 10000, 60000)
    os.ftruncate(fd, 5003)
    os.pwrite(fd, b"Z", 80000)
    got = preadall(fd, 80001, 0)
    r["reextend_len"] = len(got)
    r["reextend_prefix"] = got[:10] == data[:10]
    r["reextend_zeros"] = got[5003:80000] == bytes(80000 - 5003)
    r["reextend_tail"] = got[80000:]
    t0 = T("f")
    tick()
    os.ftruncate(fd, 80001)
    r["same_size_times"] = trel(t0, T("f"))
    r["truncate_negative"] = E(os.truncate, "f", -1)
    r["ftruncate_zero"] = E(os.ftruncate, fd, 0)
    r["zero_read"] = os.pread(fd, 10, 0)
    os.close(fd)
    r["stat"] = S("f")
    return r


@check
def fallocate_posix():
    """posix_fallocate extends with zeros and keeps existing data."""
    r = {}
    fd = os.open("f", os.O_RDWR | os.O_CREAT, 0o644)
    r["alloc"] = E(os.posix_fallocate, fd, 0, MiB)
    r["size"] = os.fstat(fd).st_size
    r["zeros"] = os.pread(fd, MiB, 0) == bytes(MiB)
    os.pwrite(fd, b"keep me", 100)
    r["inside"] = E(os.posix_fallocate, fd, 0, 512 * KiB)
    r["size_inside"] = os.fstat(fd).st_size
    r["data_kept"] = os.pread(fd, 7, 100)
    r["beyond"] = E(os.posix_fallocate, fd, 2 * MiB, 4096)
    r["size_beyond"] = os.fstat(fd).st_size
    r["gap_zero"] = os.pread(fd, MiB, MiB) == bytes(MiB)
    r["zero_len"] = E(os.posix_fallocate, fd, 0, 0)
    os.close(fd)
    fd = os.open("f", os.O_RDONLY)
    r["rdonly_fd"] = E(os.posix_fallocate, fd, 0, 10)
    os.close(fd)
    return r


@check
def fallocate_mode0():
    """fallocate(2) mode 0 through ctypes."""
    r = {}
    fd = os.open("f", os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"hello")
    r["alloc"] = E(fallocate, fd, 0, 3 * MiB, 10)
    r["size"] = os.fstat(fd).st_size
    r["data"] = os.pread(fd, 5, 0)
    r["tail_zero"] = os.pread(fd, 3 * MiB + 5, 5) == bytes(3 * MiB + 5)
    r["inside"] = E(fallocate, fd, 0, 0, 4096)
    r["size_inside"] = os.fstat(fd).st_size
    r["zero_len"] = E(fallocate, fd, 0, 0, 0)
    r["negative"] = E(fallocate, fd, 0, -1, 10)
    os.close(fd)
    fd = os.open("f", os.O_RDONLY)
    r["rdonly_fd"] = E(fallocate, fd, 0, 0, 10)
    os.close(fd)
    return r


@check
def fallocate_keep_size():
    """fallocate FALLOC_FL_KEEP_SIZE past EOF leaves the size alone."""
    r = {}
    fd = os.open("f", os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"x" * 1000)
    r["alloc"] = E(fallocate, fd, FALLOC_FL_KEEP_SIZE, 0, 2 * MiB)
    r["size"] = os.fstat(fd).st_size
    r["append"] = os.pwrite(fd, b"y", 1000)
    r["size2"] = os.fstat(fd).st_size
    r["content"] = dg(preadall(fd, 5000, 0))
    os.close(fd)
    return r


@check
def punch_hole():
    """fallocate PUNCH_HOLE|KEEP_SIZE zeroes a range (unaligned ends) and keeps the size."""
    r = {}
    data = rand(64 * KiB, 6)
    wr("f", data)
    fd = os.open("f", os.O_RDWR)
    r["punch"] = E(fallocate, fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 1000, 20000)
    got = preadall(fd, 64 * KiB, 0)
    r["size"] = os.fstat(fd).st_size
    r["before"] = got[:1000] == data[:1000]
    r["hole"] = got[1000:21000] == bytes(20000)
    r["after"] = got[21000:] == data[21000:]
    r["punch_no_keep"] = E(fallocate, fd, FALLOC_FL_PUNCH_HOLE, 0, 10)
    os.close(fd)
    return r


@check
def fsync_fdatasync():
    """fsync/fdatasync on files (also read-only fds) and directories."""
    r = {}
    fd = os.open("f", os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, rand(70000))
    r["fsync"] = E(os.fsync, fd)
    os.pwrite(fd, b"more", 100000)
    r["fdatasync"] = E(os.fdatasync, fd)
    os.close(fd)
    fd = os.open("f", os.O_RDONLY)
    r["fsync_rdonly"] = E(os.fsync, fd)
    os.close(fd)
    dfd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    r["fsync_dir"] = E(os.fsync, dfd)
    r["fdatasync_dir"] = E(os.fdatasync, dfd)
    os.close(dfd)
    r["content"] = dg(rd("f"))
    return r


@check
def coherence_two_fds():
    """Writes through one fd are seen at once by another fd, stat and a fresh open."""
    r = {}
    fd1 = os.open("f", os.O_RDWR | os.O_CREAT, 0o644)
    fd2 = os.open("f", os.O_RDWR)
    os.write(fd1, b"a" * 5000)
    r["stat_size"] = os.stat("f").st_size
    r["fstat2_size"] = os.fstat(fd2).st_size
    r["read2"] = dg(os.pread(fd2, 6000, 0))
    fd3 = os.open("f", os.O_WRONLY | os.O_APPEND)
    os.write(fd3, b"b" * 10)
    r["read1_after_append"] = os.pread(fd1, 20, 4995)
    os.truncate("f", 100)
    r["fstat1_after_path_truncate"] = os.fstat(fd1).st_size
    r["read2_after_truncate"] = len(os.pread(fd2, 6000, 0))
    os.pwrite(fd2, b"c", 200)
    r["fresh_read"] = dg(rd("f"))
    for x in (fd1, fd2, fd3):
        os.close(x)
    return r


@check
def unlink_open_file():
    """An unlinked file stays readable and writable through open fds."""
    r = {}
    wr("f", b"data" * 1000)
    fd = os.open("f", os.O_RDWR)
    os.unlink("f")
    r["exists"] = exists("f")
    r["fstat"] = FS(fd)
    r["read"] = dg(os.pread(fd, 5000, 0))
    os.pwrite(fd, b"more", 8000)
    r["size_after_write"] = os.fstat(fd).st_size
    r["read_back"] = os.pread(fd, 10, 7998)
    r["ftruncate"] = E(os.ftruncate, fd, 10)
    r["read_after_trunc"] = os.pread(fd, 100, 0)
    r["listdir"] = os.listdir(".")
    wr("f", b"new file")            # reusing the name gives a new file
    r["new_content"] = rd("f")
    r["old_still"] = os.pread(fd, 100, 0)
    os.close(fd)
    return r


# ==========================================================================
# rename

def _ino(p):
    """Inode number (only ever compared within one tree), or 'E:ERRNO'."""
    try:
        return os.stat(p, follow_symlinks=False).st_ino
    except OSError as e:
        return en(e)


@check
def rename_simple():
    """rename within a directory: the inode follows, ctime of the file and dir times change."""
    r = {}
    wr("a", b"content")
    ino = _ino("a")
    t0, d0 = T("a"), T(".")
    tick()
    r["rename"] = E(os.rename, "a", "b")
    r["a_exists"] = exists("a")
    r["b"] = S("b")
    r["b_content"] = rd("b")
    r["ino_follows"] = _ino("b") == ino
    r["file_times"] = trel(t0, T("b"))
    r["dir_times"] = trel(d0, T("."))
    r["listdir"] = sorted(os.listdir("."))
    return r


@check
def rename_across_dirs():
    """rename of a file and of a directory between directories (nlink and '..' follow)."""
    r = {}
    os.mkdir("d1")
    os.mkdir("d2")
    wr("d1/f", b"x")
    os.mkdir("d1/sub")
    wr("d1/sub/inner", b"inner")
    ino_f, ino_sub = _ino("d1/f"), _ino("d1/sub")
    t1, t2 = T("d1"), T("d2")
    tick()
    r["file"] = E(os.rename, "d1/f", "d2/f")
    r["dir"] = E(os.rename, "d1/sub", "d2/sub")
    r["d1_times"] = trel(t1, T("d1"))
    r["d2_times"] = trel(t2, T("d2"))
    r["ino_f_follows"] = _ino("d2/f") == ino_f
    r["ino_sub_follows"] = _ino("d2/sub") == ino_sub
    r["d1"] = S("d1")
    r["d2"] = S("d2")
    r["dotdot_is_d2"] = _ino("d2/sub/..") == _ino("d2")
    r["inner"] = rd("d2/sub/inner")
    r["old_gone"] = [exists("d1/f"), exists("d1/sub")]
    return r


@check
def rename_replace_file():
    """rename onto an existing file replaces it atomically; open fds keep the old file."""
    r = {}
    wr("a", b"AAAA")
    wr("b", b"BBBBBBBB")
    ino_a = _ino("a")
    fd = os.open("b", os.O_RDONLY)
    r["rename"] = E(os.rename, "a", "b")
    r["b_content"] = rd("b")
    r["b"] = S("b")
    r["ino_follows"] = _ino("b") == ino_a
    r["old_fd_reads_old"] = os.pread(fd, 100, 0)
    r["old_fd_nlink"] = os.fstat(fd).st_nlink
    os.close(fd)
    r["listdir"] = sorted(os.listdir("."))
    wr("c", b"C")
    os.link("c", "c2")
    r["replace_linked"] = E(os.rename, "b", "c")
    r["c2"] = S("c2")
    r["c2_content"] = rd("c2")
    return r


@check
def rename_replace_empty_dir():
    """rename of a directory onto an empty directory replaces it."""
    r = {}
    os.mkdir("x")
    wr("x/f", b"f")
    os.mkdir("y")
    ino = _ino("x")
    r["rename"] = E(os.rename, "x", "y")
    r["ino_follows"] = _ino("y") == ino
    r["y_list"] = os.listdir("y")
    r["x_exists"] = exists("x")
    r["parent"] = S(".")
    os.mkdir("p")
    os.mkdir("p/empty")
    os.mkdir("q")
    r["across"] = E(os.rename, "q", "p/empty")
    r["p"] = S("p")
    r["root"] = S(".")
    return r


@check
def rename_onto_nonempty_dir():
    """rename of a directory onto a non-empty directory is ENOTEMPTY."""
    os.mkdir("x")
    os.mkdir("y")
    wr("y/f", b"f")
    return {"rename": E(os.rename, "x", "y"), "y": sorted(os.listdir("y")), "x": exists("x"),
            "renameat2_noreplace": E(renameat2, "x", "y", RENAME_NOREPLACE)}


@check
def rename_dir_onto_file():
    """rename of a directory onto a file is ENOTDIR."""
    os.mkdir("d")
    wr("f", b"f")
    return {"rename": E(os.rename, "d", "f"), "f": S("f"), "d": S("d")}


@check
def rename_file_onto_dir():
    """rename of a file onto a directory is EISDIR (empty or not)."""
    os.mkdir("d")
    os.mkdir("e")
    wr("e/x", b"")
    wr("f", b"f")
    return {"empty": E(os.rename, "f", "d"), "nonempty": E(os.rename, "f", "e"),
            "f": S("f"), "d": S("d")}


@check
def rename_into_own_subdir():
    """rename of a directory into itself or its subtree is EINVAL."""
    os.makedirs("a/b/c")
    return {"into_grandchild": E(os.rename, "a", "a/b/c/x"), "into_child": E(os.rename, "a", "a/x"),
            "onto_child": E(os.rename, "a", "a/b"), "parent_onto_dot": E(os.rename, "a/b", "a/b/."),
            "tree": sorted(os.listdir("a")) + sorted(os.listdir("a/b"))}


@check
def rename_to_itself():
    """rename to the same name, or onto a hard link of itself, is a successful no-op."""
    r = {}
    wr("a", b"a")
    os.mkdir("d")
    r["file"] = E(os.rename, "a", "a")
    r["a"] = S("a")
    r["dir"] = E(os.rename, "d", "d")
    r["d"] = S("d")
    os.link("a", "h")
    r["onto_hardlink"] = E(os.rename, "a", "h")
    r["both_exist"] = [exists("a"), exists("h")]
    r["nlink"] = os.stat("a").st_nlink
    r["noreplace_self"] = E(renameat2, "a", "a", RENAME_NOREPLACE)
    return r


@check
def renameat2_noreplace():
    """renameat2 RENAME_NOREPLACE: EEXIST onto an existing name, a plain rename otherwise."""
    r = {}
    wr("a", b"A")
    wr("b", b"B")
    ino = _ino("a")
    r["onto_existing"] = E(renameat2, "a", "b", RENAME_NOREPLACE)
    r["contents"] = [rd("a"), rd("b")]
    r["to_new"] = E(renameat2, "a", "c", RENAME_NOREPLACE)
    r["ino_follows"] = _ino("c") == ino
    r["listdir"] = sorted(os.listdir("."))
    os.mkdir("d")
    r["onto_dir"] = E(renameat2, "c", "d", RENAME_NOREPLACE)
    os.symlink("nowhere", "dangling")
    r["onto_dangling_symlink"] = E(renameat2, "c", "dangling", RENAME_NOREPLACE)
    r["bad_flags"] = E(renameat2, "c", "e", RENAME_NOREPLACE | RENAME_EXCHANGE)
    return r


@check
def renameat2_exchange_files():
    """renameat2 RENAME_EXCHANGE swaps two files atomically (inodes swap too)."""
    r = {}
    wr("a", b"AAA")
    wr("b", b"BBBBB")
    ia, ib = _ino("a"), _ino("b")
    r["exchange"] = E(renameat2, "a", "b", RENAME_EXCHANGE)
    r["contents"] = [rd("a"), rd("b")]
    r["inos_swapped"] = [_ino("a") == ib, _ino("b") == ia]
    r["missing"] = E(renameat2, "a", "nope", RENAME_EXCHANGE)
    os.mkdir("d")
    wr("d/c", b"CC")
    r["across_dirs"] = E(renameat2, "a", "d/c", RENAME_EXCHANGE)
    r["after_across"] = [rd("a"), rd("d/c")]
    r["self"] = E(renameat2, "a", "a", RENAME_EXCHANGE)
    return r


@check
def renameat2_exchange_file_dir():
    """renameat2 RENAME_EXCHANGE of a file and a directory (also across parents)."""
    r = {}
    wr("f", b"file")
    os.mkdir("d")
    wr("d/child", b"c")
    r["exchange"] = E(renameat2, "f", "d", RENAME_EXCHANGE)
    r["f"] = S("f")
    r["d"] = S("d")
    r["f_list"] = E(os.listdir, "f")
    r["d_content"] = rd("d")
    r["root"] = S(".")
    os.mkdir("p1")
    os.mkdir("p2")
    os.mkdir("p1/sub")
    wr("p2/file", b"x")
    r["across"] = E(renameat2, "p1/sub", "p2/file", RENAME_EXCHANGE)
    r["p1"] = S("p1")
    r["p2"] = S("p2")
    r["p1_file"] = S("p1/sub")
    r["p2_dir"] = S("p2/file")
    r["dotdot"] = _ino("p2/file/..") == _ino("p2")
    return r


# ==========================================================================
# links

@check
def hard_links():
    """link: nlink counts, ctime, shared data, EPERM on a directory, EEXIST."""
    r = {}
    wr("a", b"data")
    r["link"] = E(os.link, "a", "b")
    r["a"] = S("a")
    r["same_ino"] = _ino("a") == _ino("b")
    t0 = T("a")
    tick()
    os.link("a", "c")
    r["link_times"] = trel(t0, T("a"))
    r["nlink3"] = os.stat("b").st_nlink
    wr("b", b"changed via b", flags=os.O_WRONLY | os.O_TRUNC)
    r["a_sees_write"] = rd("a")
    t0 = T("c")
    tick()
    os.unlink("a")
    r["unlink_times"] = trel(t0, T("c"))
    r["after_unlink"] = S("b")
    r["data_kept"] = rd("c")
    os.mkdir("d")
    r["link_dir"] = E(os.link, "d", "dlink")
    r["link_existing"] = E(os.link, "b", "c")
    r["link_into_missing"] = E(os.link, "b", "nodir/x")
    os.symlink("b", "sym")
    r["link_symlink_nofollow"] = E(os.link, "sym", "hsym", follow_symlinks=False)
    r["hsym"] = S("hsym", follow=False)
    r["link_symlink_follow"] = E(os.link, "sym", "hfollow", follow_symlinks=True)
    r["hfollow"] = S("hfollow", follow=False)
    r["final_nlink"] = os.stat("b").st_nlink
    return r


@check
def symlink_readlink():
    """symlink/readlink: dangling links, link to dir, long targets, EEXIST, EINVAL."""
    r = {}
    r["symlink"] = E(os.symlink, "target_file", "l")
    r["readlink"] = os.readlink("l")
    r["lstat"] = S("l", follow=False)
    r["stat_dangling"] = S("l")
    r["creat_through_dangling"] = opened("l", os.O_WRONLY | os.O_CREAT)
    r["target_created"] = S("target_file")
    wr("target_file", b"through")
    r["read_through"] = rd("l")
    os.mkdir("d")
    wr("d/x", b"in dir")
    os.symlink("d", "ld")
    r["path_through_dir_link"] = rd("ld/x")
    r["listdir_through"] = os.listdir("ld")
    r["abs_target"] = E(os.symlink, "/nonexistent/abs/path", "la")
    r["readlink_abs"] = os.readlink("la")
    r["long_target"] = E(os.symlink, "x" * 4095, "llong")
    r["readlink_long"] = E(lambda: len(os.readlink("llong")))
    r["too_long_target"] = E(os.symlink, "x" * 4096, "ltoolong")
    r["existing"] = E(os.symlink, "whatever", "l")
    r["readlink_file"] = E(os.readlink, "target_file")
    r["readlink_dir"] = E(os.readlink, "d")
    r["empty_target"] = E(os.symlink, "", "lempty")
    r["nofollow_open"] = opened("l", os.O_RDONLY | os.O_NOFOLLOW)
    r["unlink_link_keeps_target"] = [E(os.unlink, "l"), exists("target_file")]
    return r


@check
def symlink_loops():
    """Symlink loops and over-long chains are ELOOP; lstat still works."""
    r = {}
    os.symlink("b", "a")
    os.symlink("a", "b")
    os.symlink("self", "self")
    r["open"] = opened("a", os.O_RDONLY)
    r["stat"] = S("a")
    r["lstat"] = S("a", follow=False)
    r["self"] = S("self")
    r["creat"] = opened("self", os.O_WRONLY | os.O_CREAT)
    r["path_through"] = S("a/x")
    wr("target", b"end")
    prev = "target"
    for i in range(41):
        os.symlink(prev, "c%02d" % i)
        prev = "c%02d" % i
    r["chain40"] = rd("c39")
    r["chain41"] = rd("c40")
    return r


@check
def lstat_vs_stat():
    """lstat describes the link, stat its target (file, dir, fifo)."""
    r = {}
    wr("f", b"12345")
    os.mkdir("d")
    os.mkfifo("p")
    for t in ("f", "d", "p"):
        os.symlink(t, "l" + t)
        r["stat_" + t] = S("l" + t)
        r["lstat_" + t] = S("l" + t, follow=False)
    fd = os.open("lf", os.O_RDONLY)
    r["fstat_through_link_eq_stat"] = FS(fd) == S("f")
    os.close(fd)
    return r


# ==========================================================================
# directories and special files

@check
def mkdir_rmdir():
    """mkdir/rmdir errors and directory nlink = 2 + subdirectories."""
    r = {}
    r["mkdir"] = E(os.mkdir, "p", 0o750)
    r["p"] = S("p")
    r["exists"] = E(os.mkdir, "p")
    wr("f", b"")
    r["over_file"] = E(os.mkdir, "f")
    for s in ("a", "b", "c"):
        os.mkdir("p/" + s)
    wr("p/file", b"")
    r["nlink_3_subdirs"] = os.stat("p").st_nlink
    r["rmdir_nonempty"] = E(os.rmdir, "p")
    r["rmdir_file"] = E(os.rmdir, "f")
    r["rmdir_dot"] = E(os.rmdir, "p/a/.")
    r["rmdir_dotdot"] = E(os.rmdir, "p/a/..")
    r["unlink_dir"] = E(os.unlink, "p/a")
    r["rmdir"] = E(os.rmdir, "p/a")
    r["nlink_after_rmdir"] = os.stat("p").st_nlink
    r["root_nlink"] = os.stat(".").st_nlink
    r["sticky_mode"] = [E(os.mkdir, "s", 0o1777), S("s")]
    r["trailing_slash"] = [E(os.mkdir, "t/"), S("t"), E(os.rmdir, "t/")]
    r["rmdir_symlink_to_dir"] = [E(os.symlink, "p", "lp"), E(os.rmdir, "lp")]
    return r


@check
def mknod_fifo():
    """mkfifo makes a FIFO that behaves like one (ENXIO, data flows)."""
    r = {}
    r["mkfifo"] = E(os.mkfifo, "p", 0o640)
    r["stat"] = S("p")
    r["again"] = E(os.mkfifo, "p")
    r["wr_nonblock_no_reader"] = opened("p", os.O_WRONLY | os.O_NONBLOCK)
    rfd = os.open("p", os.O_RDONLY | os.O_NONBLOCK)
    wfd = os.open("p", os.O_WRONLY | os.O_NONBLOCK)
    os.write(wfd, b"through the pipe")
    r["read"] = os.read(rfd, 100)
    r["empty_read"] = E(os.read, rfd, 10)
    os.close(wfd)
    os.close(rfd)
    r["mknod_fifo"] = E(os.mknod, "q", stat.S_IFIFO | 0o600)
    r["q"] = S("q")
    r["mknod_reg"] = E(os.mknod, "reg", stat.S_IFREG | 0o600)
    r["reg"] = S("reg")
    return r


@check
def mknod_socket():
    """Binding an AF_UNIX socket makes a socket file that can be connected to."""
    r = {}
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind("s")
    srv.listen(1)
    r["stat"] = S("s")
    cli = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    r["connect"] = E(cli.connect, "s")
    conn, _ = srv.accept()
    cli.sendall(b"ping")
    r["recv"] = conn.recv(10)
    for s in (conn, cli, srv):
        s.close()
    r["still_there"] = S("s")
    srv2 = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    r["rebind"] = E(srv2.bind, "s")
    srv2.close()
    r["open"] = opened("s", os.O_RDONLY)
    r["unlink"] = E(os.unlink, "s")
    return r


@check(root=True)
def mknod_devices():
    """mknod of character and block device nodes keeps type and rdev."""
    r = {}
    r["chr"] = E(os.mknod, "c", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    r["chr_stat"] = S("c")
    r["blk"] = E(os.mknod, "b", stat.S_IFBLK | 0o600, os.makedev(7, 200))
    r["blk_stat"] = S("b")
    return r


# ==========================================================================
# readdir

@check
def readdir_5000():
    """A directory of 5,000 entries lists exactly those names."""
    r = {}
    os.mkdir("d")
    names = ["file-%05d-%s" % (i, "x" * (i % 37)) for i in range(5000)]
    for n in names:
        os.close(os.open("d/" + n, os.O_WRONLY | os.O_CREAT, 0o644))
    got = os.listdir("d")
    r["count"] = len(got)
    r["exact"] = sorted(got) == sorted(names)
    r["no_dots"] = "." not in got and ".." not in got
    fd = os.open("d", os.O_RDONLY | os.O_DIRECTORY)
    raw = [e[0] for e in getdents_all(fd, 4096)]
    os.close(fd)
    r["raw_count"] = len(raw)
    r["raw_unique"] = len(set(raw)) == len(raw)
    r["scandir_count"] = sum(1 for _ in os.scandir("d"))
    r["nlink"] = os.stat("d").st_nlink
    for n in names[::2]:
        os.unlink("d/" + n)
    r["after_unlink_exact"] = sorted(os.listdir("d")) == sorted(names[1::2])
    return r


@check
def readdir_dot_dotdot():
    """Raw readdir returns '.' and '..' once each; os.listdir hides them."""
    r = {}
    os.mkdir("e")
    os.mkdir("d")
    wr("d/a", b"")
    os.mkdir("d/b")
    for d in ("e", "d"):
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        ents = getdents_all(fd)
        os.close(fd)
        r[d + "_raw"] = sorted(n for n, _, _ in ents)
        r[d + "_listdir"] = sorted(os.listdir(d))
    r["dot_is_self"] = _ino("d/.") == _ino("d")
    r["dotdot_is_parent"] = _ino("d/..") == _ino(".")
    r["dotdot_of_sub"] = _ino("d/b/..") == _ino("d")
    return r


@check
def readdir_unlink_during():
    """readdir while entries are unlinked and created: no name twice, survivors all seen."""
    r = {}
    os.mkdir("d")
    names = [("entry-%04d-" % i + "p" * 24).encode() for i in range(2000)]
    for n in names:
        os.close(os.open(b"d/" + n, os.O_WRONLY | os.O_CREAT, 0o644))
    fd = os.open("d", os.O_RDONLY | os.O_DIRECTORY)
    seen = [e[0] for e in getdents(fd, 4096)]
    removed = set(names[1::2])
    for n in names[1::2]:
        os.unlink(b"d/" + n)
    for i in range(300):
        os.close(os.open(b"d/new-%04d" % i, os.O_WRONLY | os.O_CREAT, 0o644))
    while True:
        batch = getdents(fd, 4096)
        if not batch:
            break
        seen.extend(e[0] for e in batch)
        if len(seen) > 10000:
            break
    os.close(fd)
    seen = [n for n in seen if n not in (b".", b"..")]
    survivors = set(names) - removed
    r["duplicates"] = sorted(n.decode() for n in set(seen) if seen.count(n) > 1)[:10]
    r["missing_survivors"] = len(survivors - set(seen))
    r["unknown_names"] = sorted(n.decode() for n in set(seen) - set(names)
                                if not n.startswith(b"new-"))[:10]
    r["final_listing_exact"] = sorted(os.listdir(b"d")) == sorted(
        list(survivors) + [b"new-%04d" % i for i in range(300)])
    return r


@check
def readdir_dtype():
    """d_type through os.scandir (and raw getdents when the reference knows it)."""
    r = {}
    wr("f", b"x")
    os.mkdir("d")
    os.symlink("f", "lf")
    os.symlink("d", "ld")
    os.symlink("nowhere", "dangling")
    os.mkfifo("p")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind("sock")
    s.close()
    for e in sorted(os.scandir("."), key=lambda e: e.name):
        r[e.name] = [e.is_dir(follow_symlinks=False), e.is_file(follow_symlinks=False),
                     e.is_symlink(), e.is_dir(), e.is_file()]
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    raw = {n.decode(): t for n, t, _ in getdents_all(fd)}
    os.close(fd)
    if SIDE == "ref" and any(t == 0 for t in raw.values()):
        raise Skip("the reference returns DT_UNKNOWN")
    r["raw_dtypes"] = sorted(raw.items())
    return r


@check
def readdir_seek():
    """Directory offsets: rewind gives the same set, seeking to a d_off resumes after it."""
    r = {}
    os.mkdir("d")
    for i in range(500):
        os.close(os.open("d/n%03d" % i, os.O_WRONLY | os.O_CREAT, 0o644))
    fd = os.open("d", os.O_RDONLY | os.O_DIRECTORY)
    first = getdents_all(fd, 2048)
    os.lseek(fd, 0, os.SEEK_SET)
    second = getdents_all(fd, 2048)
    r["rewind_same_set"] = sorted(n for n, _, _ in first) == sorted(n for n, _, _ in second)
    k = len(first) // 3
    os.lseek(fd, first[k][2], os.SEEK_SET)
    rest = getdents_all(fd, 2048)
    r["resume_exact"] = sorted(n for n, _, _ in rest) == sorted(n for n, _, _ in first[k + 1:])
    os.lseek(fd, first[-1][2], os.SEEK_SET)
    r["after_last"] = getdents(fd)
    os.close(fd)
    r["count"] = len(first)
    return r


# ==========================================================================
# attributes and times

@check
def chmod_modes():
    """chmod/fchmod set all 12 mode bits on files and dirs; ctime changes, mtime does not."""
    r = {}
    wr("f", b"x")
    os.mkdir("d")
    for m in (0o7777, 0o0, 0o4755, 0o2755, 0o1755, 0o640):
        os.chmod("f", m)
        r["f_%o" % m] = S("f")["mode"]
        os.chmod("d", m)
        r["d_%o" % m] = S("d")["mode"]
    t0 = T("f")
    tick()
    os.chmod("f", 0o600)
    r["times"] = trel(t0, T("f"))
    fd = os.open("f", os.O_RDONLY)
    os.fchmod(fd, 0o604)
    os.close(fd)
    r["fchmod"] = S("f")["mode"]
    os.symlink("f", "l")
    os.chmod("l", 0o644)
    r["through_symlink"] = [S("f")["mode"], S("l", follow=False)["mode"]]
    return r


@check(root=True)
def chown_root():
    """chown as root: uid/gid change, -1 keeps, lchown, ctime, setuid/setgid cleared."""
    r = {}
    wr("f", b"x")
    t0 = T("f")
    tick()
    r["chown"] = E(os.chown, "f", 4242, 4343)
    r["times"] = trel(t0, T("f"))
    r["stat"] = S("f")
    os.chown("f", -1, 4344)
    r["gid_only"] = S("f")
    os.chown("f", 4245, -1)
    r["uid_only"] = S("f")
    os.symlink("f", "l")
    os.chown("l", 4000, 4000, follow_symlinks=False)
    r["lchown"] = [S("l", follow=False), S("f")]
    fd = os.open("f", os.O_RDONLY)
    os.fchown(fd, 0, 0)
    os.close(fd)
    r["fchown"] = S("f")
    for m in (0o6755, 0o6745, 0o4711):
        os.chmod("f", m)
        os.chown("f", 4242, 4242)
        r["kill_%o" % m] = S("f")["mode"]
    os.chmod("f", 0o6755)
    os.chown("f", -1, -1)
    r["noop_chown_mode"] = S("f")["mode"]
    os.mkdir("d")
    os.chmod("d", 0o2755)
    os.chown("d", 4242, 4343)
    r["dir_keeps_sgid"] = S("d")
    return r


@check
def utime_ns():
    """os.utime with nanosecond times (past, pre-1970, future) reads back exactly."""
    r = {}
    wr("f", b"x")
    for tag, (a, m) in {"normal": (1234567890123456789, 1111111111222222222),
                        "pre1970": (-1500000000123456789, -1), "y2242": (2 ** 33 * 10 ** 9 + 7, 2 ** 33 * 10 ** 9 + 999999999),
                        "zero": (0, 0)}.items():
        r[tag] = E(os.utime, "f", ns=(a, m))
        st = os.stat("f")
        r[tag + "_readback"] = [st.st_atime_ns == a, st.st_mtime_ns == m]
    os.mkdir("d")
    os.utime("d", ns=(5, 6000000007))
    st = os.stat("d")
    r["dir"] = [st.st_atime_ns, st.st_mtime_ns]
    os.symlink("f", "l")
    os.utime("f", ns=(1, 2))
    r["link_nofollow"] = E(os.utime, "l", ns=(3000000003, 4000000004), follow_symlinks=False)
    lst, fst = os.lstat("l"), os.stat("f")
    r["link_times"] = [lst.st_atime_ns, lst.st_mtime_ns, fst.st_atime_ns, fst.st_mtime_ns]
    fd = os.open("f", os.O_RDONLY)
    os.utime(fd, ns=(10, 20))
    os.close(fd)
    st = os.stat("f")
    r["futimens"] = [st.st_atime_ns, st.st_mtime_ns]
    t0 = T("f")
    tick()
    os.utime("f")
    t1 = T("f")
    r["now"] = [abs(t1[1] - time.time_ns()) < 10 ** 10, rel(t0[2], t1[2])]
    return r


@check
def utimensat_now_omit():
    """utimensat with UTIME_NOW / UTIME_OMIT (ctypes)."""
    r = {}
    wr("f", b"x")
    os.utime("f", ns=(1000000001, 2000000002))
    t0 = T("f")
    tick()
    r["omit_now"] = E(utimensat, "f", (0, UTIME_OMIT), (0, UTIME_NOW))
    t1 = T("f")
    r["atime_kept"] = t1[0] == 1000000001
    r["mtime_now"] = abs(t1[1] - time.time_ns()) < 10 ** 10
    r["ctime"] = rel(t0[2], t1[2])
    tick()
    r["now_omit"] = E(utimensat, "f", (0, UTIME_NOW), (0, UTIME_OMIT))
    t2 = T("f")
    r["mtime_kept"] = t2[1] == t1[1]
    r["atime_now"] = abs(t2[0] - time.time_ns()) < 10 ** 10
    tick()
    r["omit_omit"] = E(utimensat, "f", (0, UTIME_OMIT), (0, UTIME_OMIT))
    t3 = T("f")
    r["omit_omit_unchanged"] = [t3[0] == t2[0], t3[1] == t2[1]]
    r["explicit"] = E(utimensat, "f", (7, 8), (9, UTIME_OMIT))
    t4 = T("f")
    r["explicit_readback"] = [t4[0], t4[1] == t3[1]]
    r["bad_nsec"] = E(utimensat, "f", (0, 1000000000), (0, 0))
    os.symlink("f", "l")
    r["nofollow"] = E(utimensat, "l", (11, 12), (13, 14), AT_SYMLINK_NOFOLLOW)
    r["link_mtime"] = os.lstat("l").st_mtime_ns
    return r


@check
def ctime_updates():
    """ctime moves on chmod, chown, link, unlink, rename, write, truncate, setxattr; not on read."""
    r = {}
    wr("f", b"data")
    ops = [  # (name, operation, the file's name afterwards)
        ("chmod", lambda: os.chmod("f", 0o600), "f"),
        ("chown", lambda: os.chown("f", os.getuid(), os.getgid()), "f"),
        ("link", lambda: os.link("f", "f2"), "f"),
        ("unlink_other_link", lambda: os.unlink("f2"), "f"),
        ("rename", lambda: os.rename("f", "g"), "g"),
        ("rename_back", lambda: os.rename("g", "f"), "f"),
        ("write", lambda: wr("f", b"more", flags=os.O_WRONLY | os.O_APPEND), "f"),
        ("truncate", lambda: os.truncate("f", 2), "f"),
        ("setxattr", lambda: os.setxattr("f", "user.k", b"v"), "f"),
        ("read", lambda: rd("f") and None, "f"),
        ("stat", lambda: os.stat("f") and None, "f"),
        ("open_close", lambda: os.close(os.open("f", os.O_RDWR)), "f"),
    ]
    cur = "f"
    for name, fn, after in ops:
        t0 = T(cur)
        tick()
        res = E(fn)
        r[name] = (res, trel(t0, T(after)))
        cur = after
    return r


@check
def mtime_updates():
    """mtime/ctime move on write, truncate, O_TRUNC, and on the directory when entries change."""
    r = {}
    wr("f", b"data")
    def pwrite():
        fd = os.open("f", os.O_WRONLY)
        os.pwrite(fd, b"x", 1)
        os.close(fd)

    def ftruncate():
        fd = os.open("f", os.O_WRONLY)
        os.ftruncate(fd, 100)
        os.close(fd)
    for name, fn in [("pwrite", pwrite), ("ftruncate", ftruncate),
                     ("o_trunc", lambda: os.close(os.open("f", os.O_WRONLY | os.O_TRUNC))),
                     ("read", lambda: rd("f")),
                     ("chmod", lambda: os.chmod("f", 0o644))]:
        t0 = T("f")
        tick()
        fn()
        r[name] = trel(t0, T("f"))
    os.mkdir("d")
    for name, fn in [("create", lambda: wr("d/x", b"")),
                     ("mkdir", lambda: os.mkdir("d/sub")),
                     ("rename_within", lambda: os.rename("d/x", "d/y")),
                     ("write_child", lambda: wr("d/y", b"abc")),
                     ("chmod_child", lambda: os.chmod("d/y", 0o600)),
                     ("unlink", lambda: os.unlink("d/y")),
                     ("rmdir", lambda: os.rmdir("d/sub")),
                     ("setxattr_dir", lambda: os.setxattr("d", "user.k", b"v")),
                     ("listdir", lambda: os.listdir("d"))]:
        t0 = T("d")
        tick()
        fn()
        r["dir_" + name] = trel(t0, T("d"))
    return r


# ==========================================================================
# permissions, as non-root users in forked children

def _setup_files(spec):
    """spec: {name: (uid, gid, mode)} of small files holding b'data'."""
    for name, (uid, gid, mode) in spec.items():
        wr(name, b"data")
        os.chown(name, uid, gid)
        os.chmod(name, mode)


@check(root=True)
def perm_file_rwx():
    """Owner/group/other read, write and execute bits on files (uid 4242, groups 4242+4343)."""
    owners = {"own": (4242, 1), "grp": (1, 4242), "sup": (1, 4343), "oth": (1, 1)}
    modes = (0o400, 0o200, 0o100, 0o040, 0o020, 0o010, 0o004, 0o002, 0o001, 0o000,
             0o077, 0o707, 0o770, 0o666)
    spec = {"%s_%03o" % (w, m): (u, g, m) for w, (u, g) in owners.items() for m in modes}
    _setup_files(spec)

    def probe():
        return {n: (opened(n, os.O_RDONLY), opened(n, os.O_WRONLY), os.access(n, os.X_OK),
                    os.access(n, os.R_OK | os.W_OK)) for n in sorted(spec)}
    return as_user(probe)


@check(root=True)
def perm_dir_search():
    """Directory read (list), write (create/unlink) and search (lookup) bits."""
    spec = {}
    classes = {"own": ((4242, 1), (0o700, 0o600, 0o500, 0o300, 0o100, 0o400, 0o000, 0o077)),
               "grp": ((1, 4343), (0o070, 0o060, 0o050, 0o030, 0o010, 0o040, 0o000, 0o707)),
               "oth": ((1, 1), (0o007, 0o006, 0o005, 0o003, 0o001, 0o004, 0o000, 0o770))}
    for w, ((u, g), modes) in classes.items():
        for mm in modes:
            name = "%s_%03o" % (w, mm)
            os.mkdir(name)
            wr(name + "/f", b"inside", mode=0o666)
            os.chmod(name + "/f", 0o666)
            os.mkdir(name + "/sub")
            os.chown(name, u, g)
            os.chmod(name, mm)
            spec[name] = mm

    def probe():
        out = {}
        for n in sorted(spec):
            out[n] = {"stat_child": S(n + "/f"), "read_child": rd(n + "/f"),
                      "list": E(lambda: sorted(os.listdir(n))),
                      "create": opened(n + "/new", os.O_WRONLY | os.O_CREAT | os.O_EXCL),
                      "mkdir": E(os.mkdir, n + "/newdir"),
                      "rename": E(os.rename, n + "/f", n + "/f2"),
                      "unlink": E(os.unlink, n + "/f2"),
                      "rmdir": E(os.rmdir, n + "/sub"),
                      "chdir_access": os.access(n, os.X_OK)}
        return out
    return as_user(probe)


@check(root=True)
def perm_supplementary_group():
    """A supplementary group grants the group bits; without it, access is refused."""
    _setup_files({"g060": (0, 4343, 0o060), "g604": (0, 4343, 0o604), "g006": (0, 4343, 0o006)})
    os.mkdir("gd")
    os.chown("gd", 0, 4343)
    os.chmod("gd", 0o070)

    def probe():
        return {n: (opened(n, os.O_RDONLY), opened(n, os.O_WRONLY)) for n in ("g060", "g604", "g006")} | {
            "dir_create": opened("gd/x", os.O_WRONLY | os.O_CREAT), "dir_list": E(os.listdir, "gd")}
    return {"member": as_user(probe, USER_A), "not_member": as_user(probe, USER_A_NOSUP),
            "other_user_member": as_user(probe, (4244, 4244, (4343,))),
            "created": S("gd/x")}


@check(root=True)
def perm_sticky_dir():
    """Sticky 1777 directory: another user cannot unlink, rename or replace your entries."""
    os.mkdir("t")
    os.chmod("t", 0o1777)
    os.mkdir("n")
    os.chmod("n", 0o777)

    def a_setup():
        for d in ("t", "n"):
            wr(d + "/a", b"A", mode=0o666)
            os.chmod(d + "/a", 0o666)
            os.mkdir(d + "/ad")
        return "ok"

    def b_probe():
        return {"unlink": E(os.unlink, "t/a"), "rename_away": E(os.rename, "t/a", "t/b1"),
                "rename_over": [wr("t/mine", b"B"), E(os.rename, "t/mine", "t/a")][1],
                "rmdir": E(os.rmdir, "t/ad"), "write_allowed": opened("t/a", os.O_WRONLY),
                "own_unlink": E(os.unlink, "t/mine"),
                "nonsticky_unlink": E(os.unlink, "n/a"), "nonsticky_rmdir": E(os.rmdir, "n/ad"),
                "listing": sorted(os.listdir("t"))}

    def a_cleanup():
        return {"unlink_own": E(os.unlink, "t/a"), "rmdir_own": E(os.rmdir, "t/ad")}
    r = {"setup": as_user(a_setup, USER_A), "other_user": as_user(b_probe, USER_B),
         "owner": as_user(a_cleanup, USER_A)}
    os.mkdir("bt")
    os.chown("bt", 4244, 4244)
    os.chmod("bt", 0o1777)
    as_user(lambda: wr("bt/a", b"A"), USER_A)
    r["dir_owner_unlinks"] = as_user(lambda: E(os.unlink, "bt/a"), USER_B)
    wr("t/rootfile", b"r")
    r["root_file_by_user"] = as_user(lambda: E(os.unlink, "t/rootfile"), USER_A)
    as_user(lambda: wr("t/ufile", b"u"), USER_A)
    r["root_unlinks_users_file"] = E(os.unlink, "t/ufile")
    return r


@check(root=True)
def perm_setgid_dir():
    """Setgid directory: new files get its group, new subdirs also get the setgid bit."""
    os.mkdir("sg")
    os.chown("sg", 0, 4343)
    os.chmod("sg", 0o2777)
    os.mkdir("plain")
    os.chmod("plain", 0o777)

    def probe():
        wr("sg/file", b"x")
        os.mkdir("sg/sub")
        os.close(os.open("sg/sgidfile", os.O_WRONLY | os.O_CREAT, 0o2755))
        wr("plain/file", b"x")
        os.mkdir("sg/sub/deeper")
        return {"file": S("sg/file"), "sub": S("sg/sub"), "sgidfile": S("sg/sgidfile"),
                "plain": S("plain/file"), "deeper": S("sg/sub/deeper")}
    os.mkdir("sg2")
    os.chown("sg2", 0, 4343)
    os.chmod("sg2", 0o2777)

    def probe_member():
        os.close(os.open("sg2/sgidfile", os.O_WRONLY | os.O_CREAT, 0o2755))
        return S("sg2/sgidfile")
    wr("sg/rootfile", b"")
    return {"non_member": as_user(probe, USER_B), "member": as_user(probe_member, USER_A),
            "root": S("sg/rootfile")}


@check(root=True)
def perm_chmod_nonowner():
    """chmod by a non-owner is EPERM; setgid is dropped for a non-member owner."""
    _setup_files({"other": (4244, 4244, 0o666), "mine": (4242, 4242, 0o644),
                  "mine_foreign_grp": (4242, 4244, 0o644), "mine_sup_grp": (4242, 4343, 0o644)})

    def probe():
        out = {"chmod_other": E(os.chmod, "other", 0o777)}
        fd = os.open("other", os.O_WRONLY)
        out["fchmod_other"] = E(os.fchmod, fd, 0o777)
        os.close(fd)
        out["chmod_mine"] = E(os.chmod, "mine", 0o4755)
        out["chmod_mine_foreign_grp"] = E(os.chmod, "mine_foreign_grp", 0o2755)
        out["chmod_mine_sup_grp"] = E(os.chmod, "mine_sup_grp", 0o2755)
        out["sticky_file"] = E(os.chmod, "mine", 0o1644)
        return out
    r = as_user(probe)
    r["after"] = {n: S(n)["mode"] for n in ("other", "mine", "mine_foreign_grp", "mine_sup_grp")}
    return r


@check(root=True)
def perm_chown_nonroot():
    """chown by non-root: EPERM to give away or to a foreign group, allowed to an own group."""
    _setup_files({"mine": (4242, 4242, 0o644), "other": (4244, 4244, 0o666), "suid": (4242, 4242, 0o6755)})

    def probe():
        return {"give_away": E(os.chown, "mine", 4244, -1), "foreign_group": E(os.chown, "mine", -1, 4244),
                "own_uid_noop": E(os.chown, "mine", 4242, -1), "sup_group": E(os.chown, "mine", -1, 4343),
                "other_file": E(os.chown, "other", 4242, 4242), "other_noop": E(os.chown, "other", -1, -1),
                "suid_regroup": E(os.chown, "suid", -1, 4343)}
    r = as_user(probe)
    r["after"] = {n: S(n) for n in ("mine", "other", "suid")}
    return r


@check(root=True)
def perm_utime_nonowner():
    """utime by a non-owner: 'now' needs write access, explicit times need ownership."""
    _setup_files({"writable": (4244, 4244, 0o666), "readonly": (4244, 4244, 0o644), "mine": (4242, 4242, 0o444)})

    def probe():
        return {"now_writable": E(os.utime, "writable"), "set_writable": E(os.utime, "writable", ns=(1, 1)),
                "now_readonly": E(os.utime, "readonly"), "set_readonly": E(os.utime, "readonly", ns=(1, 1)),
                "now_mine_ro": E(os.utime, "mine"), "set_mine_ro": E(os.utime, "mine", ns=(5, 5)),
                "omit_now_writable": E(utimensat, "writable", (0, UTIME_OMIT), (0, UTIME_NOW))}
    r = as_user(probe)
    r["mine_mtime"] = os.stat("mine").st_mtime_ns
    return r


@check(root=True)
def perm_setuid_cleared():
    """Writing or truncating a setuid file as non-root clears setuid (and setgid with g+x)."""
    _setup_files({"w_6777": (4242, 4242, 0o6777), "w_2767": (4242, 4242, 0o2767),
                  "own_4755": (4244, 4244, 0o4755), "t_6777": (4242, 4242, 0o6777),
                  "root_4777": (4242, 4242, 0o4777), "ft_6777": (4242, 4242, 0o6777),
                  "chmod_4777": (4244, 4244, 0o4777)})

    def probe():
        out = {}
        for n in ("w_6777", "w_2767"):
            fd = os.open(n, os.O_WRONLY)
            out[n] = os.write(fd, b"x")
            os.close(fd)
        fd = os.open("own_4755", os.O_WRONLY)
        out["own_write"] = os.pwrite(fd, b"y", 2)
        os.close(fd)
        out["t_6777"] = opened("t_6777", os.O_WRONLY | os.O_TRUNC)
        fd = os.open("ft_6777", os.O_WRONLY)
        out["ftruncate"] = E(os.ftruncate, fd, 1)
        os.close(fd)
        return out
    r = as_user(probe, USER_B)
    fd = os.open("root_4777", os.O_WRONLY)
    os.write(fd, b"root")
    os.close(fd)
    r["modes"] = {n: S(n)["mode"] for n in ("w_6777", "w_2767", "own_4755", "t_6777", "root_4777", "ft_6777")}
    return r


@check(root=True)
def perm_root_bypass():
    """Root reads and writes mode-000 files and dirs of other users."""
    _setup_files({"f000": (4242, 4242, 0o000)})
    os.mkdir("d000")
    os.chown("d000", 4242, 4242)
    os.chmod("d000", 0o000)
    r = {"open_rdwr": opened("f000", os.O_RDWR), "read": rd("f000"),
         "create_in_dir": opened("d000/x", os.O_WRONLY | os.O_CREAT),
         "list_dir": E(os.listdir, "d000"), "access_rw": os.access("f000", os.R_OK | os.W_OK),
         "access_x": os.access("f000", os.X_OK), "access_x_dir": os.access("d000", os.X_OK)}
    r["user_denied"] = as_user(lambda: (opened("f000", os.O_RDONLY), E(os.listdir, "d000")))
    return r


@check(root=True)
def perm_exec():
    """exec needs an x bit for everyone; root needs at least one; ETXTBSY while open for writing."""
    if os.statvfs(".").f_flag & os.ST_NOEXEC:
        raise Skip("%s is mounted noexec" % SIDE)
    script = b"#!/bin/sh\nexit 7\n"
    _setup_files({n: (4242, 4242, m) for n, m in
                  {"s755": 0o755, "s644": 0o644, "s100": 0o100, "s010": 0o010, "s001": 0o001, "s500": 0o500}.items()})
    for n in ("s755", "s644", "s100", "s010", "s001", "s500"):
        m = stat.S_IMODE(os.stat(n).st_mode)
        os.chmod(n, 0o600)
        wr(n, script)
        os.chmod(n, m)
    r = {"root": {n: run_exec("./" + n) for n in ("s755", "s644", "s100", "s001")},
         "user": {n: run_exec("./" + n, USER_A) for n in ("s755", "s644", "s100", "s010", "s001", "s500")}}
    wr("busy", script)
    os.chmod("busy", 0o755)
    fd = os.open("busy", os.O_WRONLY)
    r["etxtbsy"] = run_exec("./busy")
    os.close(fd)
    r["after_close"] = run_exec("./busy")
    return r


# ==========================================================================
# xattrs

def _xl(path, follow=True):
    return sorted(n for n in os.listxattr(path, follow_symlinks=follow)
                  if n.startswith(("user.", "trusted.")))


@check
def xattr_user():
    """user.* xattrs: set, get, list, remove, empty values, on files and dirs."""
    r = {}
    wr("f", b"x")
    r["list_empty"] = _xl("f")
    r["set"] = E(os.setxattr, "f", "user.one", b"1")
    r["set2"] = E(os.setxattr, "f", "user.two", b"\x00binary\xff")
    r["set_empty"] = E(os.setxattr, "f", "user.empty", b"")
    r["get"] = [os.getxattr("f", "user.one"), os.getxattr("f", "user.two"), os.getxattr("f", "user.empty")]
    r["list"] = _xl("f")
    r["overwrite"] = E(os.setxattr, "f", "user.one", b"uno")
    r["get_over"] = os.getxattr("f", "user.one")
    r["remove"] = E(os.removexattr, "f", "user.one")
    r["list_after"] = _xl("f")
    r["remove_missing"] = E(os.removexattr, "f", "user.one")
    fd = os.open("f", os.O_RDONLY)
    r["fset"] = E(os.setxattr, fd, "user.fd", b"via fd")
    r["fget"] = os.getxattr(fd, "user.fd")
    os.close(fd)
    os.mkdir("d")
    r["dir_set"] = E(os.setxattr, "d", "user.d", b"dirval")
    r["dir_get"] = os.getxattr("d", "user.d")
    os.symlink("f", "l")
    r["symlink_user_nofollow"] = E(os.setxattr, "l", "user.x", b"1", follow_symlinks=False)
    r["symlink_follow_get"] = os.getxattr("l", "user.two")
    os.link("f", "h")
    r["hardlink_shares"] = os.getxattr("h", "user.two")
    os.rename("f", "g")
    r["after_rename"] = _xl("g")
    r["bad_namespace"] = E(os.setxattr, "g", "bogus.x", b"1")
    r["name_too_long"] = E(os.setxattr, "g", "user." + "n" * 251, b"1")
    r["value_too_big"] = E(os.setxattr, "g", "user.big", b"v" * 65537)
    r["no_name"] = E(os.setxattr, "g", "user.", b"1")
    return r


@check
def xattr_flags():
    """XATTR_CREATE on an existing name is EEXIST, XATTR_REPLACE on a missing one ENODATA."""
    wr("f", b"x")
    return {"create_new": E(os.setxattr, "f", "user.a", b"1", os.XATTR_CREATE),
            "create_existing": E(os.setxattr, "f", "user.a", b"2", os.XATTR_CREATE),
            "replace_missing": E(os.setxattr, "f", "user.b", b"1", os.XATTR_REPLACE),
            "replace_existing": E(os.setxattr, "f", "user.a", b"3", os.XATTR_REPLACE),
            "both": E(os.setxattr, "f", "user.a", b"4", os.XATTR_CREATE | os.XATTR_REPLACE),
            "value": os.getxattr("f", "user.a"), "list": _xl("f")}


@check
def xattr_missing():
    """getxattr of a missing name is ENODATA; of a missing file ENOENT."""
    wr("f", b"x")
    return {"missing": E(os.getxattr, "f", "user.nope"), "missing_file": E(os.getxattr, "nofile", "user.x"),
            "remove_missing": E(os.removexattr, "f", "user.nope")}


@check
def xattr_large_value():
    """A 4000-byte xattr value round-trips; getxattr(size 0) reports the length, a small buffer ERANGE."""
    wr("f", b"x")
    v = rand(4000, 9)
    return {"set": E(os.setxattr, "f", "user.big", v), "get": os.getxattr("f", "user.big") == v,
            "size_query": E(getxattr_raw, "f", "user.big", 0),
            "small_buffer": E(getxattr_raw, "f", "user.big", 10),
            "exact_buffer": E(getxattr_raw, "f", "user.big", 4000),
            "shrink": [E(os.setxattr, "f", "user.big", b"s"), os.getxattr("f", "user.big")]}


@check(root=True)
def xattr_trusted():
    """trusted.* as root works; a non-root user gets EPERM writing, ENODATA reading."""
    wr("f", b"x")
    os.chmod("f", 0o666)
    r = {"set": E(os.setxattr, "f", "trusted.t", b"secret"), "get": os.getxattr("f", "trusted.t"),
         "list": _xl("f"), "user_set": E(os.setxattr, "f", "user.u", b"1")}
    r["as_user"] = as_user(lambda: {"get": E(os.getxattr, "f", "trusted.t"),
                                    "set": E(os.setxattr, "f", "trusted.u", b"1"),
                                    "list": _xl("f"), "user_get": E(os.getxattr, "f", "user.u"),
                                    "user_set_writable": E(os.setxattr, "f", "user.v", b"2")})
    os.chmod("f", 0o644)
    r["as_user_readonly"] = as_user(lambda: E(os.setxattr, "f", "user.w", b"3"))
    r["remove"] = E(os.removexattr, "f", "trusted.t")
    return r


# ==========================================================================
# statfs, mmap, locks

@check
def statfs_sane():
    """statvfs: f_bsize > 0 and f_namemax == 255 (numbers are not compared)."""
    st = os.statvfs(".")
    fd = os.open(".", os.O_RDONLY)
    fst = os.fstatvfs(fd)
    os.close(fd)
    return {"bsize_positive": st.f_bsize > 0, "frsize_positive": st.f_frsize > 0,
            "namemax": st.f_namemax, "fstatvfs_namemax": fst.f_namemax,
            "missing": E(os.statvfs, "nope")}


@check(isolate=True)
def mmap_shared_write():
    """Writes through a MAP_SHARED mapping reach the file (msync, then read())."""
    r = {}
    wr("f", rand(3 * 4096 + 100, 10))
    t0 = T("f")
    tick()
    fd = os.open("f", os.O_RDWR)
    mm = mmap.mmap(fd, 0)
    mm[4000:4200] = b"M" * 200
    mm[-10:] = b"0123456789"
    r["read_before_msync"] = os.pread(fd, 10, 4096)
    mm.flush()
    mm.close()
    os.close(fd)
    r["content"] = dg(rd("f"))
    r["region"] = rd("f")[3990:4210]
    r["tail"] = rd("f")[-12:]
    r["times"] = trel(t0, T("f"))
    fd = os.open("g", os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, 10000)
    mm = mmap.mmap(fd, 10000)
    mm[9990:10000] = b"end-of-map"
    mm.flush()
    mm.close()
    os.close(fd)
    r["extended"] = [os.stat("g").st_size, rd("g")[9980:]]
    return r


@check(isolate=True)
def mmap_read():
    """Reading a file through mmap (and seeing later write()s) and MAP_PRIVATE isolation."""
    r = {}
    data = rand(5 * 4096 + 1, 11)
    wr("f", data)
    fd = os.open("f", os.O_RDWR)
    mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    r["whole"] = mm[:] == data
    r["slice"] = mm[4090:4102]
    r["len"] = len(mm)
    os.pwrite(fd, b"LATER", 100)
    r["sees_later_write"] = mm[100:105]
    mm.close()
    pm = mmap.mmap(fd, 0, access=mmap.ACCESS_COPY)
    pm[0:4] = b"PRIV"
    r["private_view"] = pm[0:4]
    pm.close()
    os.close(fd)
    r["file_unchanged_by_private"] = rd("f")[0:4] == data[0:4]
    return r


@check
def flock_conflicts():
    """flock: exclusive/shared with LOCK_NB between separate open file descriptions and processes."""
    r = {}
    wr("f", b"lock")
    fd1 = os.open("f", os.O_RDWR)

    def probe(op):
        def fn():
            fd = os.open("f", os.O_RDWR)
            return E(fcntl.flock, fd, op | fcntl.LOCK_NB)
        return in_child(fn)
    r["ex"] = E(fcntl.flock, fd1, fcntl.LOCK_EX)
    r["child_ex"] = probe(fcntl.LOCK_EX)
    r["child_sh"] = probe(fcntl.LOCK_SH)
    fd2 = os.open("f", os.O_RDWR)
    r["same_process_other_ofd"] = E(fcntl.flock, fd2, fcntl.LOCK_EX | fcntl.LOCK_NB)
    r["to_sh"] = E(fcntl.flock, fd1, fcntl.LOCK_SH)
    r["child_sh_on_sh"] = probe(fcntl.LOCK_SH)
    r["child_ex_on_sh"] = probe(fcntl.LOCK_EX)
    r["fd2_sh"] = E(fcntl.flock, fd2, fcntl.LOCK_SH | fcntl.LOCK_NB)
    r["un"] = [E(fcntl.flock, fd1, fcntl.LOCK_UN), E(fcntl.flock, fd2, fcntl.LOCK_UN)]
    r["child_ex_free"] = probe(fcntl.LOCK_EX)
    fcntl.flock(fd1, fcntl.LOCK_EX)
    os.close(fd1)
    r["released_on_close"] = probe(fcntl.LOCK_EX)
    os.close(fd2)
    return r


def _getlk(fd, typ, start, length):
    raw = fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack("hhqqi4x", typ, os.SEEK_SET, start, length, 0))
    t, _w, s, ln, pid = struct.unpack("hhqqi4x", raw)
    names = {fcntl.F_UNLCK: "unlck", fcntl.F_RDLCK: "rdlck", fcntl.F_WRLCK: "wrlck"}
    return (names.get(t, t), s, ln, pid == os.getppid()) if t != fcntl.F_UNLCK else ("unlck",)


@check
def lockf_ranges():
    """POSIX byte-range locks (lockf/F_GETLK) between two processes."""
    r = {}
    wr("f", b"x" * 1000)
    fd = os.open("f", os.O_RDWR)

    def probe(cmd, length, start):
        def fn():
            f = os.open("f", os.O_RDWR)
            return lockerr(E(fcntl.lockf, f, cmd | fcntl.LOCK_NB, length, start))
        return in_child(fn)
    r["lock_0_100"] = E(fcntl.lockf, fd, fcntl.LOCK_EX, 100, 0)
    r["child_100_100"] = probe(fcntl.LOCK_EX, 100, 100)
    r["child_50_10"] = probe(fcntl.LOCK_EX, 10, 50)
    r["child_90_20"] = probe(fcntl.LOCK_EX, 20, 90)
    r["child_sh_overlap"] = probe(fcntl.LOCK_SH, 1, 0)
    r["child_getlk"] = in_child(lambda: _getlk(os.open("f", os.O_RDWR), fcntl.F_WRLCK, 0, 1000))
    r["child_getlk_free"] = in_child(lambda: _getlk(os.open("f", os.O_RDWR), fcntl.F_WRLCK, 500, 10))
    r["unlock_middle"] = E(fcntl.lockf, fd, fcntl.LOCK_UN, 20, 40)
    r["child_in_gap"] = probe(fcntl.LOCK_EX, 20, 40)
    r["child_edge"] = probe(fcntl.LOCK_EX, 1, 60)
    r["whole_file_eof"] = E(fcntl.lockf, fd, fcntl.LOCK_EX, 0, 500)
    r["child_beyond_eof"] = probe(fcntl.LOCK_EX, 10, 5000)
    r["shared"] = E(fcntl.lockf, fd, fcntl.LOCK_UN, 0, 0)
    fcntl.lockf(fd, fcntl.LOCK_SH, 10, 0)
    r["child_sh_on_sh"] = probe(fcntl.LOCK_SH, 10, 0)
    r["child_ex_on_sh"] = probe(fcntl.LOCK_EX, 10, 0)
    os.close(fd)
    return r


@check
def lockf_close_any_fd():
    """Closing any fd of the file drops the process's POSIX locks on it."""
    wr("f", b"x" * 100)
    fd = os.open("f", os.O_RDWR)
    fcntl.lockf(fd, fcntl.LOCK_EX, 10, 0)

    def probe():
        f = os.open("f", os.O_RDWR)
        return lockerr(E(fcntl.lockf, f, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0))
    r = {"held": in_child(probe)}
    os.close(os.open("f", os.O_RDONLY))
    r["after_other_close"] = in_child(probe)
    os.close(fd)
    return r


# ==========================================================================
# names and paths

@check
def name_255():
    """A 255-byte name (ASCII or UTF-8) works everywhere."""
    r = {}
    for tag, n in (("ascii", "a" * 255), ("utf8", "é" * 127 + "z")):
        r[tag + "_bytes"] = len(n.encode())
        r[tag + "_create"] = opened(n, os.O_WRONLY | os.O_CREAT)
        r[tag + "_stat"] = S(n)
        r[tag + "_listed"] = n in os.listdir(".")
        n2 = n[:-1] + "Q"
        r[tag + "_rename"] = E(os.rename, n, n2)
        r[tag + "_mkdir"] = E(os.mkdir, n)
        r[tag + "_symlink"] = E(os.symlink, n2, n[:-1] + "S")
        r[tag + "_unlink"] = E(os.unlink, n2)
    return r


@check
def name_256():
    """A 256-byte name is ENAMETOOLONG for every call."""
    wr("f", b"")
    long = "b" * 256
    return {"create": opened(long, os.O_WRONLY | os.O_CREAT), "open": opened(long, os.O_RDONLY),
            "stat": S(long), "mkdir": E(os.mkdir, long), "rename_to": E(os.rename, "f", long),
            "link_to": E(os.link, "f", long), "symlink_named": E(os.symlink, "f", long),
            "mkfifo": E(os.mkfifo, long), "unlink": E(os.unlink, long),
            "utf8_256": opened("é" * 128, os.O_WRONLY | os.O_CREAT), "in_path": S(long + "/x"),
            "listdir": sorted(os.listdir("."))}


@check
def name_empty():
    """An empty path is ENOENT."""
    return {"open": opened("", os.O_RDONLY), "creat": opened("", os.O_WRONLY | os.O_CREAT),
            "stat": S(""), "mkdir": E(os.mkdir, ""), "unlink": E(os.unlink, ""),
            "rename": E(os.rename, "", "x"), "symlink_empty_name": E(os.symlink, "x", "")}


@check
def path_depth_200():
    """A 200-deep chain of short directories (mkdir -p), a file at the bottom."""
    deep = "/".join(["d"] * 200)
    r = {"makedirs": E(os.makedirs, deep)}
    wr(deep + "/f", b"bottom")
    r["read"] = rd(deep + "/f")
    r["stat"] = S(deep + "/f")
    r["top_nlink"] = os.stat("d").st_nlink
    r["walk_depth"] = sum(1 for _ in os.walk("d"))
    r["rename_bottom"] = E(os.rename, deep + "/f", "top_f")
    r["moved"] = rd("top_f")
    return r


@check
def path_max():
    """Paths of 4095 bytes resolve; 4096 bytes and longer are ENAMETOOLONG."""
    wr("fff", b"found")
    ok = "./" * 2046 + "fff"
    bad = "./" * 2046 + "ffff"
    return {"len_ok": len(ok), "open_4095": rd(ok), "len_bad": len(bad), "open_4096": opened(bad, os.O_RDONLY),
            "open_5000": opened("a/" * 2500, os.O_RDONLY), "creat_5000": opened("a/" * 2499 + "x", os.O_WRONLY | os.O_CREAT),
            "stat_5000": S("x" * 10 + "/y" * 2500), "mkdir_5000": E(os.mkdir, "./" * 2500 + "z")}


@check
def names_bytes():
    """Names are arbitrary bytes: non-UTF-8, newline, NFC vs NFD, case all distinct."""
    names = [b"\xff\xfe", b"a\nb", b" spaced ", b"caf\xc3\xa9", b"cafe\xcc\x81", b"A", b"a", b"-",
             b"\x01\x7f", b"...", b"a:b*c?|<>\\", b"\xe2\x80\x8b", b"tab\there"]
    r = {}
    for n in names:
        wr(n, n)
    r["listing"] = sorted(os.listdir(b".")) == sorted(names)
    r["contents"] = all(rd(n) == n for n in names)
    r["count"] = len(os.listdir(b"."))
    r["rename_nonutf8"] = E(os.rename, b"\xff\xfe", b"\xfe\xff\x80")
    r["mkdir_nonutf8"] = E(os.mkdir, b"dir\xc0")
    r["symlink_nonutf8_target"] = [E(os.symlink, b"\xff\xfe\xfd", b"l"), os.readlink(b"l")]
    r["xattr_value_bytes"] = [E(os.setxattr, b"\xfe\xff\x80", "user.n", b"\xff"), os.getxattr(b"\xfe\xff\x80", "user.n")]
    return r


@check
def names_dots():
    """'.' and '..' cannot be created, removed or renamed."""
    wr("f", b"x")
    return {"mkdir_dot": E(os.mkdir, "."), "mkdir_dotdot": E(os.mkdir, ".."),
            "creat_dot": opened(".", os.O_WRONLY | os.O_CREAT), "unlink_dot": E(os.unlink, "."),
            "rename_dot": E(os.rename, ".", "x"), "rename_onto_dot": E(os.rename, "f", "."),
            "link_dot": E(os.link, "f", "."), "hidden": opened(".hidden", os.O_WRONLY | os.O_CREAT),
            "three_dots": E(os.mkdir, "..."), "listing": sorted(os.listdir("."))}


@check
def cwd_removed():
    """Creating in a directory removed while it is the cwd is ENOENT."""
    def fn():
        os.mkdir("gone")
        os.chdir("gone")
        os.rmdir("../gone")
        return {"creat": opened("x", os.O_WRONLY | os.O_CREAT), "mkdir": E(os.mkdir, "y"),
                "mkfifo": E(os.mkfifo, "p"), "symlink": E(os.symlink, "t", "l"),
                "listdir": E(os.listdir, "."), "nlink": E(lambda: os.stat(".").st_nlink),
                "dotdot_list": E(lambda: "gone" in os.listdir(".."))}
    return in_child(fn)


# ==========================================================================
# runner

def flat(d, prefix=""):
    if isinstance(d, dict):
        out = {}
        for k, v in d.items():
            out.update(flat(v, "%s%s." % (prefix, k)))
        return out
    return {prefix.rstrip("."): d}


def short(v, n=160):
    s = repr(v)
    return s if len(s) <= n else s[:n] + "..."


def run_one(c, base, side):
    global SIDE
    SIDE = side
    d = os.path.join(base, c.name)
    os.mkdir(d)
    os.chmod(d, 0o777)
    os.chdir(d)
    os.umask(0o022)
    try:
        return ("ok", in_child(c.fn) if c.isolate else c.fn())
    except Skip as s:
        return ("skip", str(s))
    except Exception as e:
        return ("crash", describe(e))
    finally:
        os.chdir(base)
        os.umask(0o022)


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reference", help="directory on a local reference file system")
    ap.add_argument("--target", help="directory on the file system under test")
    ap.add_argument("--only", help="comma-separated check names or globs")
    ap.add_argument("--skip", help="comma-separated check names or globs to leave out")
    ap.add_argument("--list", action="store_true", help="list the checks and exit")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directories")
    ap.add_argument("-v", "--verbose", action="store_true", help="print both outcomes of every check")
    a = ap.parse_args()

    def pick(pats, name):
        return any(fnmatch.fnmatchcase(name, p.strip()) for p in pats.split(",") if p.strip())
    checks = [c for c in CHECKS if (not a.only or pick(a.only, c.name)) and not (a.skip and pick(a.skip, c.name))]
    if a.list:
        for c in checks:
            print("%-28s %s%s" % (c.name, c.doc, " [root]" if c.root else ""))
        return 0
    if not a.reference or not a.target:
        ap.error("--reference and --target are required")
    if not checks:
        ap.error("no check matches --only/--skip")
    if SYS_GETDENTS64 is None:
        sys.exit("unsupported architecture %s" % platform.machine())
    ref, tgt = os.path.realpath(a.reference), os.path.realpath(a.target)
    for p in (ref, tgt):
        if not os.path.isdir(p):
            sys.exit("not a directory: %s" % p)
    if ref == tgt:
        sys.exit("--reference and --target must differ")
    is_root = os.geteuid() == 0
    bases = {}
    for side, p in (("ref", ref), ("target", tgt)):
        bases[side] = tempfile.mkdtemp(prefix="posix-suite.", dir=p)
        os.chmod(bases[side], 0o777)
    if is_root:
        # the unprivileged children work from their cwd, but must be able to reach it
        for side, b in bases.items():
            if in_child(lambda: os.access(b, os.X_OK), USER_B) is not True:
                print("warning: uid %d cannot reach %s; permission checks will fail" % (USER_B[0], b))
    else:
        print("not root: skipping checks that need root")
    start = time.monotonic()
    counts = {"ok": 0, "FAIL": 0, "skip": 0, "ERROR": 0}
    cwd0 = os.getcwd()
    try:
        for c in checks:
            if c.root and not is_root:
                counts["skip"] += 1
                print("skip %s: needs root" % c.name)
                continue
            t0 = time.monotonic()
            rs = run_one(c, bases["ref"], "ref")
            if rs[0] == "skip":
                counts["skip"] += 1
                print("skip %s: %s" % (c.name, rs[1]))
                continue
            ts = run_one(c, bases["target"], "target")
            dt = time.monotonic() - t0
            if a.verbose:
                print("  %s (%.2fs)\n    ref:    %r\n    target: %r" % (c.name, dt, rs, ts))
            if rs[0] == "crash":
                counts["ERROR"] += 1
                print("ERROR %s: crashed on the reference: %s" % (c.name, rs[1]))
            elif ts[0] == "skip":
                counts["skip"] += 1
                print("skip %s: %s" % (c.name, ts[1]))
            elif ts == rs:
                counts["ok"] += 1
                print("ok %s%s" % (c.name, " (%.1fs)" % dt if dt > 2 else ""))
            else:
                counts["FAIL"] += 1
                if ts[0] == "crash":
                    print("FAIL %s: target crashed: %s" % (c.name, ts[1]))
                    continue
                fr, ft = flat(rs[1]), flat(ts[1])
                # differing keys present on both sides first, then one-sided ones
                keys = [k for k in fr if k in ft] + [k for k in ft if k not in fr] + [k for k in fr if k not in ft]
                diffs = ["%s: ref=%s target=%s" % (k or "result", short(fr.get(k, "<absent>")), short(ft.get(k, "<absent>")))
                         for k in keys if fr.get(k, "<absent>") != ft.get(k, "<absent>")]
                print("FAIL %s: %s" % (c.name, "; ".join(diffs[:6]) + ("; ... %d more" % (len(diffs) - 6) if len(diffs) > 6 else "")))
            sys.stdout.flush()
    finally:
        os.chdir(cwd0)
        if a.keep:
            print("kept %s and %s" % (bases["ref"], bases["target"]))
        else:
            for b in bases.values():
                shutil.rmtree(b, ignore_errors=True)
                if os.path.exists(b):
                    print("warning: could not remove all of %s" % b)
    total = time.monotonic() - start
    print("%d checks: %d ok, %d failed, %d errors, %d skipped (%.1fs)" % (
        len(checks), counts["ok"], counts["FAIL"], counts["ERROR"], counts["skip"], total))
    return 1 if counts["FAIL"] or counts["ERROR"] else 0


if __name__ == "__main__":
    sys.exit(main())
