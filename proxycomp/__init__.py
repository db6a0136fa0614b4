"""proxycomp: byte-level code language models trained with proxy compression."""
import os as _os

__version__ = "0.1.0"

# setup.py installs kernels/ and gym_bridge/ as proxycomp.kernels and proxycomp.gym_bridge. When this package is
# imported straight from a source checkout (the repo root on sys.path, or an editable install made by a setuptools
# without package_dir support), those folders sit beside this one: let the subpackage search look there too.
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_root, "setup.py")) and not _os.path.isdir(_os.path.join(__path__[0], "kernels")):
    __path__.append(_root)
