"""100 candidates in a row, 20% hostile (segfaults, exits, hangs, sandbox escapes): no result is lost and
every honest candidate scores."""
import time

import pytest

from gym_paths import HACKS, HONEST_RELU, RELU_TASK
from proxycomp.gym_bridge import Candidate, EvalConfig, Evaluator, LocalPool

HOSTILE = ["n_illegal_memory", "o_exit_obfuscated", "process_spawn_runtime", "f_zero_inputs",
           "file_write_outside", "o_system_exit", "l_parameter_output"]
HANGS = 3  # each costs a full wall timeout


@pytest.mark.slow
def test_100_candidates_20_percent_hostile_lose_nothing():
    hostile_codes = {name: (HACKS / f"{name}.py").read_text() for name in HOSTILE + ["m_infinite_loop"]}
    batch, kinds = [], []
    for i in range(100):
        if i % 5 == 4:  # 20 hostile
            n = i // 5
            name = "m_infinite_loop" if n < HANGS else HOSTILE[n % len(HOSTILE)]
            batch.append(Candidate(task=RELU_TASK, code=hostile_codes[name], id=f"{i}:{name}"))
            kinds.append("hostile")
        else:
            batch.append(Candidate(task=RELU_TASK, code=HONEST_RELU, id=f"{i}:honest"))
            kinds.append("honest")
    started = time.monotonic()
    with Evaluator(LocalPool(num_workers=2), EvalConfig(size="cpu", timeout_s=10, correct_trials=2)) as ev:
        results = ev.submit(batch)
    elapsed = time.monotonic() - started
    assert [r.id for r in results] == [c.id for c in batch]
    assert not [r.id for r in results if r.status == "infra_error"]
    bad_honest = [r.to_dict() for r, k in zip(results, kinds)
                  if k == "honest" and not (r.status == "ok" and r.reward == 1.0)]
    assert not bad_honest, bad_honest[:2]
    leaked = [r.id for r, k in zip(results, kinds) if k == "hostile" and (r.reward != 0.0 or r.status == "ok")]
    assert not leaked
    assert sum(r.status == "timeout" for r in results) == HANGS
    print(f"100 candidates in {elapsed:.1f} s")


def _candidate_processes(root: str, everyone: bool = False) -> list[int]:
    """PIDs of the candidate processes under a pool's folder (each runs in its own candidate-* folder); with
    `everyone`, of every process working there (the zygote, judges, monitors and candidates)."""
    import os

    pids = []
    for entry in os.listdir("/proc"):
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except (OSError, ValueError):
            continue
        if cwd.startswith(root) and (everyone or os.path.basename(cwd).startswith("candidate-")):
            pids.append(int(entry))
    return pids


def test_no_gym_process_outlives_a_killed_pool():
    """The process that owns a pool killed (a device call's time limit) while a candidate hangs: the zygote exits,
    the judges die with it, and each monitor kills its candidate, well before the candidate's timeout."""
    import subprocess
    import sys
    from pathlib import Path

    hang = (HACKS / "m_infinite_loop.py").read_text().replace(
        "while True:", "print('hanging', flush=True)\n        while True:")
    script = ("import sys\n"
              "from proxycomp.gym_bridge import Candidate, EvalConfig, Evaluator, LocalPool\n"
              "pool = LocalPool(num_workers=1)\n"
              "print(pool.workdir, flush=True)\n"
              "Evaluator(pool, EvalConfig(size='cpu', timeout_s=300, correct_trials=1)).submit(\n"
              f"    [Candidate(task={RELU_TASK!r}, code=sys.stdin.read(), id='hang')])\n")
    owner = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        owner.stdin.write(hang)
        owner.stdin.close()
        root = owner.stdout.readline().strip()
        deadline = time.monotonic() + 120
        while not any("hanging" in p.read_text() for p in Path(root).glob("judge*/candidate-*/output.log")):
            assert time.monotonic() < deadline and owner.poll() is None, "the candidate never started its loop"
            time.sleep(0.1)
    finally:
        owner.kill()
        owner.wait()
    deadline = time.monotonic() + 20
    while (left := _candidate_processes(root, everyone=True)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"{len(left)} gym processes outlived their pool"


def _the_spare(root: str) -> int:
    """The one candidate process left once a job's own process has been killed: the next job's, started already."""
    deadline = time.monotonic() + 10
    while len(spares := _candidate_processes(root)) != 1 and time.monotonic() < deadline:
        time.sleep(0.05)  # the judged process is being killed
    assert len(spares) == 1, spares
    return spares[0]


def _wait_until_idle(pid: int) -> None:
    """Until the process has used no CPU for half a second: its start done, it waits for its job."""
    def cpu_ticks() -> int:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime

    deadline, last = time.monotonic() + 60, -1
    while (now := cpu_ticks()) != last:
        assert time.monotonic() < deadline, "the spare never stopped starting"
        last = now
        time.sleep(0.5)


def test_a_candidate_process_that_ends_before_it_is_ready_is_the_gyms_failure(tmp_path):
    """A process that ended before it said it was ready never received the candidate's code: its job gets
    infra_error (no verdict; RL masks it), not 'crashed'."""
    import json
    import math
    import os
    from pathlib import Path

    from proxycomp.gym_bridge import wire
    from proxycomp.gym_bridge.config import Job
    from proxycomp.gym_bridge.judge import CandidateProcess, Judge

    def an_ended_process(request: dict, cfg: EvalConfig) -> CandidateProcess:  # forked, then killed at its start
        mine, theirs = wire.pair()
        (status_r, status_w), (lifeline_r, lifeline_w), (report_r, report_w) = os.pipe(), os.pipe(), os.pipe()
        os.write(status_w, b'{"pid": 4242}\n' + json.dumps({"exit": -9}).encode() + b"\n")  # the monitor's lines
        for fd in (status_w, lifeline_r, report_w):
            os.close(fd)
        theirs.close()
        return CandidateProcess(mine, status_r, lifeline_w, report_r, str(tmp_path / "candidate"), deadline=math.inf)

    judge = Judge.__new__(Judge)  # a judge's settings, with its zygote replaced by the fork above
    judge.env, judge.device, judge.triton_base, judge.gpu_share, judge.lock = {}, "cpu", None, 0.0, None
    judge.root, judge.tasks, judge.spare, judge._fork = str(tmp_path), {}, None, an_ended_process
    job = Job(id="x", task="relu", task_source=Path(RELU_TASK).read_text(), code=HONEST_RELU,
              config=EvalConfig(size="cpu"))
    result = judge.run(job)
    assert result.status == "infra_error", result.to_dict()
    assert "ended before it was ready" in result.error and "SIGKILL" in result.error


def test_the_next_candidate_process_starts_ahead_and_a_dead_or_mismatched_one_costs_nothing():
    """Each judge forks the next job's process while it judges the current one; a spare that died before its job
    (killed while it started, or after, while it waited), or was made for other settings, is replaced by a fresh
    process and the candidate loses nothing."""
    import os
    import signal

    pool = LocalPool(num_workers=1)
    config = EvalConfig(size="cpu", timeout_s=30, correct_trials=1)
    with Evaluator(pool, config) as ev:
        assert ev.submit([Candidate(task=RELU_TASK, code=HONEST_RELU, id="first")])[0].status == "ok"
        os.kill(_the_spare(pool.workdir), signal.SIGKILL)
        assert ev.submit([Candidate(task=RELU_TASK, code=HONEST_RELU, id="after a dead spare")])[0].status == "ok"
        spare = _the_spare(pool.workdir)
        _wait_until_idle(spare)
        os.kill(spare, signal.SIGKILL)
        result = ev.submit([Candidate(task=RELU_TASK, code=HONEST_RELU, id="after a spare dead once started")])[0]
        assert result.status == "ok", result.error
        ev.config = EvalConfig(size="cpu", timeout_s=30, correct_trials=1, memory_limit_mb=4096)
        result = ev.submit([Candidate(task=RELU_TASK, code=HONEST_RELU, id="other settings")])[0]
        assert result.status == "ok" and result.reward == 1.0
