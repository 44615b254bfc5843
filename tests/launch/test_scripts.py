"""Tests of the launch scripts in launch/.

* Every script (and .ci/run) is shellcheck-clean; a missing shellcheck fails (CI installs it).
* The TPU pod scripts run against a stub `gcloud` first on PATH that records its arguments, one
  JSON line per call: the tests assert the exact commands they would issue, then run the remote
  `--command` strings locally in a fake worker home to check they do what they claim.
* Missing or bad settings stop the scripts with a message naming the variable.
* launch/local.sh runs a real 2-process JAX job on this machine.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAUNCH = ROOT / "launch"
POD_SCRIPTS = [
    "pod_create.sh",
    "pod_setup.sh",
    "pod_run.sh",
    "pod_logs.sh",
    "pod_stop.sh",
    "pod_delete.sh",
]
ALL_SCRIPTS = sorted(p.name for p in LAUNCH.glob("*.sh"))
TPU = ["compute", "tpus", "tpu-vm"]
ZONE = "us-west4-a"
SCRIPT_TIMEOUT = 60
HOSTNAME = socket.gethostname()

_STUB_GCLOUD = """\
import json, os, shutil, sys

args = sys.argv[1:]
with open(os.environ["GCLOUD_STUB_LOG"], "a") as f:
    f.write(json.dumps(args) + "\\n")
if "scp" in args:
    local = [a for a in args[args.index("scp") + 1:] if not a.startswith("-")][0]
    shutil.copy(local, os.environ["GCLOUD_STUB_FILES"])
if os.environ.get("GCLOUD_STUB_FAIL") in args:
    sys.exit(3)
"""


def _write_executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _python_shebang() -> str:
    shebang = f"#!{sys.executable}"
    return shebang if len(shebang) < 120 and " " not in shebang else "#!/usr/bin/env python3"


@dataclass
class Result:
    """One script run: exit code, output and the gcloud calls it made."""

    returncode: int
    stdout: str
    stderr: str
    calls: list[list[str]]


class Pod:
    """Runs pod scripts with a recording `gcloud` stub first on PATH."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        stub_bin = tmp_path / "stub-bin"
        _write_executable(stub_bin / "gcloud", f"{_python_shebang()}\n{_STUB_GCLOUD}")
        self.log = tmp_path / "gcloud-calls.jsonl"
        self.files = tmp_path / "scp-files"
        self.files.mkdir()
        self.home = tmp_path / "home"
        self.home.mkdir()
        self.env = {
            "PATH": f"{stub_bin}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "GCLOUD_STUB_LOG": str(self.log),
            "GCLOUD_STUB_FILES": str(self.files),
            "TPU_NAME": "jb-test",
            "ZONE": ZONE,
        }

    def run(self, script: str, *args: str, unset: tuple[str, ...] = (), **env: str) -> Result:
        """Runs launch/<script> ARGS with the base environment plus `env`, minus `unset`."""
        self.log.unlink(missing_ok=True)
        full_env = {k: v for k, v in {**self.env, **env}.items() if k not in unset}
        proc = subprocess.run(
            [str(LAUNCH / script), *args],
            env=full_env,
            cwd=self.tmp,
            check=False,
            capture_output=True,
            text=True,
            timeout=SCRIPT_TIMEOUT,
        )
        calls = []
        if self.log.exists():
            calls = [json.loads(line) for line in self.log.read_text().splitlines()]
        return Result(proc.returncode, proc.stdout, proc.stderr, calls)

    def ok(self, script: str, *args: str, **env: str) -> Result:
        """Like run(), and fails the test unless the script exits 0."""
        result = self.run(script, *args, **env)
        assert result.returncode == 0, f"{script} failed ({result.returncode}):\n{result.stderr}"
        return result


def _remote_command(call: list[str]) -> str:
    """The --command=... argument of a recorded `tpu-vm ssh` call."""
    commands = [a.removeprefix("--command=") for a in call if a.startswith("--command=")]
    assert len(commands) == 1, call
    return commands[0]


def _run_on_fake_worker(command: str, home: Path, path_prefix: Path | None = None) -> str:
    """Runs a remote --command string with bash in `home`, like `tpu-vm ssh` would on a worker."""
    path = os.environ.get("PATH", "/usr/bin:/bin")
    if path_prefix is not None:
        path = f"{path_prefix}{os.pathsep}{path}"
    proc = subprocess.run(
        ["bash", "-c", command],
        cwd=home,
        env={"PATH": path, "HOME": str(home)},
        check=False,
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT,
    )
    assert proc.returncode == 0, f"remote command failed ({proc.returncode}):\n{proc.stderr}"
    return proc.stdout


def _wait_for(path: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {timeout} s")
        time.sleep(0.05)


def _shellcheck() -> str:
    found = shutil.which("shellcheck")
    if found is None:
        pytest.fail(
            "shellcheck is not installed: `apt-get install -y shellcheck` (python3 dev.py test "
            "installs it); the launch scripts must be checked, so this test does not skip"
        )
    return found


@pytest.fixture
def pod(tmp_path: Path) -> Pod:
    return Pod(tmp_path)


def _make_source_tree(root: Path) -> Path:
    """A small jaxblend-like tree: what pod_setup.sh needs plus files to include and exclude."""
    (root / "pkg").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (root / "pkg" / "mod.py").write_text("X = 1\n")
    (root / "launch").mkdir()
    shutil.copy(LAUNCH / "worker.sh", root / "launch" / "worker.sh")
    (root / ".venv" / "bin").mkdir(parents=True)
    (root / ".venv" / "bin" / "python").write_text("not shipped\n")
    (root / "pkg" / "__pycache__").mkdir()
    (root / "pkg" / "__pycache__" / "mod.pyc").write_text("not shipped\n")
    return root


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        [
            "git",
            "-c",
            "user.name=test",
            "-c",
            "user.email=test@example.com",
            "-c",
            "init.defaultBranch=main",
            *args,
        ],
        cwd=cwd,
        check=True,
        capture_output=True,
        timeout=SCRIPT_TIMEOUT,
    )


def _tar_members(path: Path) -> set[str]:
    with tarfile.open(path) as tar:
        return {m.name.removeprefix("./") for m in tar.getmembers() if m.isfile()}


class TestShellcheck:
    @pytest.mark.parametrize("script", [*ALL_SCRIPTS, "../.ci/run"])
    def test_clean(self, script: str) -> None:
        path = (LAUNCH / script).resolve()
        proc = subprocess.run(
            [_shellcheck(), "--external-sources", str(path)],
            cwd=ROOT,
            check=False,
            capture_output=True,
            text=True,
            timeout=SCRIPT_TIMEOUT,
        )
        assert proc.returncode == 0, f"shellcheck findings in {path}:\n{proc.stdout}{proc.stderr}"

    def test_expected_scripts_exist(self) -> None:
        expected = {"local.sh", "pod_env.sh", "worker.sh", *POD_SCRIPTS}
        assert expected <= set(ALL_SCRIPTS)

    @pytest.mark.parametrize("script", [s for s in ALL_SCRIPTS if s != "pod_env.sh"])
    def test_strict_mode_and_executable(self, script: str) -> None:
        path = LAUNCH / script
        text = path.read_text()
        assert text.startswith("#!/usr/bin/env bash\n")
        assert "\nset -euo pipefail\n" in text
        assert os.access(path, os.X_OK), f"{path} is not executable"


class TestPodCreate:
    def test_defaults(self, pod: Pod) -> None:
        result = pod.ok("pod_create.sh")
        assert result.calls == [
            [
                *TPU,
                "create",
                "jb-test",
                "--accelerator-type=v5litepod-16",
                "--version=v2-alpha-tpuv5-lite",
                f"--zone={ZONE}",
            ],
        ]

    def test_project_spot_and_extra_flags(self, pod: Pod) -> None:
        result = pod.ok(
            "pod_create.sh",
            "--labels=team=data",
            "--description=two words",
            PROJECT="my-proj",
            CAPACITY="spot",
            ACCELERATOR_TYPE="v4-32",
            RUNTIME_VERSION="tpu-ubuntu2204-base",
        )
        assert result.calls == [
            [
                *TPU,
                "create",
                "jb-test",
                "--accelerator-type=v4-32",
                "--version=tpu-ubuntu2204-base",
                "--spot",
                "--labels=team=data",
                "--description=two words",
                f"--zone={ZONE}",
                "--project=my-proj",
            ],
        ]

    def test_preemptible(self, pod: Pod) -> None:
        result = pod.ok("pod_create.sh", CAPACITY="preemptible")
        assert "--preemptible" in result.calls[0]
        assert "--spot" not in result.calls[0]

    def test_bad_capacity(self, pod: Pod) -> None:
        result = pod.run("pod_create.sh", CAPACITY="cheap")
        assert result.returncode != 0
        assert "CAPACITY='cheap'" in result.stderr
        assert result.calls == []

    def test_dry_run_prints_and_calls_nothing(self, pod: Pod) -> None:
        result = pod.ok("pod_create.sh", DRY_RUN="1")
        assert result.calls == []
        assert "+ gcloud compute tpus tpu-vm create jb-test --accelerator-type=v5litepod-16" in (
            result.stderr
        )


class TestPodSetup:
    def test_commands_and_tarball_of_git_worktree(self, pod: Pod, tmp_path: Path) -> None:
        src = _make_source_tree(tmp_path / "src")
        (src / ".gitignore").write_text(".venv/\n__pycache__/\nsecret.txt\n")
        (src / "secret.txt").write_text("ignored\n")
        _git(src, "init", "-q")
        _git(src, "add", "pyproject.toml", "pkg/mod.py", "launch/worker.sh", ".gitignore")
        (src / "untracked.py").write_text("shipped: not ignored\n")

        result = pod.ok("pod_setup.sh", SOURCE_DIR=str(src), PROJECT="my-proj")
        assert len(result.calls) == 2
        scp, ssh = result.calls
        assert scp[:4] == [*TPU, "scp"]
        assert Path(scp[4]).name == "jaxblend-src.tar.gz"
        assert scp[5:] == [
            "jb-test:jaxblend-src.tar.gz",
            "--worker=all",
            f"--zone={ZONE}",
            "--project=my-proj",
        ]
        assert not Path(scp[4]).exists(), "the local tarball should be removed afterwards"
        assert ssh[:6] == [*TPU, "ssh", "jb-test", "--worker=all"]
        assert ssh[7:] == [f"--zone={ZONE}", "--project=my-proj"]
        assert _remote_command(ssh) == (
            "mkdir -p jaxblend && tar -xzf jaxblend-src.tar.gz -C jaxblend && "
            "rm -f jaxblend-src.tar.gz && cd jaxblend && env LOG_DIR=logs RUN_NAME=train "
            "JAXBLEND_EXTRAS=tokenizers,train 'JAX_SPEC=jax[tpu]' bash launch/worker.sh setup"
        )
        assert _tar_members(pod.files / "jaxblend-src.tar.gz") == {
            ".gitignore",
            "pyproject.toml",
            "pkg/mod.py",
            "launch/worker.sh",
            "untracked.py",
        }

    def test_git_ref_ships_the_commit(self, pod: Pod, tmp_path: Path) -> None:
        src = _make_source_tree(tmp_path / "src")
        _git(src, "init", "-q")
        _git(src, "add", "pyproject.toml", "pkg/mod.py", "launch/worker.sh")
        _git(src, "commit", "-q", "-m", "one")
        (src / "pkg" / "mod.py").write_text("X = 2  # uncommitted\n")
        pod.ok("pod_setup.sh", SOURCE_DIR=str(src), GIT_REF="HEAD")
        tarball = pod.files / "jaxblend-src.tar.gz"
        assert _tar_members(tarball) == {"pyproject.toml", "pkg/mod.py", "launch/worker.sh"}
        with tarfile.open(tarball) as tar:
            assert tar.extractfile("pkg/mod.py").read() == b"X = 1\n"

    def test_plain_directory_excludes_venv_and_caches(self, pod: Pod, tmp_path: Path) -> None:
        src = _make_source_tree(tmp_path / "src")
        pod.ok("pod_setup.sh", SOURCE_DIR=str(src))
        assert _tar_members(pod.files / "jaxblend-src.tar.gz") == {
            "pyproject.toml",
            "pkg/mod.py",
            "launch/worker.sh",
        }

    def test_not_a_jaxblend_tree(self, pod: Pod, tmp_path: Path) -> None:
        result = pod.run("pod_setup.sh", SOURCE_DIR=str(tmp_path))
        assert result.returncode != 0
        assert "SOURCE_DIR=" in result.stderr
        assert result.calls == []

    def test_failed_copy_stops_before_install(self, pod: Pod, tmp_path: Path) -> None:
        src = _make_source_tree(tmp_path / "src")
        result = pod.run("pod_setup.sh", SOURCE_DIR=str(src), GCLOUD_STUB_FAIL="scp")
        assert result.returncode != 0
        assert [c[3] for c in result.calls] == ["scp"]

    def test_install_runs_on_a_fake_worker(self, pod: Pod, tmp_path: Path) -> None:
        """Replays the ssh command in a fake home: unpack, venv, pip install (recorded)."""
        src = _make_source_tree(tmp_path / "src")
        result = pod.ok(
            "pod_setup.sh",
            SOURCE_DIR=str(src),
            REMOTE_DIR="jax blend",
            JAXBLEND_EXTRAS="tokenizers,plot",
        )
        worker_home = tmp_path / "worker"
        worker_home.mkdir()
        shutil.copy(pod.files / "jaxblend-src.tar.gz", worker_home)
        fake_bin = tmp_path / "fake-bin"
        # `python3 -m venv DIR` makes DIR/bin/python a recorder of its arguments; `-c` is real.
        _write_executable(
            fake_bin / "python3",
            f"""#!/usr/bin/env bash
if [[ $1 == -m && $2 == venv ]]; then
  mkdir -p "$3/bin"
  printf '%s\\n' '#!/usr/bin/env bash' \\
    'printf "%s\\n" "$*" >>"$(dirname "$0")/../../python_calls.txt"' >"$3/bin/python"
  chmod +x "$3/bin/python"
  exit 0
fi
exec {shlex.quote(sys.executable)} "$@"
""",
        )
        _run_on_fake_worker(_remote_command(result.calls[1]), worker_home, fake_bin)
        remote = worker_home / "jax blend"
        assert (remote / "pkg" / "mod.py").read_text() == "X = 1\n"
        assert not (worker_home / "jaxblend-src.tar.gz").exists()
        calls = (remote / "python_calls.txt").read_text().splitlines()
        assert [c for c in calls if c.startswith("-m pip")] == [
            "-m pip install -q --upgrade pip",
            "-m pip install -q -e .[tokenizers,plot] jax[tpu]",
        ]


class TestPodRun:
    def test_command(self, pod: Pod) -> None:
        result = pod.ok("pod_run.sh", "--train_iters=10", "--note=two words")
        assert len(result.calls) == 1
        call = result.calls[0]
        assert call[:6] == [*TPU, "ssh", "jb-test", "--worker=all"]
        assert call[7:] == [f"--zone={ZONE}"]
        command = _remote_command(call)
        assert command == (
            "cd jaxblend && env LOG_DIR=logs RUN_NAME=train bash launch/worker.sh start "
            ".venv/bin/python -m jaxblend.train --flagfile=configs/pod.flags --train_iters=10 "
            "'--note=two words'"
        )
        assert "python -m jaxblend.train --flagfile=configs/pod.flags" in command
        assert "coordinator_address" not in command and "process_id" not in command

    def test_flagfile_and_run_name(self, pod: Pod) -> None:
        result = pod.ok(
            "pod_run.sh",
            FLAGFILE="configs/megatron_migration.flags",
            RUN_NAME="mig",
            LOG_DIR="/tmp/x logs",
        )
        assert _remote_command(result.calls[0]) == (
            "cd jaxblend && env 'LOG_DIR=/tmp/x logs' RUN_NAME=mig bash launch/worker.sh start "
            ".venv/bin/python -m jaxblend.train --flagfile=configs/megatron_migration.flags"
        )

    def test_bucket_flags(self, pod: Pod) -> None:
        result = pod.ok("pod_run.sh", "--train_iters=10", BUCKET="gs://my-bucket/run1/")
        assert _remote_command(result.calls[0]) == (
            "cd jaxblend && env LOG_DIR=logs RUN_NAME=train bash launch/worker.sh start "
            ".venv/bin/python -m jaxblend.train --flagfile=configs/pod.flags "
            "--data_cache_path=gs://my-bucket/run1/index_cache "
            "--checkpoint_dir=gs://my-bucket/run1/checkpoints --train_iters=10"
        )

    def test_bad_bucket(self, pod: Pod) -> None:
        result = pod.run("pod_run.sh", BUCKET="/mnt/shared")
        assert result.returncode != 0
        assert "BUCKET='/mnt/shared' must be a gs:// or s3:// URL" in result.stderr
        assert result.calls == []

    def test_bad_run_name(self, pod: Pod) -> None:
        result = pod.run("pod_run.sh", RUN_NAME="a b")
        assert result.returncode != 0
        assert "RUN_NAME='a b'" in result.stderr
        assert result.calls == []


class TestWorkerStartStop:
    """pod_run.sh / pod_logs.sh / pod_stop.sh commands replayed on a fake worker."""

    @pytest.fixture
    def worker(self, tmp_path: Path) -> Iterator[Path]:
        """A fake worker home with REMOTE_DIR='jax blend' and a recording .venv/bin/python."""
        home = tmp_path / "worker"
        remote = home / "jax blend"
        (remote / "launch").mkdir(parents=True)
        shutil.copy(LAUNCH / "worker.sh", remote / "launch" / "worker.sh")
        _write_executable(
            remote / ".venv" / "bin" / "python",
            f"""{_python_shebang()}
import json, os, sys, time
with open("fake.pid", "w") as f:
    f.write(str(os.getpid()))
print("fake training started", flush=True)
with open("argv.json.tmp", "w") as f:
    json.dump(sys.argv[1:], f)
os.replace("argv.json.tmp", "argv.json")
time.sleep(120)
""",
        )
        yield home
        fake_pid = remote / "fake.pid"
        if fake_pid.exists() and _running(int(fake_pid.read_text())):
            os.kill(int(fake_pid.read_text()), signal.SIGKILL)  # the test failed before stopping it

    def test_start_logs_stop(self, pod: Pod, worker: Path) -> None:
        remote = worker / "jax blend"
        run = pod.ok("pod_run.sh", '--note=it\'s "quoted"', "--x=$HOME", REMOTE_DIR="jax blend")
        out = _run_on_fake_worker(_remote_command(run.calls[0]), worker)
        assert f"{HOSTNAME}: started 'train'" in out
        _wait_for(remote / "argv.json")
        assert json.loads((remote / "argv.json").read_text()) == [
            "-m",
            "jaxblend.train",
            "--flagfile=configs/pod.flags",
            '--note=it\'s "quoted"',
            "--x=$HOME",
        ]
        log = remote / "logs" / f"train-{HOSTNAME}.log"
        pid_file = remote / "logs" / f"train-{HOSTNAME}.pid"
        assert pid_file.exists()
        pid = int(pid_file.read_text())

        # A second start of the same run is refused while it runs.
        again = subprocess.run(
            ["bash", "-c", _remote_command(run.calls[0])],
            cwd=worker,
            check=False,
            capture_output=True,
            text=True,
            timeout=SCRIPT_TIMEOUT,
        )
        assert again.returncode != 0
        assert "already running" in again.stderr

        logs = pod.ok("pod_logs.sh", REMOTE_DIR="jax blend", FOLLOW="0", LOG_LINES="50")
        _wait_for_text(log, "fake training started")
        shown = _run_on_fake_worker(_remote_command(logs.calls[0]), worker)
        assert "fake training started" in shown
        assert "jaxblend.train --flagfile=configs/pod.flags" in shown  # the header line

        stop = pod.ok("pod_stop.sh", REMOTE_DIR="jax blend", STOP_TIMEOUT="10")
        out = _run_on_fake_worker(_remote_command(stop.calls[0]), worker)
        assert f"stopped 'train' (pid {pid})" in out
        assert not pid_file.exists()
        assert not _running(pid), f"pid {pid} still runs after pod_stop.sh"


def _running(pid: int) -> bool:
    """True if process `pid` exists and is not a zombie (Linux /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in status


def _wait_for_text(path: Path, text: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and text in path.read_text()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} not in {path} within {timeout} s")
        time.sleep(0.05)


class TestPodLogsStopDelete:
    def test_logs_default_worker_0_follows(self, pod: Pod) -> None:
        result = pod.ok("pod_logs.sh")
        assert result.calls == [
            [
                *TPU,
                "ssh",
                "jb-test",
                "--worker=0",
                "--command=cd jaxblend && tail -n 100 -F logs/train-*.log",
                f"--zone={ZONE}",
            ],
        ]

    def test_logs_all_workers(self, pod: Pod) -> None:
        result = pod.ok("pod_logs.sh", "all", FOLLOW="0", LOG_LINES="5", RUN_NAME="r2")
        assert result.calls == [
            [
                *TPU,
                "ssh",
                "jb-test",
                "--worker=all",
                "--command=cd jaxblend && tail -n 5 logs/r2-*.log",
                f"--zone={ZONE}",
            ],
        ]

    def test_logs_bad_worker(self, pod: Pod) -> None:
        result = pod.run("pod_logs.sh", "first")
        assert result.returncode != 0
        assert "WORKER='first'" in result.stderr
        assert result.calls == []

    def test_stop(self, pod: Pod) -> None:
        result = pod.ok("pod_stop.sh", PROJECT="p1")
        assert result.calls == [
            [
                *TPU,
                "ssh",
                "jb-test",
                "--worker=all",
                (
                    "--command=cd jaxblend && env LOG_DIR=logs RUN_NAME=train STOP_TIMEOUT=30 "
                    "bash launch/worker.sh stop"
                ),
                f"--zone={ZONE}",
                "--project=p1",
            ],
        ]

    def test_delete(self, pod: Pod) -> None:
        result = pod.ok("pod_delete.sh", PROJECT="p1")
        assert result.calls == [
            [*TPU, "delete", "jb-test", "--quiet", f"--zone={ZONE}", "--project=p1"],
        ]


class TestRequiredSettings:
    @pytest.mark.parametrize("variable", ["TPU_NAME", "ZONE"])
    @pytest.mark.parametrize("script", POD_SCRIPTS)
    def test_missing_variable(self, pod: Pod, script: str, variable: str) -> None:
        result = pod.run(script, unset=(variable,))
        assert result.returncode != 0
        assert variable in result.stderr
        assert result.calls == []

    @pytest.mark.parametrize("script", POD_SCRIPTS)
    def test_empty_variable(self, pod: Pod, script: str) -> None:
        result = pod.run(script, ZONE="")
        assert result.returncode != 0
        assert "ZONE" in result.stderr
        assert result.calls == []

    def test_bad_tpu_name(self, pod: Pod) -> None:
        result = pod.run("pod_delete.sh", TPU_NAME="My_TPU")
        assert result.returncode != 0
        assert "TPU_NAME='My_TPU'" in result.stderr
        assert result.calls == []


class TestLocal:
    def _run(self, *args: str, timeout: float = SCRIPT_TIMEOUT, **env: str):
        return subprocess.run(
            [str(LAUNCH / "local.sh"), *args],
            env={**os.environ, **env},
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    @pytest.mark.parametrize(
        "variable, value", [("NUM_PROCESSES", "0"), ("DEVICES_PER_PROCESS", "two")]
    )
    def test_bad_counts(self, variable: str, value: str) -> None:
        result = self._run(**{variable: value, "PYTHON": sys.executable})
        assert result.returncode != 0
        assert f"{variable}='{value}'" in result.stderr

    def test_missing_python(self) -> None:
        result = self._run(PYTHON="/nonexistent/python")
        assert result.returncode != 0
        assert "PYTHON='/nonexistent/python'" in result.stderr

    def test_missing_flagfile(self) -> None:
        result = self._run(PYTHON=sys.executable, FLAGFILE="configs/nope.flags")
        assert result.returncode != 0
        assert "FLAGFILE='configs/nope.flags'" in result.stderr

    def test_not_a_module(self) -> None:
        result = self._run("--", "./train.py", PYTHON=sys.executable)
        assert result.returncode != 0
        assert "'./train.py' is not a Python module name" in result.stderr

    @pytest.mark.multiprocess
    @pytest.mark.slow
    def test_two_processes_dump_batches(self, tmp_path: Path) -> None:
        out = tmp_path / "out"
        result = self._run(
            "--",
            "python",
            "-m",
            "jaxblend.tools.dump_batches",
            "--mock_data",
            "--seq_length=16",
            "--global_batch_size=8",
            "--steps=2",
            "--mesh_shape=8",
            "--mesh_axes=data",
            f"--out={out}",
            "--distributed_timeout=60",
            timeout=300,
            NUM_PROCESSES="2",
            DEVICES_PER_PROCESS="4",
            PYTHON=sys.executable,
            LAUNCH_TIMEOUT="240",
        )
        assert result.returncode == 0, f"local.sh failed:\n{result.stdout[-6000:]}{result.stderr}"
        assert "[0] " in result.stdout and "[1] " in result.stdout
        import numpy as np

        with np.load(out / "batches.npz") as batches:
            assert batches.files
            for key in batches.files:
                assert batches[key].shape[:2] == (2, 8), key
