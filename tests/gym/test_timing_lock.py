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


def _judge_side(tmp_path, lock: DeviceLock):
    """A judge's handle on a candidate process whose socket end the test plays, asking under a `Turn` of `lock`."""
    from proxycomp.gym_bridge import wire
    from proxycomp.gym_bridge.judge import CandidateProcess, Turn

    mine, theirs = wire.pair()
    pipes = [os.pipe() for _ in range(3)]
    cand = CandidateProcess(mine, pipes[0][0], pipes[1][1], pipes[2][0], str(tmp_path),
                            deadline=time.monotonic() + 10)
    waits: list[float] = []
    cand.turn = Turn(lock, waits.append)
    cand.turn.take()
    os.write(pipes[0][1], b'{"exit": 1}\n')  # what the monitor says once the process is gone
    return cand, theirs, waits


def test_a_request_hands_its_shared_hold_back_while_the_candidate_compiles(tmp_path):
    """A compile under a shared hold would keep another slot's timing waiting for seconds: the candidate process hands
    the hold back (turn messages) and takes it again before it launches; the judge answers 'go' once it holds it."""
    import threading

    from proxycomp.gym_bridge import wire

    path = str(tmp_path / "gpu0.lock")
    cand, theirs, waits = _judge_side(tmp_path, DeviceLock(path))
    other = DeviceLock(path)
    seen: list[str] = []

    def candidate():
        wire.recv(theirs, time.monotonic() + 5)  # the request
        wire.send(theirs, {"turn": "release"})
        time.sleep(0.2)  # compiling
        wire.send(theirs, {"turn": "take"})
        seen.append(wire.recv(theirs, time.monotonic() + 5)[0]["turn"])
        wire.send(theirs, {"ok": True})

    worker = threading.Thread(target=candidate)
    worker.start()
    time.sleep(0.05)
    with pytest.raises(TimeoutError):  # before the release, the request's hold keeps a timing out
        with other.hold(timeout_s=0.02):
            pass
    reply = {}
    asker = threading.Thread(target=lambda: reply.update(cand.ask({"op": "call"})[0]))
    asker.start()
    time.sleep(0.05)
    with other.hold(timeout_s=1.0):  # while it compiles, a timing gets the GPU
        time.sleep(0.3)  # and the candidate's take waits for it
    asker.join(5)
    worker.join(5)
    assert reply == {"ok": True} and seen == ["go"]
    assert cand.turn.held and len(waits) == 2 and waits[1] > 0.05
    with pytest.raises(TimeoutError):  # held again until the request ends
        with other.hold(timeout_s=0.02):
            pass
    cand.turn.release()


def test_turn_messages_are_bounded_and_answered_without_a_hold(tmp_path):
    import threading

    from proxycomp.gym_bridge import judge, wire

    cand, theirs, _ = _judge_side(tmp_path, DeviceLock(str(tmp_path / "gpu0.lock")))
    cand.turn.release()
    cand.turn = None  # an exclusive phase: nothing to hand back, a take is answered at once
    wire.send(theirs, {"turn": "take"})
    wire.send(theirs, {"turn": "noise"})  # not a turn message: the reply, however malformed
    assert cand.ask({"op": "trial"})[0] == {"turn": "noise"}
    assert wire.recv(theirs, time.monotonic() + 1)[0] == {"op": "trial"}
    assert wire.recv(theirs, time.monotonic() + 1)[0] == {"turn": "go"}
    spam = threading.Thread(target=lambda: [wire.send(theirs, {"turn": "release"}) for _ in range(judge.MAX_TURNS + 1)])
    spam.start()
    with pytest.raises(judge.CandidateGone, match="turn messages"):
        cand.ask({"op": "call"})
    spam.join(5)


def test_the_candidate_hands_the_gpu_back_around_tritons_builds(tmp_path, monkeypatch):
    """candidate.py wraps the kernel compile and the launcher build (a kernel's first launch), not every launch."""
    import socket

    from triton.compiler import compiler

    from proxycomp.gym_bridge import candidate, wire

    calls: list[str] = []
    monkeypatch.setattr(compiler, "compile", lambda *a, **k: calls.append("compile") or "kernel")
    monkeypatch.setattr(compiler.CompiledKernel, "_init_handles", lambda kernel: calls.append("handles"))
    import triton.compiler

    monkeypatch.setattr(triton.compiler, "compile", compiler.compile)
    mine, theirs = wire.pair()
    session = candidate.Session.__new__(candidate.Session)  # only what compiling() uses: no launch recorder here
    session.sock, session.handed_back, session.synchronize = mine, False, lambda: None
    candidate._compile_without_the_gpu(session)
    for _ in range(2):  # the judge's side: a 'go' for each take
        wire.send(theirs, {"turn": "go"})
    assert triton.compiler.compile() == "kernel"
    built, fresh = type("K", (), {"module": object()})(), type("K", (), {"module": None})()
    compiler.CompiledKernel._init_handles(built)  # handles built already: no message
    compiler.CompiledKernel._init_handles(fresh)
    assert calls == ["compile", "handles", "handles"]
    turns = [wire.recv(theirs, time.monotonic() + 1)[0]["turn"] for _ in range(4)]
    assert turns == ["release", "take", "release", "take"]
    assert not select.select([theirs], [], [], 0.05)[0]  # nothing for the launch of a built kernel
    socket.socket.close(theirs)


def test_a_candidate_process_judged_alone_starts_without_asking_for_the_lock_its_judge_holds(tmp_path):
    """A retry that runs alone holds the GPU exclusively from its start: its process's warm-up must not wait for the
    shared hold (it would wait for its own judge), while every other process's warm-up launch does."""
    from proxycomp.gym_bridge.config import EvalConfig
    from proxycomp.gym_bridge.judge import Judge

    judge = Judge.__new__(Judge)  # the settings a start request is made of, no processes
    judge.env, judge.device, judge.triton_base, judge.gpu_share = {}, "cuda", None, 0.45
    judge.lock = DeviceLock(str(tmp_path / "gpu0.lock"))
    shared, alone = judge._request(EvalConfig(), alone=False), judge._request(EvalConfig(), alone=True)
    assert shared["timing_lock"] == judge.lock.path and alone["timing_lock"] is None
    assert shared != alone  # so a spare made for shared judging is never used alone


def test_a_spare_forked_long_before_its_job_is_used_if_it_started(tmp_path):
    """A spare is forked when the previous job starts; that job may outlast the start-up allowance (a hung candidate
    runs to its timeout), and the spare, ready long since, is still used rather than discarded."""
    import json

    from proxycomp.gym_bridge import wire
    from proxycomp.gym_bridge.config import EvalConfig
    from proxycomp.gym_bridge.judge import CandidateProcess, Judge

    mine, theirs = wire.pair()
    pipes = [os.pipe() for _ in range(3)]
    spare = CandidateProcess(mine, pipes[0][0], pipes[1][1], pipes[2][0], str(tmp_path),
                             deadline=time.monotonic() - 1000)  # however it was set when forked
    os.write(pipes[0][1], (json.dumps({"pid": 4242, "namespaces": []}) + "\n").encode())  # the monitor's line
    wire.send(theirs, {"ready": True, "layers": ["own-proc"]})
    started = time.monotonic()
    cand = Judge._started(Judge.__new__(Judge), spare, EvalConfig(timeout_s=30))
    assert cand.pid == 4242 and cand.layers == ["own-proc"]
    assert 29 < cand.deadline - started <= 30.5  # its candidate's clock starts now
