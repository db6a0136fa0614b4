"""How `proxycomp fit` ends: validated and checkpointed at a step boundary, whether it reached trainer.max_steps
or was stopped with Ctrl-C.

Lightning validates (and so checkpoints) only every `val_check_interval` steps, so a run whose length is not a
multiple of it ended without val/bpb or a best checkpoint, and Ctrl-C lost every step since the last one. Setting
`trainer.should_stop` at a step boundary makes Lightning validate before it stops, and the checkpoint callback
saves `last.ckpt` (and the best) there. The first Ctrl-C only asks for that stop; a second one aborts at once.
Under DDP every process gets the signal at its own step, so the handler is installed for one process only.
"""
from __future__ import annotations

import signal
import sys
import threading

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
