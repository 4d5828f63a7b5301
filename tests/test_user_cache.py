"""singa.user_cache and the kernels' disk cache: per user, never beside the package."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

import singa
from singa.kernels import jit
from singa.user_cache import user_cache_dir

PACKAGE = Path(singa.__file__).resolve().parent
RUN_A_KERNEL = (
    "import numpy as np\n"
    "from singa import autograd, tensor\n"
    "x = tensor.from_numpy(np.linspace(-1, 1, 4096, dtype=np.float32))\n"
    "y = autograd.relu(x)\n"
    "assert (tensor.to_numpy(y) >= 0).all()\n"
)


def _files(folder: Path) -> dict:
    return {p.relative_to(folder): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def test_the_cache_folder_is_singa_cache_dir_else_the_platform_user_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SINGA_CACHE_DIR", str(tmp_path / "mine"))
    assert user_cache_dir("numba") == tmp_path / "mine" / "numba"
    monkeypatch.delenv("SINGA_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform.startswith("linux"):
        assert user_cache_dir() == tmp_path / "xdg" / "singa"
    assert PACKAGE not in user_cache_dir().parents


def test_numba_cache_dir_overrides_the_kernel_cache_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("SINGA_CACHE_DIR", str(tmp_path / "singa"))
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    assert jit.kernel_cache_dir() == tmp_path / "singa" / "numba"
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    assert jit.kernel_cache_dir() == tmp_path / "numba"


def test_declaring_a_kernel_leaves_numbas_own_cache_setting_as_it_was(monkeypatch, tmp_path):
    from numba import config

    monkeypatch.setenv("SINGA_CACHE_DIR", str(tmp_path))
    before = config.CACHE_DIR

    @jit.kernel
    def _double(x, out):  # pragma: no cover (compiled)
        for i in range(x.shape[0]):
            out[i] = 2 * x[i]

    out = np.empty(3)
    _double(np.arange(3.0), out)
    np.testing.assert_array_equal(out, [0.0, 2.0, 4.0])
    assert config.CACHE_DIR == before


def test_compiled_kernels_are_cached_per_user_and_nothing_is_written_beside_the_package(tmp_path):
    site = tmp_path / "site"
    shutil.copytree(PACKAGE, site / "singa", ignore=shutil.ignore_patterns("__pycache__"))
    cache = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": str(site), "SINGA_CACHE_DIR": str(cache)}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("NUMBA_CACHE_DIR", None)
    installed = _files(site)

    def run() -> None:
        subprocess.run([sys.executable, "-c", RUN_A_KERNEL], env=env, cwd=tmp_path, check=True, timeout=300)

    run()
    assert _files(site) == installed  # nothing new or changed in the package folder
    first = _files(cache / "numba")
    assert any(p.suffix == ".nbi" for p in first) and any(p.suffix == ".nbc" for p in first)
    run()
    assert _files(cache / "numba") == first  # the second process loaded the kernels: nothing rewritten
    assert _files(site) == installed
