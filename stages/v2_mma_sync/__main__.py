"""python -m stages.v2_mma_sync --m 4096 --n 4096 --k 4096: check this stage and time it beside cuBLAS."""

from tutorial.runner import run_stage

run_stage("v2_mma_sync")
