"""Views: exact round trips (property-based), serialization, corrupt input and configuration errors."""
from __future__ import annotations

import pytest
import sentencepiece as spm
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxycomp.views import (
    BrotliView, CorruptViewError, RawView, SpmView, ViewConfig, ViewError, ZstdView, serialize_views, train_spm,
)
from proxycomp.vocab import BOS, EOS, SENTINELS

TRAIN_TEXT = [
    (f"def f{i}(x, y):\n    return x + y * {i}\n\nclass C{i}:\n    '''doc {i} é ünïcode'''\n    pass\n").encode()
    for i in range(200)
]
VOCAB = ViewConfig(("raw", "spm", "zstd", "brotli"), spm_vocab_size=512).vocabulary()
EDGE_CASES = [
    b"",
    b"\x00\x01\x02\x7f\x80\xff",
    b"ok \xff\xfe not utf-8 \xc3",  # invalid runs between valid text
    "\u2581 marks \u2581\u2581 and  spaces".encode(),  # SentencePiece's own space symbol
    b"tabs\t\r\nand\x0bcontrol\x1b[0m",
    "e\u0301 \ufeff \U0001f600 \u00a0nbsp \u3000".encode(),  # combining, BOM, astral, odd spaces
    b"    indented\n\n\n        deeper\n",
]


@pytest.fixture(scope="module")
def spm_model() -> bytes:
    return train_spm(TRAIN_TEXT, 512, budget_bytes=1_000_000)


@pytest.fixture(scope="module")
def views(spm_model):
    return ViewConfig(("raw", "spm", "zstd", "brotli"), spm_vocab_size=512).build(spm_model)


bytes_like = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=200).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.text(alphabet="ab \n\t\u2581\x00é", max_size=100).map(str.encode),
)


@pytest.mark.parametrize("name", ["raw", "spm", "zstd", "brotli"])
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=bytes_like)
def test_every_byte_string_round_trips(views, name, data):
    view = views[name]
    ids = view.encode(data)
    assert all(i in VOCAB.range(name) for i in ids)
    assert view.decode(ids) == data


@pytest.mark.parametrize("name", ["raw", "spm", "zstd", "brotli"])
@pytest.mark.parametrize("data", EDGE_CASES, ids=range(len(EDGE_CASES)))
def test_edge_cases_round_trip(views, name, data):
    assert views[name].decode(views[name].encode(data)) == data


def test_spm_compresses_code_and_trains_deterministically(spm_model, views):
    assert train_spm(TRAIN_TEXT, 512, budget_bytes=1_000_000) == spm_model
    held_out = b"def f999(x, y):\n    return x + y * 999\n"
    assert len(held_out) / len(views["spm"].encode(held_out)) > 2.0


def test_serialize_wraps_one_view_in_its_sentinels(views):
    open_id, close_id = SENTINELS["zstd"]
    ids = views["zstd"].serialize(b"abc")
    assert ids[:2] == [BOS, open_id] and ids[-2:] == [close_id, EOS]
    assert views["zstd"].decode(ids[2:-2]) == b"abc"
    pair = serialize_views([("raw", views["raw"].encode_array(b"x")), ("spm", views["spm"].encode_array(b"x"))])
    assert pair.tolist() == [BOS, *SENTINELS["raw"][:1], 64 + ord("x"), SENTINELS["raw"][1], SENTINELS["spm"][0],
                             *views["spm"].encode(b"x"), SENTINELS["spm"][1], EOS]


def test_zstd_frames_are_magicless_without_checksum(views):
    frame = bytes(i - views["zstd"].offset for i in views["zstd"].encode(b"hello " * 50))
    assert not frame.startswith(b"\x28\xb5\x2f\xfd")
    params = zstandard.get_frame_parameters(b"\x28\xb5\x2f\xfd" + frame)
    assert not params.has_checksum and params.content_size == 300


@pytest.mark.parametrize("name", ["raw", "spm", "zstd", "brotli"])
def test_ids_outside_the_range_are_corrupt(views, name):
    view = views[name]
    for bad in (view.offset - 1, view.offset + view.size):
        with pytest.raises(CorruptViewError, match=rf"{name} view: symbol id {bad} is outside its range"):
            view.decode(view.encode(b"some text")[:1] + [bad])


@pytest.mark.parametrize("name", ["zstd", "brotli"])
def test_garbled_compressed_streams_are_corrupt(views, name):
    view = views[name]
    ids = view.encode(b"a compressible sentence, " * 20)
    for bad in (ids[:-3], ids[:2], ids + [view.offset], []):
        with pytest.raises(CorruptViewError, match=f"^{name} view: "):
            view.decode(bad)


def test_spm_ids_that_no_text_encodes_to_are_corrupt(views):
    unk = views["spm"].offset  # piece 0 is <unk>; byte fallback means encode never emits it
    with pytest.raises(CorruptViewError, match="is not a text or byte piece"):
        views["spm"].decode([unk])


def test_configuration_errors(spm_model):
    with pytest.raises(ViewError, match="unknown view 'gzip'; known views: raw, spm, zstd, brotli"):
        ViewConfig(("raw", "gzip"))
    with pytest.raises(ViewError, match="must include 'raw'"):
        ViewConfig(("spm",))
    with pytest.raises(ViewError, match="twice"):
        ViewConfig(("raw", "zstd", "zstd"))
    with pytest.raises(ViewError, match="needs a trained SentencePiece model"):
        ViewConfig(("raw", "spm")).build()
    with pytest.raises(ViewError, match="zstd_level"):
        ZstdView(400, level=0)
    with pytest.raises(ViewError, match="brotli_quality"):
        BrotliView(400, quality=12)
    with pytest.raises(ViewError, match="has 512 pieces but the vocabulary reserves 300"):
        SpmView(320, 300, spm_model)
    with pytest.raises(ViewError, match="does not load"):
        SpmView(320, 512, b"not a model")
    with pytest.raises(ViewError, match="at least 300"):
        train_spm(TRAIN_TEXT, 100)
    with pytest.raises(ViewError, match="no training text"):
        train_spm([], 512)


def test_spm_model_without_byte_fallback_is_refused(tmp_path):
    import io

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(t.decode() for t in TRAIN_TEXT), model_writer=model, vocab_size=100,
        hard_vocab_limit=False, minloglevel=2,
    )
    with pytest.raises(ViewError, match="byte_fallback"):
        SpmView(320, 1000, model.getvalue())


def test_raw_view_is_the_identity_on_byte_ids():
    assert RawView(64).encode(b"\x00A\xff") == [64, 64 + 65, 64 + 255]
