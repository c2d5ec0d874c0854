"""Compile router/adapter/hotpath.c into the extension module `router.adapter._hotpath` (cffi, API mode).

`make` runs this (`python router/adapter/hotpath_build.py`); it does nothing when the module in the tree was
built from the same source. A wheel (`pip install .`) builds it through setup.py (`cffi_modules`). It needs
what building python-qpid-proton already needed: a C compiler and the Python headers
(scripts/system-deps.sh). The module records a hash of its source, so a node started with a stale build
says so instead of running it (router/adapter/hotpath.py).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "hotpath.c"
MODULE = "_hotpath"

CDEF = """
int hp_init(void **fns, int n, int delivery, int link_flow, int transport, uint64_t *tags);
int hp_next(void *coll, int pop, void **out);
typedef struct hp_reader hp_reader_t;
hp_reader_t *hp_reader_new(void);
void hp_reader_free(hp_reader_t *r);
void hp_reader_buffer(hp_reader_t *r, char *buf, size_t cap);
int hp_reader_stream(hp_reader_t *r, const char *prefix, size_t plen, const char *to_peer, size_t lp,
                     const char *to_client, size_t lc);
int64_t hp_take(void *d, void *link, hp_reader_t *r);
int64_t hp_take_peer(void *d, void *link, hp_reader_t *r);
void *hp_send(void *link, const char *data, size_t n);
void *hp_send_stream(void *link, hp_reader_t *r, int to_client);
void *hp_send_inserted(void *link, hp_reader_t *r, size_t at, const char *insert, size_t m);
uint64_t hp_outcome(void *od);
void hp_settle_pair(void *d, uint64_t state, void *out);
int64_t hp_find_to(const char *data, size_t n);
const char *hp_source(void);
"""


def source_hash(text: str) -> str:
    """The hash a build of `text` records (with the declarations it is called through)."""
    return hashlib.sha256((CDEF + text).encode()).hexdigest()[:32]


def target() -> Path:
    """Where the compiled module goes: next to its source, named for this Python."""
    return HERE / (MODULE + sysconfig.get_config_var("EXT_SUFFIX"))


def ffibuilder() -> object:
    """The cffi builder of the module (also what setup.py's `cffi_modules` builds a wheel with)."""
    from cffi import FFI

    text = SOURCE.read_text()
    builder = FFI()
    builder.cdef(CDEF)
    builder.set_source(f"router.adapter.{MODULE}",
                       f'{text}\nstatic const char *hp_source(void) {{ return "{source_hash(text)}"; }}\n',
                       extra_compile_args=["-O2"])
    return builder


def build(force: bool = False) -> Path:
    """Compile the module into the source tree unless the one there was built from the current source."""
    out = target()
    if not force and out.exists() and source_hash(SOURCE.read_text()).encode() in out.read_bytes():
        return out
    with tempfile.TemporaryDirectory(prefix="hotpath-") as tmp:
        built = ffibuilder().compile(tmpdir=tmp, verbose=False)
        staged = out.with_name(out.name + ".new")
        shutil.copyfile(built, staged)
        os.replace(staged, out)        # a new file: a node running the old one keeps its mapping
    return out


if __name__ == "__main__":
    print(f"hotpath: {build(force='--force' in sys.argv).relative_to(HERE.parent.parent)}")
