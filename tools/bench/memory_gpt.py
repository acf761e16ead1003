#!/usr/bin/env python3
"""Per-rank peak RSS of a GPT of >= 350 M parameters under zero3 and hybrid, against arithmetic.

The model: GPT-2 medium's blocks (width 1024, 16 heads, MLP 4x) and 28 of them (GPT-2 medium has
24 blocks and a 50,257-token vocabulary; this one reads byte-level text, vocabulary 256, so it
takes 28 blocks to pass 350 M parameters) and its own output head (`tie_embeddings = false`, so
the arithmetic has no copy of a tie to place): 353.3 M parameters, context 64, Adam, fp32, the text
data set (linux-doc-6.1's token file, `tessera data prepare`). Each row is one short
`tessera train` over shm processes, so RSS is per rank:

  zero3 at 2 and 4 ranks: parameters, gradients and Adam's two slots sharded, 16 P / N bytes a
      rank, plus the gathered units zero3 reports (its pool) and the activations of a step;
  hybrid pp2 x dp2 with data_parallel_sharding = zero1 (4 ranks): a stage's layers whole (the
      uniform partition: 16 of the 31 layers on the first stage, 15 on the second), 4 P_s
      of parameters + 4 P_s of gradients + 8 P_s / dp of Adam state, plus the activations of the
      micro-batches a stage holds in flight under 1f1b (pp - stage);
  hybrid tp2 x pp2 (4 ranks): the same stages, each block split by heads over a tensor group of
      2 (its 12 C^2 + 7 C split elements halved, the norms and c_proj biases whole; the token
      embedding's and the head's V x C rows split by vocabulary, wpe and ln_f whole): 16 bytes
      per element a tensor rank holds, plus the activations in flight, whose block part saves
      4 C + 4 floats a token whole (input, ln_1, mid, ln_2 and the norms' statistics) and
      12 C + heads split (Q, K, V, attention, the MLP), the head's logits and their gradient
      2 V / tp;
  ddp is not run: 16 P = 5.3 GiB a rank, four ranks 21 GiB of a 23 GiB host (that is the point).

Columns: rank, peak RSS, the state the strategy must hold by arithmetic (from the model's shape,
not from the strategy's report), the strategy's own memory_report (it must agree with the
arithmetic), activations (the tensors every block saves for backward: 16 C + heads + 4 floats a
token, the head's C + 2 V), and the bound 1.10 x (state + pool + activations) + 64 MiB that the
issue states; OK when peak RSS is within it.

  tools/bench/memory_gpt.py [--tessera build/release/bin/tessera] [--tokens FILE] [--rows all]
Takes about 2 to 4 minutes a row on 2 cores and 6-9 GiB of RAM a row.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

MIB = 2**20


def layer_parameters(layers, width, context, vocab):
    """Parameters of each of the model's layers in order: embedding, blocks, ln_f, lm_head."""
    block = 12 * width * width + 13 * width  # ln_1, c_attn, c_proj, ln_2, c_fc, mlp.c_proj
    return [vocab * width + context * width] + [block] * layers + [2 * width, vocab * width]


def activation_bytes(blocks, width, heads, vocab, tokens, with_head, tensor=1):
    block = 4 * width + 4 + (12 * width + heads) / tensor  # 16 C + heads + 4 whole (tensor 1)
    per_token = blocks * block + (width + 2 * vocab / tensor if with_head else 0)
    return 4 * per_token * tokens


def run(tessera, tokens_file, shape, strategy, ranks, extra, work):
    layers, heads, width, context, vocab = shape
    summary = os.path.join(work, "summary.json")
    command = [tessera, "train", "-n", str(ranks), "--runtime.transport=shm",
               "--runtime.timeout=900s", f"--train.strategy={strategy}", "--train.model=gpt",
               f"--model.gpt.layers={layers}", f"--model.gpt.heads={heads}",
               f"--model.gpt.width={width}", f"--model.gpt.context={context}",
               f"--model.gpt.vocab={vocab}", "--model.gpt.tie_embeddings=false",
               "--train.dataset=text",
               f"--dataset.text.path={tokens_file}", f"--dataset.text.context={context}",
               "--train.optimizer=adam", "--train.lr=0.0001", "--train.batch_size=2",
               "--train.eval_batch_size=2", "--train.max_steps=2", "--train.epochs=1",
               "--train.eval_samples=2", "--train.progress=off", "--summary", summary] + extra
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        sys.exit(f"{strategy} at {ranks} ranks failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    with open(summary) as f:
        return json.load(f)["ranks"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tessera", default="build/release/bin/tessera")
    parser.add_argument("--tokens", default="samples/configs/data/linux-doc-6.1.tokens")
    parser.add_argument("--rows", default="all", choices=["all", "zero3", "hybrid", "tp"])
    args = parser.parse_args()
    shape = (28, 16, 1024, 64, 256)
    layers, heads, width, context, vocab = shape
    layer_params = layer_parameters(layers, width, context, vocab)
    total = sum(layer_params)
    tokens = 2 * context  # batch 2 windows a rank
    # Hybrid's uniform partition of the layers into two
    # stages: layer counts, the first stage one larger when they do not divide.
    half = (len(layer_params) + 1) // 2
    stage_layers = [(0, half), (half, len(layer_params))]
    print(f"GPT: {layers} blocks, width {width}, {heads} heads, context {context}, vocab {vocab}: "
          f"{total / 1e6:.1f} M parameters; ddp would hold 16 P = {16 * total / 2**30:.2f} GiB a "
          f"rank ({4 * 16 * total / 2**30:.1f} GiB for four ranks: not run)")
    print(f"{'row':<26} {'rank':>4} {'peak_rss':>9} {'state':>8} {'report':>8} {'pool':>7} "
          f"{'activ':>7} {'bound':>8}  MiB")
    failures = 0
    with tempfile.TemporaryDirectory() as work:
        rows = []
        if args.rows in ("all", "zero3"):
            rows += [("zero3", n, []) for n in (2, 4)]
        if args.rows in ("all", "hybrid"):
            rows.append(("hybrid", 4, ["--strategy.hybrid.pipeline_parallel=2",
                                       "--strategy.hybrid.micro_batches=2",
                                       "--strategy.hybrid.data_parallel_sharding=zero1"]))
        if args.rows in ("all", "tp"):
            rows.append(("hybrid", 4, ["--strategy.hybrid.pipeline_parallel=2",
                                       "--strategy.hybrid.micro_batches=2",
                                       "--strategy.hybrid.tensor_parallel=2"]))
        for strategy, ranks, extra in rows:
            tensor = 2 if "--strategy.hybrid.tensor_parallel=2" in extra else 1
            label = (f"{strategy} {ranks} ranks" if strategy == "zero3" else
                     "hybrid tp2.pp2" if tensor == 2 else "hybrid pp2.dp2 zero1")
            for rank in run(args.tessera, args.tokens, shape, strategy, ranks, extra, work):
                r = rank["rank"]
                report = rank["memory_report"]
                if strategy == "zero3":
                    state = 16 * total / ranks
                    activations = activation_bytes(layers, width, heads, vocab, tokens, True)
                else:
                    # ranks 0, 1: stage 0; ranks 2, 3: stage 1 (tp 1 x dp 2, or tp 2 x dp 1)
                    stage = r // 2
                    first, last = stage_layers[stage]
                    held = sum(layer_params[first:last])
                    blocks = sum(1 for l in range(first, last) if 1 <= l <= layers)
                    if tensor == 1:
                        state = 4 * held + 4 * held + 8 * held / 2  # Adam's state over dp 2
                    else:
                        held -= blocks * (12 * width * width + 7 * width) / 2
                        # wte's rows and the head's, split by vocabulary (uneven halves sum up)
                        held -= vocab * width / 2 * ((first == 0) + (last == len(layer_params)))
                        state = 16 * held
                    in_flight = 2 - stage  # 1f1b: pp - stage micro-batches of 1 window
                    activations = in_flight * activation_bytes(
                        blocks, width, heads, vocab, context, last == len(layer_params), tensor)
                reported = (report["parameter_bytes"] + report["gradient_bytes"] +
                            report["optimizer_state_bytes"])
                pool = report["buffer_bytes"]
                bound = 1.10 * (state + pool + activations) + 64 * MIB
                peak = rank["peak_rss_bytes"]
                ok = peak <= bound and abs(reported - state) <= 0.01 * state
                failures += not ok
                print(f"{label:<26} {r:>4} {peak / MIB:>9.0f} {state / MIB:>8.0f} "
                      f"{reported / MIB:>8.0f} {pool / MIB:>7.0f} {activations / MIB:>7.0f} "
                      f"{bound / MIB:>8.0f}  {'OK' if ok else 'OVER'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
