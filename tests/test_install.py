"""Installing, running, reinstalling and uninstalling the package leaves nothing behind.

Runs pip in a fresh virtual environment that sees this environment's dependencies through a
``.pth`` line (so nothing but the package itself is installed): install, run a compiled
kernel, editable reinstall, run the installed command from another folder, upgrade, run,
uninstall. Before the kernels' cache moved to the per-user folder, the first run wrote
numba's files into ``site-packages/singa``, and the editable reinstall left that folder
behind to shadow the package in every process started outside the checkout.
"""

import os
import shutil
import site
import subprocess
import venv
from pathlib import Path

import pytest

from tests.test_user_cache import RUN_A_KERNEL

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
SKIP = shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", "build", ".venv", "*.zip", ".*_cache")


def _environment(tmp_path: Path) -> tuple[Path, dict]:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    own = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(own, "parent_environment.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NUMBA_CACHE_DIR", "VIRTUAL_ENV")}
    env["SINGA_CACHE_DIR"] = str(tmp_path / "cache")
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env['PATH']}"
    return Path(own), env


def test_install_run_reinstall_upgrade_uninstall_leaves_no_stray_package(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=SKIP)
    site_packages, env = _environment(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def sh(*cmd: str) -> str:
        done = subprocess.run(cmd, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{cmd}: {done.stdout}\n{done.stderr}"
        return done.stdout

    def pip_install(*args: str) -> None:
        sh("python", "-m", "pip", "install", "-q", "--no-deps", *args)

    pip_install(str(src))
    sh("python", "-c", RUN_A_KERNEL)
    assert not list((site_packages / "singa").rglob("*.nb[ic]"))  # nothing beside the package
    pip_install("-e", str(src))
    assert not (site_packages / "singa").exists()
    assert "version" in sh("singa-train", "--version").lower()
    sh("python", "-c", RUN_A_KERNEL + f"import singa; assert singa.__file__.startswith({str(src)!r})\n")
    pyproject = src / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('version = "0.1.0"', 'version = "0.1.1"'))
    pip_install(str(src))  # the upgrade, over the editable install
    sh("python", "-c", RUN_A_KERNEL)
    assert "version" in sh("singa-train", "--version").lower()
    sh("python", "-m", "pip", "uninstall", "-y", "-q", "singa")
    assert not (site_packages / "singa").exists()
    assert list((tmp_path / "cache" / "numba").rglob("*.nbi"))  # the cache is where it belongs
