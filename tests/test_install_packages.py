"""infra/install_packages.py: uv installs from exactly the sources pip is configured with, and pip takes over where
that configuration does not translate. The installs are real: a fresh venv, a wheel built here in a find-links
folder that a pip configuration file names, and the project's own uv (make setup installs it)."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT, load_script

SCRIPT = ROOT / "infra" / "install_packages.py"
install_packages = load_script(SCRIPT)


def test_pip_settings_apply_pips_order_and_leave_other_commands_out():
    listing = "\n".join([
        "global.find-links='/a'",
        "global.extra-index-url='file:///x/simple\\nfile:///y/simple'",  # two lines in a pip.conf
        "download.find-links='/not-for-install'",
        "install.find-links='/b'",
        ":env:.default-timeout='60'",
        "global.no_index='true'",
    ])
    assert install_packages.pip_settings(listing) == {
        "find-links": "/b", "extra-index-url": "file:///x/simple file:///y/simple", "default-timeout": "60",
        "no-index": "true"}


def test_uv_gets_each_source_pip_has_and_picks_the_best_version_over_them_as_pip_does():
    options = install_packages.uv_options({
        "index-url": "https://idx/simple", "extra-index-url": "file:///x/simple file:///y/simple",
        "find-links": "/w", "constraint": "/c.txt", "trusted-host": "idx", "cert": "/ca.pem", "no-index": "false",
        "default-timeout": "180", "disable-pip-version-check": "1"})
    flags = options.flags
    pairs = list(zip(flags[::2], flags[1::2], strict=True))
    assert ("--index-strategy", "unsafe-best-match") in pairs
    assert ("--default-index", "https://idx/simple") in pairs
    assert [v for f, v in pairs if f == "--index"] == ["file:///x/simple", "file:///y/simple"]
    assert ("--find-links", "/w") in pairs and ("--constraint", "/c.txt") in pairs
    assert ("--allow-insecure-host", "idx") in pairs and "--no-index" not in flags
    assert options.env == {"SSL_CERT_FILE": "/ca.pem", "UV_HTTP_TIMEOUT": "180"}


def test_a_setting_uv_would_not_honour_the_same_way_is_refused():
    with pytest.raises(install_packages.NotTranslatable, match="no-binary=':all:' is not one"):
        install_packages.uv_options({"no-binary": ":all:"})


# ---------------------------------------------------------------------- real installs
def _wheel(folder: Path, name: str = "medgymprobe", version: str = "0.3") -> Path:
    """A pure-Python wheel with a valid RECORD."""
    files = {f"{name}/__init__.py": f"VERSION = {version!r}\n",
             f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{name}-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                  "Tag: py3-none-any\n"}
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{name}-{version}.dist-info/RECORD,,")
    out = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
        zf.writestr(f"{name}-{version}.dist-info/RECORD", "\n".join(record) + "\n")
    return out


@pytest.fixture(scope="module")
def uv() -> Path:
    path = Path(sys.executable).parent / "uv"
    if not path.is_file():
        pytest.skip(f"no uv beside {sys.executable}: `make setup` installs it")
    return path


def _venv(tmp: Path, uv: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(tmp / "venv")], check=True)
    os.symlink(uv, tmp / "venv" / "bin" / "uv")  # the installer would otherwise fetch uv from the index
    return tmp / "venv" / "bin" / "python"


def _install(python: Path, tmp: Path, pip_conf: str, **extra: str) -> subprocess.CompletedProcess:
    (tmp / "pip.conf").write_text(pip_conf)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "MEDGYM_INSTALLER"))}
    env.update(PIP_CONFIG_FILE=str(tmp / "pip.conf"), UV_CACHE_DIR=str(tmp / "uv-cache"), **extra)
    return subprocess.run([str(python), str(SCRIPT), "medgymprobe==0.3"], env=env, capture_output=True, text=True,
                          timeout=300)


def _installed(python: Path) -> tuple[str, str, list[Path]]:
    """The probe's version, the installer its dist-info names, and any bytecode beside it."""
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    version = subprocess.run([str(python), "-c", "import medgymprobe; print(medgymprobe.VERSION)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    installer = (site / "medgymprobe-0.3.dist-info" / "INSTALLER").read_text().strip()
    return version, installer, list((site / "medgymprobe").rglob("*.pyc"))


def test_uv_installs_from_the_find_links_folder_pip_is_configured_with(tmp_path: Path, uv: Path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels)
    python = _venv(tmp_path, uv)
    out = _install(python, tmp_path, f"[global]\nno-index = true\nfind-links = {wheels}\n")
    assert out.returncode == 0, out.stderr
    assert "pip, not uv" not in out.stderr
    assert _installed(python) == ("0.3", "uv", [])


def test_a_setting_without_a_uv_equivalent_installs_with_pip_and_says_why(tmp_path: Path, uv: Path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels)
    python = _venv(tmp_path, uv)
    out = _install(python, tmp_path, f"[global]\nno-index = true\nfind-links = {wheels}\n"
                                     "[install]\nonly-binary = medgymprobe\n")
    assert out.returncode == 0, out.stderr
    assert "pip, not uv: pip's setting only-binary='medgymprobe' is not one this installer translates" in out.stderr
    assert _installed(python) == ("0.3", "pip", [])  # --no-compile: no bytecode either way


def test_a_source_pip_does_not_have_is_not_one_uv_may_use(tmp_path: Path, uv: Path):
    """Nothing in the configuration names the folder: uv finds nothing, as pip would, instead of another source."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels)
    python = _venv(tmp_path, uv)
    out = _install(python, tmp_path, "[global]\nno-index = true\n")
    assert out.returncode != 0 and "medgymprobe" in out.stderr
