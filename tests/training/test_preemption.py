"""SIGTERM on a single-process run: checkpoint at the next step, exit 0, resume from there."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

# Both runs train to the same --train_iters (the learning-rate schedule, hence the compiled step,
# is the same: the resumed run finds it in the compilation cache); enough steps that the first run
# is still training when the SIGTERM lands, however loaded the machine.
ITERS = 100


def test_sigterm_checkpoints_and_exits_zero_then_resumes(tmp_path):
    common = [
        sys.executable, "-m", "jaxblend.train", "--mock_data", "--seq_length=16",
        "--global_batch_size=8", "--hidden_size=32", "--ffn_hidden_size=64", "--num_layers=1",
        "--num_attention_heads=2", "--mock_vocab_size=128", f"--mock_num_samples={ITERS * 8}",
        "--log_interval=1", "--eval_interval=0", "--save_interval=100000",
        f"--workdir={tmp_path}", "--num_cpu_devices=2",
    ]
    proc = subprocess.Popen(
        [*common, f"--train_iters={ITERS}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if re.search(r"step\s+3\s+loss", line):
            proc.send_signal(signal.SIGTERM)
            break
    out = "".join(lines) + proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out[-3000:]
    stopped = re.search(r"preempted: saved checkpoint step (\d+)", out)
    assert stopped, out[-3000:]
    step = int(stopped.group(1))
    assert step < ITERS, out[-3000:]
    assert (tmp_path / "checkpoints" / str(step) / "loader" / "loader_state.json").exists()

    resumed = subprocess.run(
        [*common, f"--train_iters={ITERS}"], capture_output=True, text=True, timeout=300,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from {tmp_path}/checkpoints step {step}" in resumed.stdout
    assert f"finished at step {ITERS}" in resumed.stdout
