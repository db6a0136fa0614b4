"""proxycomp: byte-level code language models trained with proxy compression."""

__version__ = "0.1.0"
