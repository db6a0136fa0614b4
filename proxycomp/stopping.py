"""How `proxycomp fit` ends: validated and checkpointed at a step boundary, whether it reached trainer.max_steps
or was stopped with Ctrl-C.

Lightning validates (and so checkpoints) only every `val_check_interval` steps, so a run whose length is not a
multiple of it ended without val/bpb or a best checkpoint, and Ctrl-C lost every step since the last one. Setting
`trainer.should_stop` at a step boundary makes Lightning validate before it stops, and the checkpoint callback
saves `last.ckpt` (and the best) there. The first Ctrl-C only asks for that stop; a second one aborts at once.
Under DDP every process gets the signal at its own step, so the handler is installed for one process only.

Ctrl-C under `proxycomp fit | tee log` also ends tee, and the next line written to the pipe would raise
BrokenPipeError in the middle of the stop; `output_may_close` lets such writes go nowhere instead.
"""
from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import threading
from collections.abc import Iterator

import lightning as L


class StopAtStepBoundary(L.Callback):
    def __init__(self) -> None:
        self.interrupted = False
        self._previous_handler = None
        self._last_step = -1

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._last_step = trainer.global_step
        if trainer.world_size == 1 and threading.current_thread() is threading.main_thread():
            self._previous_handler = signal.signal(signal.SIGINT, self._interrupt)

    def _interrupt(self, signum, frame) -> None:
        self.interrupted = True
        signal.signal(signal.SIGINT, self._previous_handler)  # the next Ctrl-C aborts
        print("\nCtrl-C: stopping after this step, validated and checkpointed (Ctrl-C again aborts)",
              file=sys.stderr, flush=True)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args) -> None:
        # An optimizer step has just ended when the step count moved (not so between accumulated batches).
        at_boundary, self._last_step = trainer.global_step != self._last_step, trainer.global_step
        if at_boundary and (self.interrupted or 0 < trainer.max_steps <= trainer.global_step):
            trainer.should_stop = True

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if signal.getsignal(signal.SIGINT) == self._interrupt:
            signal.signal(signal.SIGINT, self._previous_handler)


def ignore_interrupts(worker_id: int) -> None:
    """A DataLoader worker's init: Ctrl-C reaches every process of the terminal's group, and a worker that died of
    it would leave the stop after this step without its next batch; the main process decides."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _ReaderMayLeave:
    """A stdout or stderr whose reader may go away: from the first write that finds the pipe closed on, its file
    descriptor points to /dev/null, so that writes through any other holder of it (logging handlers) succeed too."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._reader_left()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._reader_left()

    def _reader_left(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        except (OSError, ValueError, io.UnsupportedOperation):  # no descriptor of its own (a captured stream)
            self._stream = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process writes
        finally:
            os.close(devnull)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@contextlib.contextmanager
def output_may_close() -> Iterator[None]:
    """Within the block, a closed stdout or stderr pipe swallows what is written to it instead of raising."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _ReaderMayLeave(sys.stdout), _ReaderMayLeave(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
