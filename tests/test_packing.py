"""Mixing schedule and view choice, window packing, and the sharded, resumable training stream."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from proxycomp.data import (
    CURSOR_KEY, MixingSchedule, ScheduleError, StreamCursor, TrainStream, ValWindows, choose_views,
    compressed_only_probability, pack_window,
)
from proxycomp.data.pairing import is_whole_pair, max_pair_symbols, paired_contexts
from proxycomp.losses import IGNORE_INDEX
from proxycomp.views import ViewConfig, serialize_views, train_spm
from proxycomp.vocab import BOS, EOS, PAD, SENTINELS

DOCS = [(f"def f{i}():\n    return {i}\n" * (1 + i % 5)).encode() for i in range(24)]


def long_documents(n: int) -> list[bytes]:
    """Code files of 2-20 KB (python-sources' mean is ~15 KB), with non-ASCII text and a long line in each."""
    docs = []
    for i in range(n):
        line = f"    total_{i} = compute(value, {i}) + offset  # é ü ✓ {i}\n"
        body = f"def function_{i}(value, offset):\n" + line * (40 + (i * 37) % 360) + "x = '" + "ab" * 300 + "'\n"
        docs.append(body.encode())
    return docs


def test_paper_schedule_ramps_then_switches_to_sentinel():
    s = MixingSchedule("paper", r_start=0.4, r_peak=0.9, warmup_frac=0.2, total_steps=100)
    assert s.at(0) == ("translation_random", 0.4)
    assert s.at(10)[0] == "translation_random" and s.at(10)[1] == pytest.approx(0.65)
    assert s.at(20) == ("sentinel", 0.9) and s.at(99) == ("sentinel", 0.9)
    assert MixingSchedule("sentinel", total_steps=100).at(0) == ("sentinel", 0.9)
    assert MixingSchedule("byte").at(0) == ("sentinel", 0.0)
    for bad in (dict(kind="cosine"), dict(r_peak=1.5), dict(total_steps=0)):
        with pytest.raises(ScheduleError):
            MixingSchedule(**bad)


@pytest.mark.parametrize("r", [0.2, 0.4, 0.5, 0.65, 0.9])
@pytest.mark.parametrize("mode", ["sentinel", "translation_random"])
def test_r_is_the_fraction_of_compressed_views(mode, r):
    rng = np.random.default_rng(0)
    choices = [choose_views(mode, r, ["spm"], rng) for _ in range(20_000)]
    views = [name for c in choices for name in c]
    assert views.count("spm") / len(views) == pytest.approx(r, abs=0.015)
    paired = [c for c in choices if len(c) == 2]
    if mode == "sentinel":
        assert not paired
    else:
        assert paired and {tuple(c) for c in paired} == {("raw", "spm"), ("spm", "raw")}


def test_calibration_formulas_match_the_papers_code():
    assert compressed_only_probability(0.9) == pytest.approx(2 - 1 / 0.9)
    assert compressed_only_probability(0.4) == pytest.approx(0.4 / 0.6)
    assert choose_views("translation_random", 0.9, [], np.random.default_rng(0)) == ["raw"]


def test_pack_window_ids_positions_and_ignored_targets():
    w = pack_window([np.array([7, 8, 9]), np.array([1, 5, 6, 2]), np.array([1, 3])], seq_len=10)
    assert w["input_ids"].tolist() == [7, 8, 9, 1, 5, 6, 2, 1, 3, PAD]
    assert w["doc_ids"].tolist() == [0, 0, 0, 1, 1, 1, 1, 2, 2, 3]
    assert w["positions"].tolist() == [0, 1, 2, 0, 1, 2, 3, 0, 1, 0]
    x = IGNORE_INDEX
    assert w["targets"].tolist() == [8, 9, x, 5, 6, 2, x, 3, x, x]
    # scored_from leaves a piece's first targets unscored (a prompt, or what an earlier window scored)
    pieces = [np.array([7, 8, 9]), np.array([1, 5, 6, 2]), np.array([1, 3])]
    w = pack_window(pieces, seq_len=10, scored_from=[1, 2, 0])
    assert w["targets"].tolist() == [x, 9, x, x, x, 2, x, 3, x, x]
    with pytest.raises(ValueError, match="more than seq_len"):
        pack_window([np.arange(12)], seq_len=10)


def test_val_windows_overlap_by_one_and_pad_the_end():
    val = ValWindows([b"abcdef", b"xyz"], seq_len=8)
    stream = [BOS, SENTINELS["raw"][0], *(64 + b for b in b"abcdef"), SENTINELS["raw"][1], EOS,
              BOS, SENTINELS["raw"][0], *(64 + b for b in b"xyz"), SENTINELS["raw"][1], EOS]
    assert len(val) == 3
    assert val[0]["input_ids"].tolist() == stream[:8]
    assert val[1]["input_ids"].tolist() == stream[8:16] and val[1]["positions"][0] == 0
    assert val[0]["targets"][-1] == stream[8]  # the symbol window 1 starts with is window 0's last target
    tail = val[2]
    assert tail["input_ids"].tolist() == stream[16:] + [PAD] * (24 - len(stream))
    assert (tail["targets"][len(stream) - 17 :] == IGNORE_INDEX).all()
    assert len(ValWindows([b"abcdef", b"xyz"], seq_len=8, max_windows=2)) == 2


def stream(**kw) -> TrainStream:
    args = dict(documents=DOCS, view_config=ViewConfig(("raw", "zstd")), spm_model=None,
                schedule=MixingSchedule("sentinel", r_peak=0.5), seq_len=32, batch_size=3, seed=0)
    args.update(kw)
    return TrainStream(**args)


def take(iterable, n):
    it = iter(iterable)
    return [next(it) for _ in range(n)]


def test_stream_holds_whole_documents_in_their_views():
    # windows long enough that every document fits; decode each complete <bos>…<eos> context
    views = ViewConfig(("raw", "zstd")).build()
    batches = take(stream(seq_len=512, batch_size=1), 4)
    seen = 0
    for b in batches:
        ids, doc = b["input_ids"][0].tolist(), b["doc_ids"][0].tolist()
        for d in sorted(set(doc)):
            part = [i for i, k in zip(ids, doc) if k == d]
            if part[0] == BOS and part[-1] == EOS:
                name = next(n for n, (o, c) in SENTINELS.items() if o == part[1])
                assert part[-2] == SENTINELS[name][1]
                assert views[name].decode(part[2:-2]) in DOCS
                seen += 1
    assert seen >= 4


def test_byte_schedule_gives_raw_only_and_r_one_gives_compressed_only():
    raw_open, zstd_open = SENTINELS["raw"][0], SENTINELS["zstd"][0]
    ids = torch.cat([b["input_ids"] for b in take(stream(schedule=MixingSchedule("byte")), 4)])
    assert (ids == raw_open).any() and not (ids == zstd_open).any()
    ids = torch.cat([b["input_ids"] for b in take(stream(schedule=MixingSchedule("sentinel", r_peak=1.0)), 4)])
    assert (ids == zstd_open).any() and not (ids == raw_open).any()


def test_stream_is_deterministic_and_seeded():
    a, b, c = take(stream(), 3), take(stream(), 3), take(stream(seed=1), 3)
    assert all(torch.equal(x["input_ids"], y["input_ids"]) for x, y in zip(a, b))
    assert not all(torch.equal(x["input_ids"], y["input_ids"]) for x, y in zip(a, c))


@pytest.mark.parametrize("workers", [0, 2])
def test_stream_resumes_from_cursors(workers):
    # Through the paired warmup (chunked pairs) into sentinel mode, and past the end of the rows' first epochs.
    def loader(**kw):
        schedule = MixingSchedule("paper", total_steps=12)
        return DataLoader(stream(seq_len=64, schedule=schedule, **kw), batch_size=None, num_workers=workers)

    full = take(loader(), 9)
    consumed = 5
    cursors = {}
    for b in full[:consumed]:
        logical, *cursor = b[CURSOR_KEY].tolist()
        cursors[logical] = StreamCursor.from_list(cursor)
    resumed = take(loader(batches_consumed=consumed, cursors=cursors), 4)
    for expected, got in zip(full[consumed:], resumed):
        assert all(torch.equal(expected[k], got[k]) for k in expected)


def test_too_many_shards_for_the_documents():
    with pytest.raises(ValueError, match="1 train documents cannot feed 2 loader shards"):
        take(DataLoader(stream(documents=DOCS[:1]), batch_size=None, num_workers=2), 1)


def test_rows_of_a_batch_come_from_independent_places_in_the_corpus():
    # python-sources at seq_len 2048: 32 consecutive windows of one stream spanned ~5 documents
    docs = long_documents(64)
    s = stream(documents=docs, view_config=ViewConfig(("raw",)), schedule=MixingSchedule("byte"), seq_len=2048,
               batch_size=32)
    for rows, _ in take(s.batch_rows(), 4):
        owners = {}
        for k, row in enumerate(rows):
            for index, _ in row:
                assert owners.setdefault(index, k) == k  # no document in two rows (first epoch)
    assert s.report(4)["documents_per_batch"] >= 32


def views_of(context: np.ndarray) -> dict[str, np.ndarray]:
    """The symbols of each view in one ``<bos> … <eos>`` context."""
    assert context[0] == BOS and context[-1] == EOS
    views, i = {}, 1
    while context[i] != EOS:
        name = next(n for n, (o, _) in SENTINELS.items() if o == context[i])
        close = i + 1 + int(np.flatnonzero(context[i + 1:] == SENTINELS[name][1])[0])
        views[name] = context[i + 1:close]
        i = close + 1
    return views


@pytest.fixture(scope="module")
def codecs():
    config = ViewConfig(("raw", "spm", "zstd", "brotli"), spm_vocab_size=300)
    return config.build(train_spm(long_documents(8), 300, budget_bytes=200_000))


@pytest.mark.parametrize("name", ["spm", "zstd", "brotli"])
def test_long_paired_documents_become_aligned_chunks_that_round_trip(codecs, name):
    doc = long_documents(3)[2] + b"tail \xff\xfe not utf-8 \xc3"
    for order in (["raw", name], [name, "raw"]):
        contexts = paired_contexts(doc, [codecs[n] for n in order], max_pair_symbols(512))
        assert len(contexts) > 4 and all(len(c) <= max_pair_symbols(512) for c in contexts)
        chunks = []
        for context in contexts:
            assert is_whole_pair(context)
            views = views_of(context)
            assert list(views) == order
            chunk = codecs["raw"].decode(views["raw"])
            assert codecs[name].decode(views[name]) == chunk  # each chunk encoded on its own
            chunks.append(chunk)
        assert b"".join(chunks) == doc
        assert sum(c.endswith(b"\n") for c in chunks) >= len(chunks) - 5  # cut at line ends (but the long line)
    short = DOCS[3]
    assert [c.tolist() for c in paired_contexts(short, [codecs["raw"], codecs["zstd"]], 512)] == [
        serialize_views([("raw", codecs["raw"].encode_array(short)), ("zstd", codecs["zstd"].encode_array(short))])
        .tolist()]


def test_most_rows_of_a_warmup_batch_hold_a_whole_pair():
    # the first steps of the paper schedule (r = 0.4: two documents in three paired) at seq_len 2048
    def paired_share(chunk_pairs: bool) -> float:
        schedule = MixingSchedule("paper", total_steps=10_000, chunk_pairs=chunk_pairs)
        s = stream(documents=long_documents(40), schedule=schedule, seq_len=2048, batch_size=32)
        return s.report(4)["paired_row_share"]

    assert paired_share(True) >= 0.5
    assert paired_share(False) <= 0.1  # whole documents: their two views hardly ever share a window
