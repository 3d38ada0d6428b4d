"""A model that trains on the library kernel: a small transformer built from random weights, trained on
synthetic data with deepgemm.nn.Linear and, from the same seed, with nn.Linear; the loss curves compared and
the training step timed, eager and torch.compile'd.

    python -m tutorial.train [--steps 300] [--widths 1024,2048] [--record]     --record: results/<gpu>/train.json

The model: `blocks` pre-norm transformer blocks (causal attention through F.scaled_dot_product_attention, an
MLP with GELU) and a linear head, in BF16, every weight random from the seed. The task: regress a fixed random
linear map of fresh Gaussian inputs, the same inputs in both runs, mean squared error; its loss falls without
a plateau. A task with one (a random MLP as the teacher) turns the two runs' rounding differences into escape
times a few steps apart: on the CPU, with both runs the same arithmetic up to rounding, their 20-step means
differed by 14% at the escape and 2.6% at the end, where this task's differ by 0.05%. The optimizer is AdamW
on FP32 master copies of the BF16 weights. The deepgemm run is the same model with every nn.Linear swapped
for deepgemm.nn.Linear.from_linear, the MLP's GELU fused into its first layer.

Checked: every linear layer's first gradient against nn.Linear's (relative Frobenius error within GRAD_TOL),
the loss falling below LEARNED of where it started (a model whose gradients were dropped does not learn),
and every WINDOW steps' mean loss within CURVE_TOL of nn.Linear's or within CONTROL_FACTOR times the largest
gap of a control run: nn.Linear's model with its GEMMs computed in FP32 and rounded to BF16, a run that
differs from nn.Linear's in rounding alone. On the GPU rounding alone moves a loss spike by a step or two,
and past step 100 the control's 20-step means stray from nn.Linear's by up to 7.5% in any window, the last
included (results/h200/train.json). Timed: the forward and
backward, and the whole step with the optimizer, per step, eager and compiled (fullgraph: no graph break),
the median over windows of CUDA events, at each of --widths (a step at width 1024 issues about 150 kernels
of 30 us or less, and the host's time per launch shows; at 2048 the GEMMs are four times the work); the peak
memory of a step; the deepgemm model also with the MLP's
first layer calling `torch.ops.deepgemm.gemm` directly, which fuses the GELU and recomputes its input in the
backward, against `deepgemm.nn.Linear`, which keeps it (deepgemm/torch_ops.py says why). Each row also
counts the library calls a step runs from C++ (`deepgemm.fast`), the rest going through Python.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import deepgemm.nn as dnn
from deepgemm import fast
from tutorial import results
from tutorial.runner import gpu_available, log

RECORD = "train"
COMMAND = "python -m tutorial.train --record"
GRAD_TOL = 0.02  # BF16 outputs round at 2^-9 relative; a dropped or wrong gradient is off by ~1
CURVE_TOL = 0.02  # the runs differ in the GEMMs' rounding alone: 5e-4 between two CPU runs of this task
CONTROL_FACTOR = 2.0  # a window may stray from nn.Linear's run twice as far as the rounding control's does
WINDOW = 20  # steps per compared mean: single steps differ by their own rounding noise
LEARNED = 0.5  # the last window's loss below this fraction of the first's: the weights learn
TIMED_WINDOWS, TIMED_STEPS, WARMUP_STEPS = 5, 10, 3


@dataclass(frozen=True)
class Setup:
    """The model, the data and the run."""

    width: int = 1024
    heads: int = 16
    blocks: int = 2
    batch: int = 16
    tokens: int = 512  # batch x tokens = 8192 rows per GEMM
    steps: int = 300
    lr: float = 6e-4
    seed: int = 0
    device: str = "cuda"


class Block(nn.Module):
    """Pre-norm attention and MLP, each added to the residual stream."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.act: nn.Module = nn.GELU()  # nn.Identity() where fc1 fuses it
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(attended)
        return x + self.fc2(self.act(self.fc1(self.norm2(x))))


class Model(nn.Module):
    def __init__(self, setup: Setup) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*(Block(setup.width, setup.heads) for _ in range(setup.blocks)))
        self.norm = nn.LayerNorm(setup.width)
        self.head = nn.Linear(setup.width, setup.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.blocks(x)))


class RecomputingLinear(dnn.Linear):
    """deepgemm.nn.Linear through the op itself: the activation fused in the forward, z recomputed (a second
    GEMM) in the backward, where deepgemm.nn.Linear keeps z."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.ops.deepgemm.gemm(x.reshape(-1, x.shape[-1]), self.weight.T, self.bias, 1.0, self.activation)
        return y.reshape(*x.shape[:-1], y.shape[-1])


class Fp32Linear(nn.Linear):
    """nn.Linear with its GEMMs in FP32, rounded to the input's type: the control run's layer."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = None if self.bias is None else self.bias.float()
        return F.linear(x.float(), self.weight.float(), bias).to(x.dtype)


LINEARS = ("torch", "deepgemm", "deepgemm, z recomputed")
CONTROL = "torch, fp32 GEMMs"


def build(setup: Setup, linear: str = "torch") -> Model:
    """The model from the seed, in BF16 on the setup's device, its linears those `linear` names."""
    torch.manual_seed(setup.seed)
    model = Model(setup).to(device=setup.device, dtype=torch.bfloat16)
    if linear == "torch":
        return model
    if linear == CONTROL:
        for module in model.modules():
            if type(module) is nn.Linear:
                module.__class__ = Fp32Linear
        return model
    for block in model.blocks:
        block.qkv, block.proj, block.fc2 = (dnn.Linear.from_linear(m) for m in (block.qkv, block.proj, block.fc2))
        kind = RecomputingLinear if linear == "deepgemm, z recomputed" else dnn.Linear
        block.fc1, block.act = kind.from_linear(block.fc1, activation="gelu"), nn.Identity()
    model.head = dnn.Linear.from_linear(model.head)
    return model


def batches(setup: Setup) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Fresh inputs and their targets, x @ A for a fixed random A of unit gain, the same sequence for every
    model built from the setup."""
    gen = torch.Generator(setup.device).manual_seed(setup.seed + 1)
    shape, width = (setup.batch, setup.tokens, setup.width), setup.width
    target_map = torch.randn(width, width, generator=gen, device=setup.device) / width**0.5
    while True:
        x = torch.randn(shape, generator=gen, device=setup.device)
        yield x.to(torch.bfloat16), (x @ target_map).to(torch.bfloat16)


class MasterAdamW:
    """AdamW on FP32 copies of BF16 parameters: the gradients are read into the copies, the step is taken
    there, and the parameters become the copies rounded to BF16."""

    def __init__(self, params: Sequence[nn.Parameter], lr: float) -> None:
        self.params = list(params)
        self.masters = [p.detach().float().requires_grad_() for p in self.params]
        self.opt = torch.optim.AdamW(self.masters, lr=lr, weight_decay=0.0)

    @torch.no_grad()
    def step(self) -> None:
        for p, master in zip(self.params, self.masters):
            master.grad = p.grad.float()
        self.opt.step()
        for p, master in zip(self.params, self.masters):
            p.copy_(master)


def loss_of(model: nn.Module, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(model(x).float(), target.float())


def forward_backward(model: nn.Module, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    for p in model.parameters():
        p.grad = None
    loss = loss_of(model, x, target)
    loss.backward()
    return loss


def curve(setup: Setup, linear: str) -> tuple[list[float], dict[str, torch.Tensor]]:
    """The loss at every step of a run, and every linear layer's first gradient by name."""
    model, data = build(setup, linear), batches(setup)
    opt = MasterAdamW(list(model.parameters()), setup.lr)
    losses, first = [], {}
    for step in range(setup.steps):
        loss = forward_backward(model, *next(data))
        if step == 0:
            first = {name: p.grad.float().clone() for name, p in model.named_parameters() if name.endswith("weight")
                     and p.dim() == 2}  # fmt: skip
        opt.step()
        losses.append(loss.item())
    return losses, first


def window_means(losses: Sequence[float], window: int = WINDOW) -> list[float]:
    return [statistics.fmean(losses[i : i + window]) for i in range(0, len(losses) - window + 1, window)]


def compare(
    reference: Sequence[float], other: Sequence[float], grads: dict[str, float], control: Sequence[float] | None = None
) -> dict[str, Any]:
    """The checks of a deepgemm run against the nn.Linear one: window means (against the control's gaps, where
    given), the last window, learning, first gradients."""
    gaps = window_gaps(reference, other)
    control_gap = max(window_gaps(reference, control)) if control is not None else 0.0
    allowed = max(CURVE_TOL, CONTROL_FACTOR * control_gap)
    learned = window_means(reference)[-1] / window_means(reference)[0]
    check = {
        "window": WINDOW,
        "curve_tol": CURVE_TOL,
        "control_factor": CONTROL_FACTOR,
        "control_max_window_gap": control_gap,
        "allowed_window_gap": allowed,
        "max_window_gap": max(gaps),
        "last_window_gap": gaps[-1],
        "learned": learned,
        "learned_below": LEARNED,
        "grad_tol": GRAD_TOL,
        "grad_rel_err": grads,
    }
    check["passed"] = max(gaps) <= allowed and learned < LEARNED and max(grads.values()) <= GRAD_TOL
    return check


def window_gaps(reference: Sequence[float], other: Sequence[float]) -> list[float]:
    """Each window's mean loss against the reference's, relative."""
    return [abs(a - b) / b for a, b in zip(window_means(other), window_means(reference))]


def grad_errors(reference: dict[str, torch.Tensor], other: dict[str, torch.Tensor]) -> dict[str, float]:
    """Relative Frobenius error of each layer's gradient against the reference run's."""
    return {name: ((other[name] - g).norm() / g.norm()).item() for name, g in reference.items()}


def run_curves(setup: Setup) -> dict[str, Any]:
    """Both runs, eager, and their comparison."""
    ref_losses, ref_grads = curve(setup, "torch")
    losses, grads = curve(setup, "deepgemm")
    control, _ = curve(setup, CONTROL)
    check = compare(ref_losses, losses, grad_errors(ref_grads, grads), control)
    return {"curves": {"torch": ref_losses, "deepgemm": losses, CONTROL: control}, "check": check}


def median_ms(step: Callable[[], Any], windows: int = TIMED_WINDOWS, steps: int = TIMED_STEPS) -> float:
    """Milliseconds per call of `step`: the median over windows of back-to-back calls, CUDA events around each."""
    times = []
    for _ in range(windows):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(steps):
            step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / steps)
    return statistics.median(times)


def time_model(setup: Setup, linear: str, mode: str) -> dict[str, Any]:
    """One row: a model's forward and backward and its whole step, per step, eager or compiled."""
    model = build(setup, linear)
    opt = MasterAdamW(list(model.parameters()), setup.lr)
    run = torch.compile(model, fullgraph=True) if mode == "compiled" else model
    x, target = next(batches(setup))
    start = time.perf_counter()
    forward_backward(run, x, target)  # compiles, where compiled
    torch.cuda.synchronize()
    first_s = time.perf_counter() - start
    for _ in range(WARMUP_STEPS):
        forward_backward(run, x, target)
        opt.step()
    before = cpp_calls()
    fwd_bwd = median_ms(lambda: forward_backward(run, x, target))
    cpp_per_step = (cpp_calls() - before) / (TIMED_WINDOWS * TIMED_STEPS)
    torch.cuda.reset_peak_memory_stats()
    full = median_ms(lambda: (forward_backward(run, x, target), opt.step()))
    fields = {k: v for k, v in asdict(setup).items() if k in ("width", "blocks", "batch", "tokens")}
    return {"model": "transformer", "linear": linear, "mode": mode, "dtype": "bf16", **fields,
            "fwd_bwd_ms": fwd_bwd, "step_ms": full, "peak_mib": torch.cuda.max_memory_allocated() / 2**20,
            "first_step_s": first_s, "cpp_calls_per_step": cpp_per_step}  # fmt: skip


def cpp_calls() -> int:
    """Library calls run from C++ so far (deepgemm.fast; 0 where it is not built)."""
    ext = fast.loaded()
    return ext.stats()["hits"] if ext is not None else 0


def run_timings(setup: Setup, modes: Sequence[str], recomputed: bool = True) -> list[dict[str, Any]]:
    rows = []
    for mode in modes:
        linears = LINEARS if mode == "eager" and recomputed else LINEARS[:2]  # kept against recomputed: once
        here = [time_model(setup, linear, mode) for linear in linears]
        for row in here:
            row["x_torch"] = here[0]["fwd_bwd_ms"] / row["fwd_bwd_ms"]  # > 1: faster than nn.Linear
            log(
                f"{mode:>8} {row['linear']:<24} fwd+bwd {row['fwd_bwd_ms']:.3f} ms (x torch {row['x_torch']:.3f}), "
                f"step {row['step_ms']:.3f} ms, peak {row['peak_mib']:.0f} MiB, first step {row['first_step_s']:.1f} "
                f"s, {row['cpp_calls_per_step']:.0f} calls a step from C++"
            )
        rows += here
    return rows


COLUMNS = (
    ("width", "width", 0),
    ("mode", "mode", 0),
    ("linear", "linear", 0),
    ("fwd_bwd_ms", "fwd+bwd ms", 3),
    ("x_torch", "x nn.Linear", 3),
    ("step_ms", "step ms", 3),
    ("peak_mib", "peak MiB", 0),
)


def summary_lines(record: dict[str, Any]) -> list[str]:
    check = record["check"]
    lines = [results.format_table(record["rows"], COLUMNS)]
    lines.append(f"loss curves: every {check['window']}-step mean within {100 * check['max_window_gap']:.2f}% of "
                 f"nn.Linear's (allowed {100 * check.get('allowed_window_gap', check['curve_tol']):.2f}%: "
                 f"{100 * check['curve_tol']:.0f}%, or {check.get('control_factor', 0):g} x the FP32 control's "
                 f"{100 * check.get('control_max_window_gap', 0):.2f}%), the last within "
                 f"{100 * check['last_window_gap']:.2f}%; the last window at "
                 f"{check['learned']:.3f} of the first; first gradients within "
                 f"{max(check['grad_rel_err'].values()):.4f} (tolerance {check['grad_tol']}): "
                 f"{'passed' if check['passed'] else 'FAILED'}")  # fmt: skip
    return lines


def show_record(directory: Path = results.RESULTS_DIR) -> int:
    """What a machine without a GPU prints: the recorded run, or how to make it."""
    try:
        record = results.load(RECORD, directory, command=COMMAND)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(results.recorded_banner(record["provenance"]))
    print("\n".join(summary_lines(record)))
    curves = record.get("curves", {})
    if CONTROL in curves:  # the rule may have changed since the recording: apply today's to its curves
        now = compare(curves["torch"], curves["deepgemm"], record["check"]["grad_rel_err"], curves[CONTROL])
        print(f"today's comparison, on the recorded curves: {'passed' if now['passed'] else 'FAILED'}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tutorial.train", description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=Setup.steps, help="training steps of each loss curve")
    parser.add_argument("--modes", default="eager,compiled", help="what is timed: eager, compiled or both")
    parser.add_argument("--widths", default="1024,2048", help="model widths timed (the curves use the first)")
    parser.add_argument("--record", action="store_true", help="write results/<gpu>/train.json")
    args = parser.parse_args(argv)
    if args.steps < 2 * WINDOW:
        parser.error(f"--steps {args.steps}: the curves are compared in windows of {WINDOW} steps; give at least two")
    if not gpu_available():
        return show_record()
    widths = [int(w) for w in args.widths.split(",") if w]
    setup = replace(Setup(), steps=args.steps, width=widths[0])
    log(f"loss curves: {setup.steps} steps each, nn.Linear, deepgemm.nn.Linear and the FP32 control")
    found = run_curves(setup)
    modes = [m for m in args.modes.split(",") if m]
    rows = [row for i, width in enumerate(widths) for row in run_timings(replace(setup, width=width), modes, i == 0)]
    record = {"rows": rows, **found}
    print("\n".join(summary_lines(record)))
    if args.record:
        prov = results.provenance(["python", "-m", "tutorial.train", *(argv if argv is not None else sys.argv[1:])])
        extra = {"setup": asdict(setup), **found}
        print(f"recorded in {results.save(RECORD, rows, prov, extra=extra)}")
    return 0 if found["check"]["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
