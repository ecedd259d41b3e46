"""The Dockerfile, built and run where no Docker engine is (issue 28 item 16), so a broken image fails CI.

Debian's podman builds it with `--storage-driver vfs --isolation chroot` (no daemon, no overlay
mount, no cgroups) FROM a plain Debian base made with debootstrap, as the registry of base images is
out of reach; `podman run` needs cgroups, so buildah runs `chinwag --version` and a piped `chinwag
run` inside the image, as its user, with the README's config mount and model variables. The turn
goes to the fake model on 127.0.0.1: chroot isolation keeps the host's network.

Choices, each for a measured reason (2 shared cores at load ~8-10):
- debootstrap's root file system is kept as a tarball under ~/.cache/chinwag-ci/, named by suite,
  architecture and packages: debootstrap and tar take one to two minutes, importing the tarball ~10 s;
- podman's storage lives on tmpfs: vfs copies whole trees, and on the disk deleting the build's
  working container (45 000 files) took 30-70 s of a 3-minute build, on tmpfs 2 s (peak ~1.1 GB);
- `--layers=false`: vfs would copy the whole tree again for every layer kept;
- the host's CA bundle is lent to the build's RUN steps (a volume, not part of the image) and the
  base's PIP_CERT points pip at it, so pip reaches PyPI wherever the host does, a TLS-inspecting
  proxy included; the Dockerfile's pip cache mount is kept under ~/.cache/chinwag-ci/ (TMPDIR), and
  fills where the index's answers may be cached (a proxy that drops Cache-Control leaves it empty).
Measured with `python -m pytest tests/deploy -q --durations=0`: cold (no cache) 2 min 34 s to 3 min 44 s,
warm 1 min 43 s to 2 min 7 s, most of it pip installing the dependencies into the image.
.ci/install-podman installs podman, buildah and debootstrap; nothing here skips.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAI

pytestmark = pytest.mark.slow  # minutes; CI runs it

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "chinwag-ci"
SUITE = "bookworm"  # Python 3.11, the oldest the project supports
PACKAGES = ("ca-certificates", "python3", "python3-venv")  # what the Dockerfile asks of its base
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")  # Debian's, on the host and in the base
BASE = f"localhost/chinwag-base:{SUITE}"
IMAGE = "localhost/chinwag:ci"
STEP_TIMEOUT = 1800.0  # a hung step fails the test instead of CI's whole run


def run(args: list[str], tmpdir: Path | None = None) -> str:
    """stdout of `args`, which must succeed; `tmpdir` is their TMPDIR."""
    env = {**os.environ, "TMPDIR": str(tmpdir)} if tmpdir else None
    proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=STEP_TIMEOUT)
    said = (proc.stdout + proc.stderr)[-4000:]  # a failed build says why at its end
    assert proc.returncode == 0, f"{' '.join(args[:6])} ... exited {proc.returncode}:\n{said}"
    return proc.stdout


def tool(name: str) -> str:
    found = shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
    assert found, f"{name} is missing: run .ci/install-podman (apt-get install podman buildah debootstrap)"
    return found


def debian_rootfs(scratch: Path) -> Path:
    """The cached tarball of a minimal Debian with PACKAGES, made with debootstrap when absent."""
    arch = run(["dpkg", "--print-architecture"]).strip()
    tarball = CACHE / f"debian-{SUITE}-{arch}-{'+'.join(PACKAGES)}.tar"
    if tarball.is_file():
        return tarball
    target = scratch / "rootfs"
    run([tool("debootstrap"), "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(target)])
    # the downloaded packages and indexes are half the size, and nothing in the image needs them
    for leftovers in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for path in (target / leftovers).glob("*"):
            if path.is_file():
                path.unlink()
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = tarball.with_suffix(f".{os.getpid()}.partial")
    run(["tar", "--numeric-owner", "-C", str(target), "-cf", str(partial), "."])
    partial.replace(tarball)  # whole or not at all, should two runs make it at once
    shutil.rmtree(target)  # tmpfs: the build needs the room
    return tarball


class Container:
    """A working container of the image, where `buildah run` starts commands as the image's user."""

    def __init__(self, buildah: list[str], name: str) -> None:
        self.buildah, self.name = buildah, name

    async def run(
        self, args: list[str], stdin: str = "", env: dict[str, str] | None = None, files: dict[str, Path] | None = None
    ) -> tuple[int, str, str]:
        """Exit status, stdout and stderr of `args` run in the container with `env` set and each of
        `files` mounted read-only at its path there."""
        options = [f"--env={key}={value}" for key, value in (env or {}).items()]
        options += [f"--volume={host}:{inside}:ro" for inside, host in (files or {}).items()]
        proc = await asyncio.create_subprocess_exec(
            *self.buildah,
            "run",
            "--isolation",
            "chroot",
            *options,
            self.name,
            "--",
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), STEP_TIMEOUT)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()


@pytest.fixture(scope="module")
def container() -> Iterator[Container]:
    """A working container of the image built from the Dockerfile FROM the Debian base."""
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:
        scratch = Path(tmp)
        storage = ["--root", str(scratch / "storage"), "--runroot", str(scratch / "run"), "--storage-driver", "vfs"]
        podman = [tool("podman"), *storage, "--tmpdir", str(scratch / "libpod"), "--events-backend", "none"]
        buildah = [tool("buildah"), *storage]
        search_path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # as official images set it
        run(
            [*podman, "import", "--change", f"ENV PATH={search_path}", "--change", f"ENV PIP_CERT={CA_BUNDLE}"]
            + [str(debian_rootfs(scratch)), BASE]
        )
        lend_ca = [f"--volume={CA_BUNDLE}:{CA_BUNDLE}:ro"] if CA_BUNDLE.is_file() else []
        (CACHE / "buildah").mkdir(parents=True, exist_ok=True)
        run(
            [*podman, "build", "--isolation", "chroot", "--layers=false", "--pull=never", "--format", "docker"]
            + [*lend_ca, "--build-arg", f"BASE={BASE}", "--tag", IMAGE, str(ROOT)],
            tmpdir=CACHE / "buildah",  # where buildah keeps the Dockerfile's cache mount
        )
        name = run([*buildah, "from", "--pull=never", IMAGE]).strip()
        try:
            yield Container(buildah, name)
        finally:
            run([*buildah, "rm", name])


async def test_the_image_reports_its_version_as_its_own_user(container: Container) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    code, out, err = await container.run(["chinwag", "--version"])
    assert (code, out) == (0, f"chinwag {version}\n"), err
    assert (await container.run(["id", "-un"]))[1] == "chinwag\n"  # not root


async def test_a_piped_run_in_the_image_answers_from_the_model(container: Container, tmp_path: Path) -> None:
    # the README's way in: model from the environment, a config file mounted over the volume's; here
    # the ops server stays on loopback at a free port (chroot isolation shares the host's network)
    config = tmp_path / "config.yaml"
    config.write_text("http: {host: 127.0.0.1, port: 0}\n", encoding="utf-8")
    config.chmod(0o644)  # read by the image's user
    async with FakeOpenAI() as fake:
        fake.push("The capital of Mongolia is Ulaanbaatar.")
        model = {"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-image-test", "CHINWAG_MODEL": "fake-model"}
        code, out, err = await container.run(
            ["chinwag", "run"], "what is the capital of Mongolia?\n", model, {"/data/config.yaml": config}
        )
    assert code == 0, err
    assert "The capital of Mongolia is Ulaanbaatar." in out
    assert fake.requests[0]["model"] == "fake-model"
    assert "ops http on http://127.0.0.1:" in err and "data in /data" in err
    assert "Traceback" not in err
