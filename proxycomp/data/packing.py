"""Packing serialized documents into fixed windows, and the resumable training stream.

A stream S of symbols (documents one after another) is cut into windows of seq_len + 1 symbols that
overlap by one: window j holds S[j*T : j*T + T + 1], so inputs are its first T symbols and targets its
last T, and every symbol is a target exactly once. Each window restarts positions at 0 for every
document piece in it (a document cut by a window edge continues at position 0 in the next window).

One stream per row. Row k of a batch is window b of stream k, so the rows of a batch come from independent
places in the corpus (one stream would give a batch of consecutive windows: a handful of documents, highly
correlated gradients). Each epoch's seeded permutation of the documents is dealt out to the streams: stream k of
logical worker l (of W, with R rows per batch) takes every (W*R)-th document from position l + W*k. The paper's
code gets diversity from a shuffle buffer of 64 batches over one stream instead; streams per row are our choice
because they keep the schedule step of every window exact and resume without refilling a buffer.

Step of the mixing schedule. A worker does not see the optimizer. It derives the step from the batches
it has produced: DataLoader hands out batches round-robin over workers, so the b-th batch of logical
worker l (of W) is batch b*W + l of this rank, which is the optimizer step when there is no gradient
accumulation (with accumulation, scale total_steps accordingly). A document's view choice uses the step
of the batch whose window it starts in.

Several processes (DDP). Rank r of N with batch B keeps rows r*B..(r+1)*B-1 of the batches one process with
batch N*B would make: every rank's logical worker l builds the same N*B row streams and packs only its own rows.
So N processes train on exactly the windows (and views) of one, the schedule step is the same, and every rank's
cursors are equal (rank 0's checkpoint is valid for all). The price is that each rank compresses every row,
N times the work of its own; add DataLoader workers if that starves a GPU.

Resume. Every batch carries a `stream_cursor` (logical worker, batches done, and per row its first unfinished
document and that document's stream position); that is enough to regenerate every row exactly from there without
redoing any compression. `ProxyDataModule` pops the cursor before the batch reaches the model and saves the latest
one per worker; after a restart worker i plays logical worker (i + batches consumed) mod W so the round-robin
order carries on.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from proxycomp.data.mixing import MixingSchedule, choose_views
from proxycomp.data.pairing import is_whole_pair, max_pair_symbols, paired_contexts
from proxycomp.losses import IGNORE_INDEX
from proxycomp.views import RawView, View, ViewConfig, serialize_views
from proxycomp.vocab import BOS, PAD, RAW_OFFSET, Vocabulary

CURSOR_KEY = "stream_cursor"


def pack_window(pieces: Sequence[np.ndarray], seq_len: int,
                scored_from: Sequence[int] | None = None) -> dict[str, torch.Tensor]:
    """One window from consecutive document pieces (at most seq_len + 1 symbols; the rest is padding).

    Each piece is one document (or the part of one inside this window) and gets its own doc id; the
    padding tail gets one more. A target is ignored where the next symbol is padding or belongs to
    another piece: predicting the next document's ``<bos>`` from this one's ``<eos>`` means nothing.
    `scored_from[k]` ignores piece k's first targets as well (a prompt, or targets another window scored).
    """
    span = seq_len + 1
    total = sum(len(piece) for piece in pieces)
    if total > span:
        raise ValueError(f"pieces hold {total} symbols, more than seq_len + 1 = {span}")
    ids = np.full(span, PAD, dtype=np.int64)
    doc = np.empty(span, dtype=np.int32)
    pos = np.empty(span, dtype=np.int32)
    ignored = np.zeros(span, dtype=bool)  # at target positions: inputs[i] predicts nothing
    at = 0
    for k, piece in enumerate(pieces):
        n = len(piece)
        ids[at : at + n] = piece
        doc[at : at + n] = k
        pos[at : at + n] = np.arange(n, dtype=np.int32)
        if scored_from is not None:
            ignored[at : at + scored_from[k]] = True
        at += n
    doc[at:] = len(pieces)
    pos[at:] = np.arange(span - at, dtype=np.int32)
    targets = ids[1:].copy()
    targets[(doc[1:] != doc[:-1]) | (np.arange(1, span) >= at) | ignored[:-1]] = IGNORE_INDEX
    return {
        "input_ids": torch.from_numpy(ids[:-1]),
        "targets": torch.from_numpy(targets),
        "doc_ids": torch.from_numpy(doc[:-1]),
        "positions": torch.from_numpy(pos[:-1]),
    }


def collate(windows: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {key: torch.stack([w[key] for w in windows]) for key in windows[0]}


class ValWindows(Dataset):
    """Views of held-out documents (raw unless `view` is given), packed in corpus order; deterministic, finite,
    padded at the end."""

    def __init__(self, documents: Sequence[bytes], seq_len: int, max_windows: int | None = None,
                 view: View | None = None):
        view = view or RawView(RAW_OFFSET)
        stream = _ArrayStream(serialize_views([(view.name, view.encode_array(d))]) for d in documents)
        self.windows: list[list[np.ndarray]] = []
        while max_windows is None or len(self.windows) < max_windows:
            pieces = stream.read(seq_len + 1, advance=seq_len)
            if not pieces:
                break
            self.windows.append(pieces)
            if sum(map(len, pieces)) < seq_len + 1:
                break  # the stream ended inside this window
        self.seq_len = seq_len

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return pack_window(self.windows[index], self.seq_len)


class _ArrayStream:
    """Reads a sequence of symbol arrays as one stream, keeping only the arrays not yet passed."""

    def __init__(self, arrays: Iterator[np.ndarray]):
        self._arrays = arrays
        self._queue: deque[np.ndarray] = deque()
        self._offset = 0  # into the queue's first array

    def read(self, count: int, advance: int) -> list[np.ndarray]:
        """Up to `count` symbols from the current position, as pieces split at array boundaries; then move
        `advance` symbols on."""
        pieces, need, k, offset = [], count, 0, self._offset
        while need > 0:
            if k == len(self._queue):
                nxt = next(self._arrays, None)
                if nxt is None:
                    break
                self._queue.append(nxt)
            piece = self._queue[k][offset : offset + need]
            if len(piece):
                pieces.append(piece)
            need -= len(piece)
            k, offset = k + 1, 0
        self._skip(advance)
        return pieces

    def _skip(self, count: int) -> None:
        while count > 0 and self._queue:
            left = len(self._queue[0]) - self._offset
            if count < left:
                self._offset += count
                return
            count -= left
            self._queue.popleft()
            self._offset = 0


@dataclass(frozen=True)
class StreamCursor:
    """Where a logical worker's streams stand after a batch: batches produced (each row's window count), and per
    row the sample counter of its first document not fully passed and that document's position in the row's
    stream."""

    batches: int
    rows: tuple[tuple[int, int], ...] = ()

    def to_list(self) -> list[int]:
        return [self.batches, *(x for row in self.rows for x in row)]

    @classmethod
    def from_list(cls, values: Sequence[int]) -> StreamCursor:
        batches, *rows = (int(v) for v in values)
        return cls(batches, tuple(zip(rows[0::2], rows[1::2])))


def documents_per_epoch(n_documents: int, workers: int, n_rows: int, logical: int, row: int) -> int:
    """How many of an epoch's documents row `row` of logical worker `logical` takes (see the module docstring)."""
    return len(range(logical + workers * row, n_documents, workers * n_rows))


def epochs_passed(n_documents: int, workers: int, n_rows: int, cursors: dict[int, StreamCursor]) -> float:
    """Passes over the documents that the row streams have made by `cursors` (each row's documents passed over its
    share of an epoch, averaged over the rows of every logical worker; a worker with no cursor yet has passed none)."""
    total = 0.0
    for logical in range(workers):
        rows = cursors[logical].rows if logical in cursors else ((0, 0),) * n_rows
        total += sum(n / documents_per_epoch(n_documents, workers, n_rows, logical, k) for k, (n, _) in enumerate(rows))
    return total / (workers * n_rows)


def logical_worker(batches_consumed: int) -> tuple[int, int]:
    """(logical worker, worker count) of the calling DataLoader worker: after `batches_consumed` batches the
    round-robin has moved on, so physical worker i plays logical worker (i + batches_consumed) mod W."""
    info = get_worker_info()
    physical, workers = (info.id, info.num_workers) if info else (0, 1)
    return (physical + batches_consumed) % workers, workers


class _RowStream:
    """One row's stream: documents as their contexts end to end, read a window at a time.

    `sample(n, start)` gives the n-th document of the row (its corpus index and contexts), `start` being its
    position in the stream; documents are drawn as the windows reach them and dropped once passed.
    """

    def __init__(self, sample: Callable[[int, int], tuple[int, list[np.ndarray]]], seq_len: int, window: int,
                 document: int, start: int):
        self.sample, self.seq_len, self.window = sample, seq_len, window
        # (corpus index, sample counter, stream start, stream end, contexts) of documents not yet passed
        self.queue: deque[tuple[int, int, int, int, list[np.ndarray]]] = deque()
        self.next_n, self.next_start = document, start

    def next_window(self) -> list[tuple[int, np.ndarray]]:
        """The next window's pieces, each with the corpus index of its document."""
        lo = self.window * self.seq_len
        hi = lo + self.seq_len + 1
        while self.next_start < hi:
            index, contexts = self.sample(self.next_n, self.next_start)
            end = self.next_start + sum(map(len, contexts))
            self.queue.append((index, self.next_n, self.next_start, end, contexts))
            self.next_n, self.next_start = self.next_n + 1, end
        pieces = []
        for index, _, at, end, contexts in self.queue:
            for context in contexts:
                if at < hi and at + len(context) > lo:
                    pieces.append((index, context[max(lo - at, 0) : hi - at]))
                at += len(context)
        self.window += 1
        while self.queue and self.queue[0][3] <= self.window * self.seq_len:
            self.queue.popleft()
        return pieces

    @property
    def cursor(self) -> tuple[int, int]:
        """(sample counter, stream start) of the first document not fully passed."""
        return (self.queue[0][1], self.queue[0][2]) if self.queue else (self.next_n, self.next_start)


class TrainStream(IterableDataset):
    """An endless stream of mixed-view batches, one stream per row, sharded by DataLoader worker; each rank takes
    its rows.

    Yields whole batches of `batch_size` windows (use ``DataLoader(batch_size=None)``): the worker must know
    batch edges to derive the schedule step. Documents are visited in a fresh seeded permutation each epoch,
    dealt out to the row streams of every worker shard (see the module docstring). Everything is a function of
    (seed, shard, row, sample counter, step), so the stream is reproducible from a `StreamCursor`. `rank` of
    `world_size` processes keeps its rows of the world_size * batch_size-row batches. `drop_views` takes those views'
    symbols out of every window once it is cut (`dropped_ids`), so the stream, its cursors and its schedule are those
    of the run without them.
    """

    def __init__(
        self,
        documents: Sequence[bytes],
        view_config: ViewConfig,
        spm_model: bytes | None,
        schedule: MixingSchedule,
        seq_len: int,
        batch_size: int,
        seed: int,
        batches_consumed: int = 0,
        cursors: dict[int, StreamCursor] | None = None,
        rank: int = 0,
        world_size: int = 1,
        drop_views: Sequence[str] = (),
    ):
        _check_rank(rank, world_size)
        self.documents = documents
        self.view_config = view_config
        self.spm_model = spm_model
        self.schedule = schedule
        self.seq_len = seq_len
        self.batch_size = batch_size
        self.seed = seed
        self.batches_consumed = batches_consumed
        self.cursors = cursors or {}
        self.rank = rank
        self.world_size = world_size
        self.dropped = dropped_ids(view_config.vocabulary(), drop_views)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        for rows, cursor in self.batch_rows():
            out = collate([pack_window([piece for _, piece in row], self.seq_len) for row in rows])
            out[CURSOR_KEY] = torch.tensor(cursor, dtype=torch.int64)
            yield out

    def batch_rows(self) -> Iterator[tuple[list[list[tuple[int, np.ndarray]]], list[int]]]:
        """Per batch: this rank's rows, each a list of (corpus index, piece), and the batch's cursor (the logical
        worker, then `StreamCursor.to_list`)."""
        # Documents are sharded by logical worker, the same on every rank: ranks split batches, not documents.
        logical, workers = logical_worker(self.batches_consumed)
        n_rows = self.batch_size * self.world_size
        streams = workers * n_rows
        if streams > len(self.documents):
            raise ValueError(
                f"{len(self.documents)} train documents cannot feed {workers} loader shards x {n_rows} batch rows "
                f"({streams} streams); lower num_workers or batch_size"
            )
        cursor = self.cursors.get(logical, StreamCursor(0, ((0, 0),) * n_rows))
        if len(cursor.rows) != n_rows:
            raise ValueError(f"the stream cursor holds {len(cursor.rows)} rows, the batch has {n_rows}")
        views = self.view_config.build(self.spm_model)
        compressed = [name for name in self.view_config.names if name != "raw"]
        T = self.seq_len
        mine = range(self.rank * self.batch_size, (self.rank + 1) * self.batch_size)

        @lru_cache(maxsize=4)  # rows drift apart in epochs, by little
        def permutation(epoch: int) -> np.ndarray:
            return np.random.default_rng((self.seed, epoch)).permutation(len(self.documents))

        def row_stream(k: int, document: int, start: int) -> _RowStream:
            first = logical + workers * k
            per_epoch = documents_per_epoch(len(self.documents), workers, n_rows, logical, k)

            def sample(n: int, at: int) -> tuple[int, list[np.ndarray]]:
                epoch, i = divmod(n, per_epoch)
                index = int(permutation(epoch)[first + i * streams])
                mode, r = self.schedule.at((at // T) * workers + logical)  # the step of the window it starts in
                names = choose_views(mode, r, compressed, np.random.default_rng((self.seed, logical, k, n)))
                return index, self.contexts(self.documents[index], [views[name] for name in names])

            return _RowStream(sample, T, cursor.batches, document, start)

        def kept(row: list[tuple[int, np.ndarray]]) -> list[tuple[int, np.ndarray]]:
            if self.dropped is None:
                return row
            return [(index, rest) for index, piece in row if len(rest := piece[~self.dropped[piece]])]

        row_streams = [row_stream(k, *cursor.rows[k]) for k in range(n_rows)]
        while True:
            windows = [stream.next_window() for stream in row_streams]  # every row, to keep every cursor
            state = [logical, row_streams[0].window, *(x for stream in row_streams for x in stream.cursor)]
            yield [kept(windows[k]) for k in mine], state

    def contexts(self, data: bytes, views: Sequence[View]) -> list[np.ndarray]:
        """A document's contexts in the chosen views: one, or aligned chunks of a long paired document."""
        if len(views) > 1 and self.schedule.chunk_pairs:
            return paired_contexts(data, views, max_pair_symbols(self.seq_len))
        return [serialize_views([(view.name, view.encode_array(data)) for view in views])]

    def report(self, batches: int) -> dict[str, float]:
        """Mean distinct documents per batch and the share of rows holding a whole paired context, over this rank's
        first `batches` batches: how diverse the batches are and how often the translation warmup pairs. A document
        counts where it has a target in the batch (a piece of two symbols or more)."""
        documents, paired, rows = 0, 0, 0
        for _, (batch, _) in zip(range(batches), self.batch_rows()):
            documents += len({index for row in batch for index, piece in row if len(piece) > 1})
            paired += sum(any(is_whole_pair(piece) for _, piece in row) for row in batch)
            rows += len(batch)
        return {"batches": batches, "rows": self.batch_size, "documents_per_batch": documents / batches,
                "paired_row_share": paired / rows}


def dropped_ids(vocabulary: Vocabulary, views: Sequence[str]) -> np.ndarray | None:
    """A table over ids, True for the symbols of `views` (their range and sentinels); None when there are none.

    Removing them from a window removes those views' segments whole: a compressed view's symbols have ids of their
    own, so what is left of a paired context ``<bos><raw> x </raw><spm> y </spm><eos>`` is ``<bos><raw> x </raw><eos>``,
    the raw-only context of the same text."""
    if not views:
        return None
    table = np.zeros(vocabulary.size, dtype=bool)
    for view in views:
        ids = vocabulary.range(view)
        table[list(vocabulary.sentinels(view))] = True
        table[ids.start:ids.stop] = True
    return table


class ReplayStream(IterableDataset):
    """A fixed, finite stream of serialized documents (e.g. the raw views another run saw), packed in order.

    Windows are cut as in `TrainStream` (seq_len + 1 symbols overlapping by one, positions restarting at each
    ``<bos>``) and grouped into batches; step s (batch s of one process) goes to worker shard s mod W, so the
    DataLoader's round-robin hands them out in stream order. With `world_size` N, step s is batches s*N..s*N+N-1
    and rank r takes batch s*N + r: the rows one process with N times the batch would hold. One iteration is one
    pass; the last step is padded with empty windows so every step (and every rank) has the same shape and count.
    Batches carry a `stream_cursor` whose batch count lets a resumed run go on.
    """

    def __init__(
        self,
        symbols: np.ndarray,
        seq_len: int,
        batch_size: int,
        batches_consumed: int = 0,
        cursors: dict[int, StreamCursor] | None = None,
        rank: int = 0,
        world_size: int = 1,
    ):
        _check_rank(rank, world_size)
        if len(symbols) < 2 or symbols[0] != BOS:
            raise ValueError("a replay stream must hold at least one serialized document starting with <bos>")
        self.symbols = symbols
        self.seq_len = seq_len
        self.batch_size = batch_size
        self.batches_consumed = batches_consumed
        self.cursors = cursors or {}
        self.rank = rank
        self.world_size = world_size
        self.num_windows = -(-(len(symbols) - 1) // seq_len)
        self._doc_starts = np.flatnonzero(np.asarray(symbols) == BOS)

    @property
    def num_batches(self) -> int:
        """Optimizer steps of one pass (batches of one rank)."""
        return -(-self.num_windows // (self.batch_size * self.world_size))

    def window(self, index: int) -> dict[str, torch.Tensor]:
        lo = index * self.seq_len
        hi = min(lo + self.seq_len + 1, len(self.symbols))
        if lo >= hi:
            return pack_window([], self.seq_len)
        inner = self._doc_starts[(self._doc_starts > lo) & (self._doc_starts < hi)]
        edges = [lo, *inner.tolist(), hi]
        return pack_window([np.asarray(self.symbols[a:b]) for a, b in zip(edges, edges[1:])], self.seq_len)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        logical, workers = logical_worker(self.batches_consumed)
        b = self.cursors.get(logical, StreamCursor(0)).batches
        while (step := b * workers + logical) < self.num_batches:
            first = (step * self.world_size + self.rank) * self.batch_size
            out = collate([self.window(w) for w in range(first, first + self.batch_size)])
            b += 1
            out[CURSOR_KEY] = torch.tensor([logical, *StreamCursor(b).to_list()], dtype=torch.int64)
            yield out


def _check_rank(rank: int, world_size: int) -> None:
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} of world_size {world_size}: need world_size >= 1 and 0 <= rank < world_size")
