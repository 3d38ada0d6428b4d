"""python -m stages.v5_fused --m 4096 --n 4096 --k 4096: check this stage and time it beside cuBLAS."""

from tutorial.runner import run_stage

run_stage("v5_fused")
