#!/usr/bin/env python3
"""Advisory locks across two mounts of one file system: a lock taken
through mount A is seen through mount B (fcntl byte ranges and flock),
a waiting lock in B is granted once A's holder closes, and closing
releases. Usage: locks_two_mounts.py MOUNT_A MOUNT_B (the same file
system). Exits non-zero with a message on the first difference."""
import fcntl, os, sys, time, multiprocessing as mp

a, b = sys.argv[1], sys.argv[2]
name = "locks-%d" % os.getpid()
pa, pb = os.path.join(a, name), os.path.join(b, name)
with open(pa, "wb") as f:
    f.write(b"x" * 100)
deadline = time.time() + 30
while not os.path.exists(pb):
    if time.time() > deadline:
        sys.exit("the file never appeared in mount B")
    time.sleep(0.05)


def holder(path, how, ready, go):
    fd = os.open(path, os.O_RDWR)
    if how == "fcntl":
        fcntl.lockf(fd, fcntl.LOCK_EX, 10, 20)  # bytes 20..29
    else:
        fcntl.flock(fd, fcntl.LOCK_EX)
    ready.set()
    go.wait(30)
    os.close(fd)  # releases


def try_lock(path, how, start=20, length=10):
    fd = os.open(path, os.O_RDWR)
    try:
        if how == "fcntl":
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, length, start)
        else:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except (BlockingIOError, PermissionError):
        return False
    finally:
        os.close(fd)


def waiter(path, out):
    fd = os.open(path, os.O_RDWR)
    fcntl.lockf(fd, fcntl.LOCK_EX, 10, 20)
    out.put(time.time())
    os.close(fd)


failures = []
for how in ("fcntl", "flock"):
    ready, go = mp.Event(), mp.Event()
    p = mp.Process(target=holder, args=(pa, how, ready, go))
    p.start()
    if not ready.wait(30):
        sys.exit(f"{how}: the holder never got its lock")
    if try_lock(pb, how):
        failures.append(f"{how}: mount B took a lock mount A holds")
    if how == "fcntl" and not try_lock(pb, how, start=40):
        failures.append("fcntl: a disjoint range was refused in mount B")
    out = mp.Queue()
    w = None
    if how == "fcntl":
        w = mp.Process(target=waiter, args=(pb, out))
        w.start()
        time.sleep(1.0)
    released = time.time()
    go.set()
    p.join(30)
    if w is not None:
        try:
            got = out.get(timeout=30)
        except Exception:
            got = None
        w.join(30)
        if got is None:
            failures.append("fcntl: the waiting lock in mount B was never granted")
        elif got < released:
            failures.append("fcntl: the waiting lock was granted while A held it")
    t = time.time() + 10
    while not try_lock(pb, how):
        if time.time() > t:
            failures.append(f"{how}: still locked in mount B after A closed")
            break
        time.sleep(0.1)
os.unlink(pa)
if failures:
    print("\n".join(failures))
    sys.exit(1)
print("locks hold across mounts")
