"""Downloads with a checksum check, a progress bar, and atomic writes; the cache folder.

Files are fetched with :mod:`urllib` into a temporary file next to the destination,
hashed while they stream, and renamed into place only when the SHA-256 (or, where no
SHA-256 is published, the MD5) matches; a failed or mismatching download leaves no
file behind. The cache folder is ``$SINGA_DATA`` if set, else ``~/.cache/singa``.

Example::

    from singa.data.download import cache_dir, download_file
    path = download_file(["https://example.org/a.gz"], cache_dir() / "a.gz", sha256="...")
"""

from __future__ import annotations

import hashlib
import http.client
import os
import tempfile
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from singa.user_cache import user_cache_dir

__all__ = ["cache_dir", "download_file", "file_digest", "DownloadError", "ChecksumError", "CACHE_ENV"]

#: Environment variable that overrides the cache folder.
CACHE_ENV = "SINGA_DATA"
_CHUNK = 1 << 20


class DownloadError(OSError):
    """Every mirror failed (network error, HTTP error, or checksum mismatch)."""


class ChecksumError(ValueError):
    """Downloaded or found bytes do not have the published checksum."""


def cache_dir() -> Path:
    """The cache folder: ``$SINGA_DATA`` if set and non-empty, else singa's per-user cache
    folder (:func:`singa.user_cache.user_cache_dir`: ``~/.cache/singa`` on Linux)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return user_cache_dir()


def file_digest(path: str | os.PathLike, algorithm: str = "sha256") -> str:
    """Hex digest of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _fetch_one(url: str, dest: Path, algorithm: str, expected: str, progress: bool, timeout: float) -> None:
    from tqdm.auto import tqdm

    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        h = hashlib.new(algorithm)
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as resp:
            length = resp.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            with tqdm(
                total=total,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                desc=dest.name,
                disable=not progress,
            ) as bar:
                for chunk in iter(lambda: resp.read(_CHUNK), b""):
                    out.write(chunk)
                    h.update(chunk)
                    bar.update(len(chunk))
            out.flush()
            os.fsync(out.fileno())
        got = h.hexdigest()
        if got != expected.lower():
            raise ChecksumError(
                f"{url}: {algorithm.upper()} mismatch: got {got}, expected {expected.lower()}"
            )
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def download_file(
    urls: str | Sequence[str],
    dest: str | os.PathLike,
    sha256: str | None = None,
    *,
    md5: str | None = None,
    progress: bool = True,
    timeout: float = 60.0,
) -> Path:
    """Download ``dest`` from the first of ``urls`` that works and has the right checksum.

    Args:
        urls: one URL or mirrors to try in order.
        dest: the final path; its folder is created. Written atomically (temp file + rename).
        sha256: the expected SHA-256 (preferred).
        md5: the expected MD5, used only when no SHA-256 is given.
        progress: show a tqdm progress bar (on stderr).
        timeout: socket timeout in seconds for each connection.

    Returns:
        ``dest`` as a Path.

    Raises:
        ValueError: neither checksum given (downloads are never unchecked).
        ChecksumError: every mirror served bytes with the wrong checksum (nothing is left on disk).
        DownloadError: a mirror failed otherwise; the message lists each URL and its error.
    """
    if sha256:
        algorithm, expected = "sha256", sha256
    elif md5:
        algorithm, expected = "md5", md5
    else:
        raise ValueError("download_file needs a sha256 (or md5) checksum to verify the download")
    url_list = [urls] if isinstance(urls, str) else list(urls)
    if not url_list:
        raise ValueError("download_file needs at least one URL")
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    failures: list[str] = []
    all_checksum = True
    for url in url_list:
        try:
            _fetch_one(url, dest, algorithm, expected, progress, timeout)
            return dest
        except ChecksumError as e:
            failures.append(str(e))
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as e:
            all_checksum = False
            failures.append(f"{url}: {e}")
    cls = ChecksumError if all_checksum else DownloadError
    raise cls(f"could not download {dest.name}:\n  " + "\n  ".join(failures))
