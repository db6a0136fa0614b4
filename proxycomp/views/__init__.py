"""Views of a document: raw bytes and its compressed forms, each a codec into the shared vocabulary."""
from proxycomp.views.base import CorruptViewError, View, ViewError, serialize_views
from proxycomp.views.byte_codecs import BrotliView, RawView, ZstdView
from proxycomp.views.registry import VIEW_CLASSES, ViewConfig, check_view_names
from proxycomp.views.spm import SpmView, train_spm

__all__ = [
    "VIEW_CLASSES",
    "BrotliView",
    "CorruptViewError",
    "RawView",
    "SpmView",
    "View",
    "ViewConfig",
    "ViewError",
    "ZstdView",
    "check_view_names",
    "serialize_views",
    "train_spm",
]
