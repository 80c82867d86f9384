"""The CPU kernels' thread pool under stress: every task of every job runs once, on its own job, before the job
returns (a task counted for the wrong job once let a matmul return while one of its strips still wrote)."""

import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CPU = ROOT / "lexi" / "kernels" / "cpu"


def compiler() -> str:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    found = shutil.which(cc) or shutil.which("cc") or shutil.which("gcc")
    if not found:
        pytest.fail("no C compiler: the CPU kernels are built with one, so the machine running the tests has it")
    return found


@pytest.mark.parametrize("threads", [2, 4])
def test_every_task_runs_once_on_its_own_job(tmp_path, threads):
    binary = tmp_path / "pool_stress"
    subprocess.run(
        [compiler(), "-O2", "-std=gnu11", "-pthread", f"-I{CPU}", str(Path(__file__).with_name("pool_stress.c")),
         str(CPU / "pool.c"), "-o", str(binary)],
        check=True,
    )  # fmt: skip
    out = subprocess.run([str(binary), str(threads), "3"], check=True, capture_output=True, text=True).stdout
    words = out.split()
    counts = dict(zip(words[::2], map(int, words[1::2]), strict=True))
    assert counts["jobs"] > 10_000, out
    assert counts["stale"] == 0 and counts["wrong"] == 0, out
