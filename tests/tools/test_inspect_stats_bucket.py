"""`inspect stats` reaches bucket data with the flags' data access (`--s3_endpoint` only)."""

from __future__ import annotations

import json
import os

import numpy as np
from helpers_cli import run_tool
from helpers_data import write_random_dataset

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENDPOINT_ENVS = ("JAXBLEND_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


def test_stats_of_bucket_data_with_the_endpoint_given_as_a_flag(s3_server, tmp_path):
    prefix = write_random_dataset(str(tmp_path / "d"), np.random.default_rng(0), 30, lengths=(3, 40))
    url = s3_server.upload(prefix, "stats/d")
    env = {k: v for k, v in os.environ.items() if k not in ENDPOINT_ENVS}
    env.update({k: v for k, v in s3_server.environ().items() if k not in ENDPOINT_ENVS})

    def stats(data_path: str, *extra: str) -> dict:
        out = run_tool("jaxblend.tools.inspect", ["stats", f"--data_path={data_path}",
             f"--json={tmp_path / 'stats.json'}", *extra], env=env, cwd=ROOT)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads((tmp_path / "stats.json").read_text())

    remote = stats(url, f"--s3_endpoint={s3_server.url}")
    local = stats(prefix)
    assert list(remote[url].values()) == list(local[prefix].values())
