"""Data side of proxycomp: corpus loading, view mixing, window packing and the LightningDataModule."""
from proxycomp.data.corpus import (
    Corpus,
    CorpusConfig,
    CorpusError,
    CorpusReport,
    Document,
    load_corpus,
)
from proxycomp.data.datamodule import DataConfig, DataStateError, ProxyDataModule
from proxycomp.data.mixing import (
    MixingSchedule,
    ScheduleError,
    choose_views,
    compressed_only_probability,
)
from proxycomp.data.packing import (
    CURSOR_KEY,
    ReplayStream,
    StreamCursor,
    TrainStream,
    ValWindows,
    pack_window,
)

__all__ = [
    "CURSOR_KEY",
    "Corpus",
    "CorpusConfig",
    "CorpusError",
    "CorpusReport",
    "DataConfig",
    "DataStateError",
    "Document",
    "MixingSchedule",
    "ProxyDataModule",
    "ReplayStream",
    "ScheduleError",
    "StreamCursor",
    "TrainStream",
    "ValWindows",
    "choose_views",
    "compressed_only_probability",
    "load_corpus",
    "pack_window",
]
