"""python -m stages.v0_naive --m 4096 --n 4096 --k 4096: check this stage and time it beside cuBLAS."""

from tutorial.runner import run_stage

run_stage("v0_naive")
