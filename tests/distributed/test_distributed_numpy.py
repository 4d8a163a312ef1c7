"""numpy is a dependency of kvrules, which kvrules.distributed needs (issue 25, missing dependency).

torch's object collectives (``all_gather_object``) decode every rank's payload with
``tensor.numpy()``, and torch does not depend on numpy: on a fresh ``pip install kvrules`` every
rank failed with "RuntimeError: Numpy is not available", reported as a rank that never called.
Now kvrules depends on numpy; without it (``--no-deps``) every rank says so before the first
collective; and the wheel smoke test plans across two ranks in its fresh environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: one gloo rank (file store) planning one layer; ``block`` makes numpy unimportable first
ONE_RANK = """
import sys, warnings
if {block}:
    sys.modules["numpy"] = None
warnings.simplefilter("ignore")
import torch.distributed as dist
import kvrules
from kvrules.distributed import plan_across_ranks
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
try:
    spec = kvrules.FullAttentionSpec(16, num_kv_heads=2, head_size=64, dtype="bfloat16")
    worker = plan_across_ranks({{"a": spec}}, 1 << 30, kvrules.EngineConfig(max_model_len=1024))
    print("planned", worker.num_blocks)
except kvrules.KVRulesError as exc:
    print(type(exc).__name__, exc)
finally:
    dist.destroy_process_group()
"""


def one_rank(tmp_path: Path, *, block: bool) -> str:
    done = subprocess.run(
        [sys.executable, "-c", ONE_RANK.format(block=block), str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_numpy_is_a_dependency_of_kvrules() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert "numpy" in [
        req.split(">")[0].split("=")[0].split("<")[0].strip() for req in project["dependencies"]
    ]


def test_without_numpy_a_rank_says_so_before_the_first_collective(tmp_path: Path) -> None:
    said = one_rank(tmp_path, block=True)
    assert said.startswith("ConfigError kvrules.distributed needs numpy"), said
    assert "pip install numpy" in said


def test_with_numpy_one_rank_plans(tmp_path: Path) -> None:
    assert one_rank(tmp_path, block=False) == "planned 131072"  # 1 GiB of 8 KiB pages


def test_the_wheel_smoke_two_rank_check_passes_on_the_development_install(tmp_path: Path) -> None:
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT / 'scripts')!r})\n"
        "import wheel_smoke\n"
        "if __name__ == '__main__':\n"
        "    print(wheel_smoke.distributed_problems())\n"
    )
    script = tmp_path / "ranks.py"
    script.write_text(code, encoding="utf-8")
    env = {
        k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    }
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=180, cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout + done.stderr[-2000:]
