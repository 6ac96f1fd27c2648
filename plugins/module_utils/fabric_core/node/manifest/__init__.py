"""Dataset manifest: every file's relative path, size and SHA-256, built and verified as a stream.

``fabricctl dataset seal`` builds it (``build``) into ``ROOT/.fabric/manifest.tsv`` so that it travels
inside the filesystem with the snapshot, and puts ``files``, ``bytes`` and the manifest's own SHA-256 in
the snapshot's user properties. ``fabricctl verify`` checks a tree against it (``verify``) on the storage
node, or on a GPU node where the version is mounted (the GPU-node agent's ``verify``; ``fabricctl verify --on``
copies the package there as one file, ``cli.zipapp``, and runs it), so it uses only the standard library and
works without fabric_core::

    python3 -m fabric_core.node.manifest build  ROOT [OUT]      [--workers N] [--json] [--progress]
    python3 -m fabric_core.node.manifest verify ROOT [MANIFEST] [--workers N] [--json] [--progress]
    python3 -m fabric_core.node.manifest diff   OLD NEW         [--json] [--stat]
    python3 FABRIC_MANIFEST.pyz verify ...                        (the one file of ``cli.zipapp``)

(OUT and MANIFEST default to ROOT/.fabric/manifest.tsv.) Exit codes: 0 ok, 1 differences found or bad
input (message on stderr), 130 interrupted. Imported as ``fabric_core.node.manifest`` it raises the typed
errors of ``fabric_core.base.errors``; run as a script, plain messages.

Format (UTF-8 text, lines ending in ``\\n``, fields separated by one tab)::

    # fabric-manifest v1 sha256
    <sha256 hex, 64 lowercase>\\t<size in bytes>\\t<path>          a regular file
    D\\t-\\t<path>                                                  a directory (every one, empty or not)
    L\\t-\\t<path>\\t<target>                                        a symbolic link (not followed)
    # end files=<n> bytes=<n> dirs=<n> symlinks=<n>

- ``<path>`` is relative to ROOT, components joined by ``/``. The top-level directory ``.fabric`` (where
  the manifest lives) is left out of the walk and of verification; a ``.fabric`` deeper in the tree is
  ordinary content. ROOT itself is not listed.
- Order: lines are sorted by the path's raw bytes (the name as the kernel holds it; on Linux the
  surrogateescape encoding of the str), strictly increasing, no duplicates. A directory's own line sits
  at its name (``a``) while its contents sit under ``a/``: ``a`` < ``a.txt`` (``.`` is 0x2e) < ``a/x``
  (``/`` is 0x2f) < ``a0``. The walk produces this order without a global sort: each directory's
  entries are sorted by path, with each subdirectory entered a second time under ``<path>/``.
- Escaping, in ``<path>`` and ``<target>``: backslash -> ``\\\\``, tab -> ``\\t``, newline -> ``\\n``,
  carriage return -> ``\\r``, and every byte that is not part of valid UTF-8 -> ``\\xHH`` (two lowercase
  hex digits). Everything else is written as it is (UTF-8). Sorting is on the unescaped bytes.
- Only regular files count in ``files`` and ``bytes``. Permissions, owners and times are not recorded.
  FIFOs, sockets and device nodes are refused by ``build`` (an error naming the path).
- The trailer makes a truncated manifest detectable. The manifest digest is the SHA-256 of the file's
  bytes.

Memory: the walk holds the sorted listing of each directory on the current path (so one directory of
n entries costs O(n)); ``build`` also the results of the directories scanned ahead (at most ``workers * 4``),
``verify`` the batches in flight (at most ``workers * 4`` batches of 256 paths) and the differences found.
Never the whole file list.

Parallelism: ``build`` scans whole directories in ``workers`` processes (``spawn``): listing, lstat, the stat
cache's lookup and the hashing of what changed, ahead of the order it writes in, so that the calling process
only joins each directory's lines; a directory with many files to hash has them spread over the pool in batches.
``verify`` walks in the calling process and hashes batches of paths in the workers (threads hashing many
small files are bound by the GIL). Either starts no pool for a tree of at most one batch (256 files).

The modules: ``format`` (lines, escaping, results, reading a manifest), ``tree`` (the walk and the hashing
workers), ``builder`` (``build``, with the stat cache), ``compare`` (``verify`` and ``diff``), ``cli`` (the command
line and the one file that carries the package to a host without fabric_core, ``zipapp``). A test that replaces
a function another one calls replaces it in the module that calls it (``manifest.tree._listing``)."""

from .builder import CACHE_RELPATH, StaleCache, build, cache_format, default_path, file_sha256, read_cache
from .cli import diff_summary, main, zipapp
from .compare import ADDED, CHANGED, REMOVED, Change, diff, verify
from .format import (
    DIRECTORY,
    FILE,
    HEADER,
    KINDS,
    MANIFEST_RELPATH,
    SYMLINK,
    Difference,
    Entry,
    NotFound,
    Report,
    Summary,
    UserError,
    display,
    escape,
    read_entries,
    read_summary,
    unescape,
)
from .tree import walk

__all__ = [
    "ADDED", "CACHE_RELPATH", "CHANGED", "DIRECTORY", "FILE", "HEADER", "KINDS", "MANIFEST_RELPATH", "REMOVED",
    "SYMLINK", "Change", "Difference", "Entry", "NotFound", "Report", "StaleCache", "Summary", "UserError", "build",
    "cache_format", "default_path", "diff", "diff_summary", "display", "escape", "file_sha256", "main",
    "read_cache", "read_entries", "read_summary", "unescape", "verify", "walk", "zipapp",
]
