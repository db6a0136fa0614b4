"""Workers sharing a GPU: how they are dealt over GPUs, and the lock that keeps their timing apart."""
import os
import select
import signal
import time

import pytest

from proxycomp.gym_bridge.pool import timing_lock_path, worker_devices
from proxycomp.gym_bridge.timing import DeviceLock


def test_workers_are_dealt_round_robin_over_the_gpus():
    assert worker_devices(None, ["0", "1"]) == ["0", "1"]  # default: one per GPU
    assert worker_devices(5, ["2", "3"]) == ["2", "3", "2", "3", "2"]
    assert worker_devices(3, ["0"]) == ["0", "0", "0"]
    assert worker_devices(4, []) == []  # no GPU: CPU slots


def test_lock_files_are_per_gpu_and_safe_names():
    assert timing_lock_path("0") != timing_lock_path("1")
    name = os.path.basename(timing_lock_path("GPU-1a2b/../x"))
    assert "/" not in name and name.endswith(".lock")


def test_a_held_lock_makes_the_other_holder_wait_then_time_out(tmp_path):
    path = str(tmp_path / "gpu0.lock")
    first, second = DeviceLock(path), DeviceLock(path)  # two open descriptions conflict like two processes
    with first.hold(timeout_s=1.0) as waited:
        assert waited < 0.5
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="stayed taken for 0.2 s"):
            with second.hold(timeout_s=0.2):
                pass
        assert time.monotonic() - started >= 0.2
    with second.hold(timeout_s=0.2) as waited:  # released on exit
        assert waited < 0.2


def test_the_lock_dies_with_a_killed_holder(tmp_path):
    path = str(tmp_path / "gpu0.lock")
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a worker killed mid-timing (the pool's timeout) must not leave the GPU locked
        with DeviceLock(path).hold(timeout_s=1.0):
            os.write(ready_w, b"x")
            time.sleep(60)
        os._exit(0)
    os.read(ready_r, 1)
    lock = DeviceLock(path)
    with pytest.raises(TimeoutError):
        with lock.hold(timeout_s=0.1):
            pass
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    with lock.hold(timeout_s=1.0) as waited:
        assert waited < 1.0


def test_sharers_coexist_and_keep_timing_out(tmp_path):
    path = str(tmp_path / "gpu0.lock")
    policy_a, policy_b, worker = DeviceLock(path), DeviceLock(path), DeviceLock(path)
    with policy_a.share():
        with policy_b.share():  # two RL runs' policies may compute side by side
            with pytest.raises(TimeoutError):
                with worker.hold(timeout_s=0.1):
                    pass
        with pytest.raises(TimeoutError):  # one sharer left is enough to keep the timing waiting
            with worker.hold(timeout_s=0.1):
                pass
    with worker.hold(timeout_s=0.2) as waited:
        assert waited < 0.2


def test_a_share_waits_for_a_timing_in_progress(tmp_path):
    path = str(tmp_path / "gpu0.lock")
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a worker timing for 0.3 s
        with DeviceLock(path).hold(timeout_s=1.0):
            os.write(ready_w, b"x")
            time.sleep(0.3)
        os._exit(0)
    os.read(ready_r, 1)
    started = time.monotonic()
    with DeviceLock(path).share():
        waited = time.monotonic() - started
    os.waitpid(pid, 0)
    assert 0.1 < waited < 5.0


def test_a_waiting_timing_goes_before_sharers_that_keep_overlapping(tmp_path):
    """Two sharers that hand the GPU to each other never leave it free; a timing that waits still gets it within one
    share, because new sharers queue behind it (without the gate, the check phases of the other workers starved the
    timing ones on the H200)."""
    path = str(tmp_path / "gpu0.lock")
    stop_r, stop_w = os.pipe()
    pids = []
    for offset in (0.0, 0.1):
        pid = os.fork()
        if pid == 0:  # a worker checking candidates back to back: shares of 0.2 s, the two overlapping
            lock = DeviceLock(path)
            time.sleep(offset)
            while not select.select([stop_r], [], [], 0)[0]:
                with lock.share():
                    time.sleep(0.2)
            os._exit(0)
        pids.append(pid)
    time.sleep(0.5)
    try:
        with DeviceLock(path).hold(timeout_s=5.0) as waited:
            assert waited < 1.0
    finally:
        os.write(stop_w, b"x")
        for pid in pids:
            os.waitpid(pid, 0)
