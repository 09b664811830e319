"""Trains a model with DDP (or FSDP) on backend nccl and on backend gpustripe, in one run,
and compares the losses step by step and the step times. Random data, models built from
code (nothing downloaded): torchvision's ResNet-50 and a GPT-2-style transformer from a
transformers GPT2Config; FSDP is fully_shard over the group (per transformer block for GPT-2).
One process per GPU:

    torchrun --nproc-per-node 2 examples/train_ddp.py --model gpt2 --steps 50
    torchrun --nproc-per-node 2 examples/train_ddp.py --model resnet50 --wrap fsdp

The default process group runs on gpustripe ("cuda:gpustripe,cpu:gloo"); a second group of
the same ranks runs on nccl. Each backend trains its own copy of the model from the same
initial weights on the same batches, both held at once, their steps taking turns. Rank 0
prints one line per step and a summary line `TRAIN {json}` (losses of both, the largest
relative difference, median step times and their ratio (`speedup`; `speedup_paired`: the
median of the steps' ratios, each step's runs side by side), and every rank's host time per
part of a step and its team's phases: `ranks_host`). `--noise` trains a third copy, on nccl
again: `noise` (and `noise_paired`) in the summary is the two nccl copies' step-time ratio,
this run's own spread (the speedup is read against it: a configuration is slower than NCCL
only past it). `settled_step`: the first step after which the gpustripe backend timed no kind
of call and counted no call for a review any more (its calibration, docs/torch.md); `speedup_paired_settled`
(and `noise_paired_settled`) the paired ratios from there on, what a long training's steps run
at; `calibration_ms`: what the timed steps before it took beyond NCCL's, paid once per run.
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F


def build(name: str, args) -> torch.nn.Module:
    torch.manual_seed(0)
    if name == "resnet50":
        import torchvision

        return torchvision.models.resnet50(weights=None)
    if name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = GPT2Config(n_layer=args.layers, n_embd=args.embd, n_head=args.heads, n_positions=args.seq,
                         vocab_size=args.vocab, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        return GPT2LMHeadModel(cfg)
    raise SystemExit(f"unknown model {name}")


def batch(name: str, args, step: int, rank: int, dev):
    g = torch.Generator(device=dev).manual_seed(100000 * step + rank)
    if name == "resnet50":
        x = torch.randn(args.batch, 3, 224, 224, generator=g, device=dev)
        y = torch.randint(0, 1000, (args.batch,), generator=g, device=dev)
        return x, y
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g, device=dev)
    return ids, ids


def loss_of(name: str, model, x, y):
    if name == "resnet50":
        return F.cross_entropy(model(x), y)
    return model(input_ids=x, labels=y).loss


class Trainer:
    """One backend's copy of the training: its model (from the same seed as the other's), its
    wrapper over its group, its optimizer; step() runs one step and keeps its loss and time, and
    the host's time per part of it: the forward, backward and optimizer calls (on a launch-bound
    step, the host issuing the work) and the wait for the GPU at the step's end."""

    PARTS = ("forward", "backward", "optimizer", "gpu_wait")

    def __init__(self, group, args, rank, dev):
        self.group, self.args, self.rank, self.dev = group, args, rank, dev
        model = build(args.model, args).to(dev)
        if args.wrap == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model, device_ids=[dev.index], process_group=group, bucket_cap_mb=args.bucket_mb)
        else:
            from torch.distributed.device_mesh import DeviceMesh
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

            mesh = DeviceMesh.from_group(group, "cuda")
            # bf16: parameters gathered and computed in bf16, gradients reduced in fp32 (the
            # common mixed-precision recipe); the optimizer keeps fp32 shards.
            mp = {"mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)} \
                if args.precision == "bf16" else {}
            for block in getattr(getattr(model, "transformer", None), "h", []):  # GPT-2: a shard unit per block
                fully_shard(block, mesh=mesh, **mp)
            fully_shard(model, mesh=mesh, **mp)
        self.model = model
        if args.optimizer == "sgd":
            self.opt = torch.optim.SGD(model.parameters(), lr=1e-4, foreach=True)
        else:
            self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **{args.optimizer: True})
        self.losses, self.times = [], []
        self.calibrating = []  # per step: whether the group's backend timed or reviewed a kind of call in it
        self._events = 0
        self.parts = {p: [] for p in self.PARTS}

    def step(self, step: int) -> None:
        args = self.args
        if step == args.warm_steps and hasattr(self.group, "trace"):
            self.group.trace(reset=True)  # the printed trace: the steps timed, not the first calls' setup
        x, y = batch(args.model, args, step, self.rank, self.dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        # DDP in bf16: autocast (the matrix products in bf16, parameters and gradients fp32)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.precision == "bf16" and args.wrap == "ddp"):
            loss = loss_of(args.model, self.model, x, y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        self.opt.step()
        t3 = time.perf_counter()
        torch.cuda.synchronize()
        t4 = time.perf_counter()
        self.times.append(t4 - t0)
        events = getattr(self.group, "calibration_events", lambda: 0)()
        self.calibrating.append(events != self._events)
        self._events = events
        for part, (a, b) in zip(self.PARTS, ((t0, t1), (t1, t2), (t2, t3), (t3, t4))):
            self.parts[part].append(b - a)
        # the mean loss over ranks (on nccl for both: the comparison is the training's, not this)
        lv = loss.detach().clone()
        dist.all_reduce(lv, group=args.nccl_group)
        self.losses.append(lv.item() / dist.get_world_size())


def start(args) -> tuple:
    """This process's rank and GPU under torchrun: the default group on gpustripe, and
    `args.nccl_group` of the same ranks on nccl."""
    import gpustripe.torch  # noqa: F401 -- registers the backend (here: build() and batch() serve probes without it)

    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("cuda:gpustripe,cpu:gloo")
    args.nccl_group = dist.new_group(backend="nccl")
    return dist.get_rank(), torch.device("cuda", local)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gpt2", choices=["gpt2", "resnet50"])
    p.add_argument("--wrap", default="ddp", choices=["ddp", "fsdp"])
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch", type=int, default=0, help="per GPU (default: gpt2 4, resnet50 32)")
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--embd", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=50257,
                   help="GPT-2's vocabulary (its embedding, one parameter, is one DDP bucket of vocab x embd "
                        "gradients whatever --bucket-mb: 154 MB at the default)")
    p.add_argument("--bucket-mb", type=int, default=25)
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                   help="bf16: DDP under autocast, FSDP with bf16 parameters and fp32 gradient reduction")
    p.add_argument("--optimizer", default="fused", choices=["fused", "foreach", "sgd"],
                   help="AdamW's implementation (fused: the whole update in one kernel per batch of tensors, as "
                        "large-model training uses; foreach: a kernel per operation of the update), or sgd: plain "
                        "SGD, whose update reads each parameter and its gradient once (a step whose GPU time is "
                        "mostly the gradients' allreduce: the communication-bound case)")
    p.add_argument("--always-native", action="store_true",
                   help="gpustripe serves every call it can, without its calibration against NCCL (to time it)")
    p.add_argument("--noise", action="store_true",
                   help="a third copy trained on nccl too: `noise`, the two nccl copies' step-time ratio, is this "
                        "run's own spread, against which the speedup is read")
    p.add_argument("--rtol", type=float, default=1e-3, help="largest relative loss difference accepted")
    args = p.parse_args()
    args.batch = args.batch or (32 if args.model == "resnet50" else 4)

    rank, dev = start(args)
    if args.always_native:
        from gpustripe.torch import _test_always_native

        _test_always_native(dist.group.WORLD)
    # The first steps include allocation, autotuning and the backend's calibration and mappings:
    # left out of the step times and of the backend's trace.
    args.warm_steps = min(5, args.steps // 2)
    # The trainings side by side, their steps taking turns (which goes first rotating), so that
    # the machine's drift over the run (clocks, the host's other work) reaches each alike: the
    # step times of this host move by tens of percent between runs minutes apart.
    groups = [("nccl", args.nccl_group), ("gpustripe", dist.group.WORLD)]
    if args.noise:
        groups.append(("nccl_again", dist.new_group(backend="nccl")))
    runs = {name: Trainer(group, args, rank, dev) for name, group in groups}
    order = list(runs.values())
    for step in range(args.steps):
        k = step % len(order)
        for t in order[k:] + order[:k]:
            t.step(step)
    ln, lg = runs["nccl"].losses, runs["gpustripe"].losses

    def max_rel_diff(xs, ys) -> float:
        return max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(xs, ys))
    diff = max_rel_diff(ln, lg)
    if args.noise:  # the second nccl copy's losses are nccl's: a check of the comparison itself
        diff_again = max_rel_diff(ln, runs["nccl_again"].losses)
    step_ms = {k: 1e3 * statistics.median(v.times[args.warm_steps:]) for k, v in runs.items()}
    # Each step's copies ran one right after the other: the median of the steps' ratios is
    # untouched by a drift of the host over the run, which the ratio of the medians is not.
    def paired(a: str, b: str, start: int = args.warm_steps) -> float:
        return statistics.median(x / y for x, y in zip(runs[a].times[start:], runs[b].times[start:]))
    # Every rank's host parts and team phases: a step set by the slower host (one rank waiting in
    # a collective for the other's call) shows as one rank's parts apart from the other's.
    # From the first step after which gpustripe's backend timed and reviewed no kind of call any
    # more: the steps of a long training. Before it, what the calibration cost this run, once.
    g = runs["gpustripe"]
    settled = max(args.warm_steps, max((i + 1 for i, c in enumerate(g.calibrating) if c), default=0))
    if settled < args.steps:
        after = {"settled_step": settled, "speedup_paired_settled": paired("nccl", "gpustripe", settled),
                 **({"noise_paired_settled": paired("nccl", "nccl_again", settled)} if args.noise else {})}
    else:
        after = {"settled_step": None}
    after["calibration_ms"] = 1e3 * sum(x - y for x, y in zip(g.times[args.warm_steps:settled],
                                                            runs["nccl"].times[args.warm_steps:settled]))
    mine = {"host_ms": {k: {p: round(1e3 * statistics.median(v.parts[p][args.warm_steps:]), 3) for p in Trainer.PARTS}
                        for k, v in runs.items()},
            "team": dist.group.WORLD.trace().get("team", {}) if hasattr(dist.group.WORLD, "trace") else {}}
    ranks = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, mine, group=args.nccl_group)
    if rank == 0:
        for i, (a, b) in enumerate(zip(ln, lg)):
            print(f"step {i:3d}  loss nccl {a:.6f}  gpustripe {b:.6f}", flush=True)
        native = getattr(dist.group.WORLD, "native_calls", -1)
        print("TRAIN " + json.dumps({
            "model": args.model, **({"vocab": args.vocab} if args.model == "gpt2" else {}),
            "wrap": args.wrap, "ranks": dist.get_world_size(), "steps": args.steps,
            "batch": args.batch, "precision": args.precision, "optimizer": args.optimizer,
            "max_rel_loss_diff": diff, "losses_match": diff <= args.rtol,
            "step_ms": step_ms, "speedup": step_ms["nccl"] / step_ms["gpustripe"],
            "speedup_paired": paired("nccl", "gpustripe"), "native_calls": native, **after,
            **({"noise": step_ms["nccl"] / step_ms["nccl_again"], "noise_paired": paired("nccl", "nccl_again"),
                "max_rel_loss_diff_nccl_again": diff_again} if args.noise else {}),
            "times_ms": {k: [round(1e3 * x, 3) for x in v.times] for k, v in runs.items()},  # rank 0's, every step
            "trace": dist.group.WORLD.trace() if hasattr(dist.group.WORLD, "trace") else {}, "ranks_host": ranks,
            "loss_nccl": ln, "loss_gpustripe": lg}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
