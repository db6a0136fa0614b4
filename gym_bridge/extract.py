"""Pull the candidate's code out of a model reply."""
from __future__ import annotations

import re

# A fence opens with ``` or longer plus an optional info string, and closes with the same run of backticks.
_FENCE = re.compile(r"^(?P<ticks>`{3,})[ \t]*(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=ticks)[ \t]*$", re.M | re.S)


def extract_code(reply: str) -> str | None:
    """Code of a reply: the last ```answer``` block, else the last ```python``` (or ```py```) block, else the
    last fenced block of any language. A reply without fences is taken as code when it defines `ModelNew`
    (a bare file); otherwise None."""
    blocks = [(m.group("lang").lower(), m.group("body")) for m in _FENCE.finditer(reply)]
    for wanted in (("answer",), ("python", "py", "python3")):
        chosen = [body for lang, body in blocks if lang in wanted]
        if chosen:
            return chosen[-1]
    if blocks:
        return blocks[-1][1]
    return reply if "ModelNew" in reply else None
