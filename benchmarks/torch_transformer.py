"""The PyTorch reference for benchmarks/train_step.py: the train step of
`torch.nn.Transformer` at the same sizes, batch and protocol, as ms a step,
target tokens/s and MFU against matmul peaks measured in the same run.

Imports only torch, numpy and the standard library (never kseq or
TensorFlow), so it runs with a GPU machine's own PyTorch python. The model
is built like kseq's `TransformerSeq2Seq` as train_step.py builds it, as far
as it matters for cost: one token embedding shared by source, target and the
tied output projection (plus an output bias), scaled by sqrt(D), sinusoidal
positions, dropout (the size's: 0.1, none at the quick size) on embeddings and sublayers, post-norm blocks without
a final stack norm (`nn.Transformer` with `nn.TransformerEncoder/Decoder`,
batch_first, norm=None), a causal target mask and source/target padding
masks; label-smoothed (0.1) cross-entropy ignoring PAD (id 0) on float32
logits; Adam (beta_2 0.98, epsilon 1e-9, fused where available) on the
Transformer schedule (warm-up 4000) with gradients clipped at norm 1.0 per
variable, as keras' `clipnorm=1.0` does in train_step.py and the recipes
(`--clip global` for one global norm).

Configurations are `torch-<precision>[-compile]`: `float32` (TF32 matmuls
allowed unless --no-tf32, as TensorFlow allows them by default) or
`bfloat16` (autocast; weights, optimizer and loss float32), and `-compile`
for `torch.compile` of the model and loss (the backward pass is compiled
with it; clipping and the optimizer run eagerly). Every configuration runs
in a fresh process: `--warmup` steps, then `--steps` timed steps on one
fixed random batch, the device synchronised before and after the timed
steps (not between them). A configuration that fails (torch.compile without
a C compiler, say) is reported with its error and the next one runs.

MFU counts the same FLOPs as train_step.py's `transformer_flops` (3x the
forward matmuls, causal self-attention counted whole) against this run's own
square-matmul peak of the configuration's precision (`mfu`) and against the
bfloat16 peak (`mfu_of_bf16_peak`). `--output` JSON uses train_step.py's
keys where they mean the same (rows keyed by `config`), so the two files
join.

    python3 benchmarks/torch_transformer.py --output /tmp/torch.json          # a GPU, base size
    python3 benchmarks/torch_transformer.py --configs torch-bfloat16-compile --steps 50
    python3 benchmarks/torch_transformer.py --size tiny --steps 3 --warmup 1 --device cpu   # smoke test
"""

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time

# The same shapes as benchmarks/train_step.py's SIZES (kept in step by hand:
# this script must not import it, as that would import TensorFlow).
SIZES = {  # layers, d_model, heads, ff, vocab, batch, source length, target length, dropout
    "base": dict(layers=6, d=512, heads=8, ff=2048, vocab=16000, batch=384, source=56, target=64, dropout=0.1),
    "quick": dict(layers=2, d=192, heads=4, ff=768, vocab=4000, batch=64, source=40, target=40, dropout=0.0),
    "tiny": dict(layers=1, d=32, heads=2, ff=64, vocab=500, batch=8, source=12, target=12, dropout=0.1),
}
CONFIGS = ("torch-float32", "torch-bfloat16", "torch-bfloat16-compile", "torch-float32-compile")
PAD_ID = 0
FIRST_WORD_ID = 4  # ids 0-3 are kseq's special ids; the random batch uses none
LABEL_SMOOTHING = 0.1
WARMUP_STEPS = 4000  # the Transformer schedule's, as in train_step.py
CLIPNORM = 1.0


def transformer_flops(size):
    """Matmul FLOPs of one training step, counted as train_step.py counts
    them: 2 a multiply-add, 3x the forward pass, attention scores and
    context over the whole (causal) square, the output projection."""
    d, ff, s, t, v = size["d"], size["ff"], size["source"], size["target"], size["vocab"]

    def linear(rows, inputs, outputs):
        return 2 * rows * inputs * outputs

    def attention(queries, keys):  # scores and the weighted sum of values
        return 2 * linear(queries, d, keys)

    encoder = 4 * linear(s, d, d) + attention(s, s) + linear(s, d, ff) + linear(s, ff, d)
    decoder = (4 * linear(t, d, d) + attention(t, t)  # self-attention
               + 2 * linear(t, d, d) + 2 * linear(s, d, d) + attention(t, s)  # cross-attention
               + linear(t, d, ff) + linear(t, ff, d))
    forward = size["layers"] * (encoder + decoder) + linear(t, d, v)
    return 3 * size["batch"] * forward


def set_tf32(torch, allowed):
    """TF32 for float32 matmuls (and cuDNN), as TensorFlow's default."""
    torch.set_float32_matmul_precision("high" if allowed else "highest")
    torch.backends.cuda.matmul.allow_tf32 = allowed
    torch.backends.cudnn.allow_tf32 = allowed


def synchronize(torch, device):
    if device == "cuda":
        torch.cuda.synchronize()


def matmul_peaks(torch, device, n, seconds):
    """Best TFLOP/s of an n x n @ n x n matmul in float32 (TF32 where
    allowed) and bfloat16, on random data."""
    peaks = {}
    generator = torch.Generator(device=device).manual_seed(0)
    for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        a, b = (torch.randn(n, n, device=device, generator=generator).to(dtype) for _ in range(2))
        out = torch.empty(n, n, device=device, dtype=dtype)
        for _ in range(3):
            torch.matmul(a, b, out=out)
        synchronize(torch, device)
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            torch.matmul(a, b, out=out)
            calls += 1
            if calls % 8 == 0:
                synchronize(torch, device)
        synchronize(torch, device)
        peaks[name] = round(2 * n**3 * calls / (time.perf_counter() - start) / 1e12, 2)
        del a, b, out
    if device == "cuda":
        torch.cuda.empty_cache()  # leave the children the memory
    return peaks


def build_model(torch, size):
    nn = torch.nn

    class Seq2Seq(nn.Module):
        """kseq's TransformerSeq2Seq(share_embeddings=True, norm_first=False,
        position="sinusoidal") in PyTorch's layers."""

        def __init__(self):
            super().__init__()
            d, heads, ff, layers = size["d"], size["heads"], size["ff"], size["layers"]
            self.d = d
            self.embedding = nn.Embedding(size["vocab"], d)
            nn.init.normal_(self.embedding.weight, std=d**-0.5)  # unit variance after the sqrt(D) scale
            self.register_buffer("positions", sinusoids(max(size["source"], size["target"]) + 1, d),
                                 persistent=False)
            self.dropout = nn.Dropout(size["dropout"])
            layer = dict(d_model=d, nhead=heads, dim_feedforward=ff, dropout=size["dropout"], activation="relu",
                         layer_norm_eps=1e-5, batch_first=True, norm_first=False)
            encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(**layer), layers, norm=None,
                                            enable_nested_tensor=False)
            decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**layer), layers, norm=None)
            self.transformer = nn.Transformer(d, heads, custom_encoder=encoder, custom_decoder=decoder,
                                              dropout=size["dropout"], batch_first=True)
            self.output_bias = nn.Parameter(torch.zeros(size["vocab"]))

        def embed(self, ids):
            x = self.embedding(ids) * math.sqrt(self.d) + self.positions[: ids.shape[1]]
            return self.dropout(x)

        def forward(self, source, target, padding_masks=True):
            length = target.shape[1]
            causal = torch.triu(torch.ones(length, length, dtype=torch.bool, device=target.device), 1)
            source_pad = source == PAD_ID if padding_masks else None
            target_pad = target == PAD_ID if padding_masks else None
            x = self.transformer(self.embed(source), self.embed(target), tgt_mask=causal,
                                 src_key_padding_mask=source_pad, tgt_key_padding_mask=target_pad,
                                 memory_key_padding_mask=source_pad, tgt_is_causal=True)
            return torch.nn.functional.linear(x, self.embedding.weight, self.output_bias)  # tied

    def sinusoids(length, d):
        position = torch.arange(length, dtype=torch.float32)[:, None]
        rates = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
        table = torch.zeros(length, d)
        table[:, 0::2] = torch.sin(position * rates)
        table[:, 1::2] = torch.cos(position * rates)
        return table

    return Seq2Seq()


def random_batch(np, size, pad_fraction):
    """(source, target, labels) int64 arrays: random word ids, as
    train_step.py draws them; with pad_fraction > 0, each row's tail is PAD
    from a random length on (about that fraction of the tokens)."""
    rng = np.random.default_rng(0)
    batch = size["batch"]
    source = rng.integers(FIRST_WORD_ID, size["vocab"], (batch, size["source"]), dtype=np.int64)
    target = rng.integers(FIRST_WORD_ID, size["vocab"], (batch, size["target"]), dtype=np.int64)
    labels = rng.integers(FIRST_WORD_ID, size["vocab"], (batch, size["target"]), dtype=np.int64)
    if pad_fraction > 0:
        for ids, pads in ((source, [source]), (target, [target, labels])):
            length = ids.shape[1]
            shortest = max(1, round(length * (1 - 2 * pad_fraction)))
            for row, real in enumerate(rng.integers(shortest, length + 1, batch)):
                for array in pads:
                    array[row, real:] = PAD_ID
    return source, target, labels


def make_optimizer(torch, parameters, device):
    """(Adam, whether fused): keras' Adam arguments of train_step.py."""
    options = dict(lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    try:
        return torch.optim.Adam(parameters, fused=True, **options), True
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.Adam(parameters, **options), False


def clip_gradients(torch, parameters, how):
    """keras' clipnorm (each gradient to norm <= 1) or one global norm."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if how == "global":
        torch.nn.utils.clip_grad_norm_(grads, CLIPNORM)
        return
    norms = torch.stack(torch._foreach_norm(grads))
    factors = CLIPNORM / torch.clamp(norms, min=CLIPNORM)
    torch._foreach_mul_(grads, list(factors.unbind()))


def learning_rate(d, step):
    """The Transformer schedule of train_step.py (kseq.schedules.TransformerSchedule)."""
    return d**-0.5 * min(step**-0.5, step * WARMUP_STEPS**-1.5)


def child(config, size, args):
    import numpy as np
    import torch

    _, precision, *rest = config.split("-")
    compiled = "compile" in rest
    device = args.device
    if args.threads:
        torch.set_num_threads(args.threads)
    set_tf32(torch, not args.no_tf32)
    torch.manual_seed(0)
    source, target, labels = (torch.from_numpy(a).to(device) for a in random_batch(np, size, args.pad_fraction))
    model = build_model(torch, size).to(device).train()
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer, fused = make_optimizer(torch, parameters, device)
    autocast = precision == "bfloat16"
    vocab, padding_masks = size["vocab"], not args.no_padding_mask

    def loss_function(source, target, labels):
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=autocast):
            logits = model(source, target, padding_masks)
        return torch.nn.functional.cross_entropy(
            logits.float().reshape(-1, vocab), labels.reshape(-1), ignore_index=PAD_ID,
            label_smoothing=LABEL_SMOOTHING)

    loss_call = torch.compile(loss_function, mode=args.compile_mode) if compiled else loss_function
    step_count = 0

    def train_step():
        nonlocal step_count
        step_count += 1
        optimizer.zero_grad(set_to_none=True)
        loss = loss_call(source, target, labels)
        loss.backward()
        clip_gradients(torch, parameters, args.clip)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(size["d"], step_count)
        optimizer.step()
        return loss

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    synchronize(torch, device)
    start = time.perf_counter()
    for _ in range(args.warmup):
        train_step()
    synchronize(torch, device)
    warmup_seconds = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = train_step()
    synchronize(torch, device)
    seconds = (time.perf_counter() - start) / args.steps
    real_tokens = int((labels != PAD_ID).sum())
    result = dict(
        config=config, jit_compile=compiled, ms_per_step=round(1000 * seconds, 2),
        target_tokens_per_s=round(size["batch"] * size["target"] / seconds),
        real_target_tokens_per_s=round(real_tokens / seconds),
        model_tflops=round(transformer_flops(size) / seconds / 1e12, 2),
        warmup_s=round(warmup_seconds, 1), final_loss=round(float(loss), 4),
        parameters=sum(p.numel() for p in parameters), fused_adam=fused)
    if compiled:  # what the warm-up took beyond its steps: compilation (and recompilations)
        result["compile_s"] = round(max(0.0, warmup_seconds - args.warmup * seconds), 1)
    if device == "cuda":
        result["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return result


def device_name(torch, device):
    if device == "cuda":
        return torch.cuda.get_device_name(0)
    return platform.processor() or platform.machine() or "CPU"


def markdown(rows, failed):
    lines = ["| config | ms/step | target tok/s | real tok/s | TFLOP/s | MFU (own peak) | MFU of bf16 peak "
             "| compile s | warm-up s | loss | peak GiB |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        cells = [row["config"], f"{row['ms_per_step']:.2f}", f"{row['target_tokens_per_s']:,}",
                 f"{row['real_target_tokens_per_s']:,}", f"{row['model_tflops']:.2f}", f"{row['mfu']:.1%}",
                 f"{row['mfu_of_bf16_peak']:.1%}", str(row.get("compile_s", "–")), str(row["warmup_s"]),
                 f"{row['final_loss']:.4f}", str(row.get("peak_memory_gib", "–"))]
        lines.append("| " + " | ".join(cells) + " |")
    for fail in failed:
        lines.append(f"| {fail['config']} | failed: {fail['error'].splitlines()[-1][:80] if fail['error'] else '?'} "
                     "|" + " |" * 9)
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n", 1)[1])
    parser.add_argument("--size", choices=sorted(SIZES), default="base")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, of {', '.join(CONFIGS)}")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda if PyTorch sees a GPU")
    parser.add_argument("--peak-size", type=int, help="matmul size for the peaks (8192 on a GPU, 1024 on a CPU)")
    parser.add_argument("--peak-seconds", type=float, default=2.0, help="time spent on each peak")
    parser.add_argument("--no-tf32", action="store_true", help="float32 matmuls without TF32")
    parser.add_argument("--clip", choices=("variable", "global"), default="variable",
                        help="clip each gradient to norm 1 (keras' clipnorm, kseq's) or all of them together")
    parser.add_argument("--no-padding-mask", action="store_true",
                        help="pass no key padding masks (kseq always computes them)")
    parser.add_argument("--pad-fraction", type=float, default=0.0,
                        help="about this fraction of the batch's tokens PAD (default none, as train_step.py)")
    parser.add_argument("--compile-mode", default="default", help="torch.compile's mode (e.g. max-autotune)")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads in each configuration")
    parser.add_argument("--output", help="JSON results")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    import torch

    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda, but PyTorch sees no GPU")
    if args.steps < 1 or args.warmup < 0:
        parser.error("--steps must be >= 1 and --warmup >= 0")
    for config in args.configs.split(","):
        if config not in CONFIGS:
            parser.error(f"unknown configuration {config!r}: choose from {', '.join(CONFIGS)}")
    size = SIZES[args.size]
    if args.child:
        print("RESULT " + json.dumps(child(args.child, size, args)), flush=True)
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    set_tf32(torch, not args.no_tf32)
    device = device_name(torch, args.device)
    peaks = matmul_peaks(torch, args.device, args.peak_size or (8192 if args.device == "cuda" else 1024),
                         args.peak_seconds)
    flops = transformer_flops(size)
    print(f"device: {device}; torch {torch.__version__}; TF32 {'off' if args.no_tf32 else 'on'}; "
          f"matmul peaks (TFLOP/s): {peaks}; model FLOPs per step: {flops / 1e12:.2f} T", flush=True)
    rows, failed = [], []
    passed = ["--size", args.size, "--steps", str(args.steps), "--warmup", str(args.warmup), "--device",
              args.device, "--clip", args.clip, "--pad-fraction", str(args.pad_fraction), "--compile-mode",
              args.compile_mode] + (["--no-tf32"] if args.no_tf32 else []) + (
              ["--no-padding-mask"] if args.no_padding_mask else []) + (
              ["--threads", str(args.threads)] if args.threads else [])

    def write_output():  # after every configuration: a run stopped midway keeps what it measured
        if not args.output:
            return
        with open(args.output + ".tmp", "w") as f:
            json.dump(dict(device=device, size=args.size, shapes=size, peaks_tflops=peaks,
                           date=time.strftime("%Y-%m-%d"), torch=torch.__version__,
                           tf32=not args.no_tf32, model_flops_per_step=flops,
                           settings=dict(steps=args.steps, warmup=args.warmup, device=args.device, clip=args.clip,
                                         padding_masks=not args.no_padding_mask, pad_fraction=args.pad_fraction,
                                         compile_mode=args.compile_mode),
                           rows=rows, failed=failed), f, indent=2)
        os.replace(args.output + ".tmp", args.output)

    for config in args.configs.split(","):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", config] + passed,
                              capture_output=True, text=True)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if done.returncode or not lines:
            error = (done.stderr or done.stdout)[-3000:]
            print(f"{config}: failed (exit {done.returncode})\n{error}", flush=True)
            failed.append(dict(config=config, returncode=done.returncode, error=error))
            write_output()
            continue
        row = json.loads(lines[-1][7:])
        precision = config.split("-")[1]
        tflops = flops / (row["ms_per_step"] / 1000) / 1e12  # unrounded, for small sizes
        row["mfu"] = round(tflops / peaks[precision], 4)
        row["mfu_of_bf16_peak"] = round(tflops / peaks["bfloat16"], 4)
        row["process_s"] = round(time.perf_counter() - start, 1)
        rows.append(row)
        print(f"{config:24s} {row['ms_per_step']:9.2f} ms  {row['target_tokens_per_s']:>10,} tgt tok/s  "
              f"{row['model_tflops']:7.2f} TFLOP/s  MFU {row['mfu']:.1%} of {precision} peak  "
              f"compile {row.get('compile_s', '-')} s  warm-up {row['warmup_s']} s", flush=True)
        write_output()
    print(markdown(rows, failed))
    write_output()


if __name__ == "__main__":
    main()
