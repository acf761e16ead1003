#!/usr/bin/python3
"""Writes the reference file of a tiny GPT-2 that tests/unit/gpt_reference_test.cpp compares
tessera's transformer kernels with (tests/unit/data/gpt_reference.bin, committed).

Only for regenerating that file, never run by CI: needs PyTorch (Debian: apt-get install
python3-torch, then run this with /usr/bin/python3 from the repository root). The model is
GPT-2's architecture (learned positions, pre-norm blocks, causal attention, GELU-tanh MLP of 4x
width, final layer norm, output head tied to the token embedding, no head bias), written out
functionally so that the parameter order is explicit.
The weights come from a seeded generator, are rounded to float32 and written into the file,
so the C++ side reads them rather than reproducing a generator. Everything is then computed in
float64 from those float32 values: the file holds the exact answer, rounded once to float32,
and a difference on the C++ side is that side's own float32 error. The script also prints how
far PyTorch's float32 run of the same batch lands from it, the yardstick for that error.

File layout (little-endian, no padding):
  char[8]   magic "TSGPTREF"
  uint32    version (1)
  uint32    layers, heads, width, context, vocab, batch, time, adam_steps
  int64     ignore_index
  float32   learning_rate, beta1, beta2, eps, weight_decay
  uint64    param_count
  float32   params[param_count]          the tensors of param_layout() in order, each row-major
  int64     tokens[batch * time]
  int64     targets[batch * time]        some equal to ignore_index
  float32   logits[batch * time * vocab]
  float64   loss                         mean over the counted targets
  float32   grads[param_count]           d loss / d params, same layout as params
  float64   losses[adam_steps + 1]       loss after k AdamW steps, k = 0 .. adam_steps
AdamW (torch.optim.AdamW) decays the Linear weights only (weight_decay), nothing else (biases,
layer norms, embeddings), as the transformer issue's rule says.
"""

import argparse
import math
import struct

import torch
import torch.nn.functional as F

LAYERS, HEADS, WIDTH, CONTEXT, VOCAB = 2, 2, 24, 9, 33
BATCH, TIME = 2, 9
IGNORE_INDEX = -100
ADAM_STEPS = 10
LR, BETA1, BETA2, EPS, WEIGHT_DECAY = 1e-2, 0.9, 0.95, 1e-8, 0.1
SEED = 2026


def param_layout():
    """(name, shape) of every parameter, in file order (the C++ test lists the same)."""
    c = WIDTH
    layout = [("wte", (VOCAB, c)), ("wpe", (CONTEXT, c))]
    for layer in range(LAYERS):
        p = f"h.{layer}."
        layout += [
            (p + "ln_1.weight", (c,)), (p + "ln_1.bias", (c,)),
            (p + "attn.c_attn.weight", (3 * c, c)), (p + "attn.c_attn.bias", (3 * c,)),
            (p + "attn.c_proj.weight", (c, c)), (p + "attn.c_proj.bias", (c,)),
            (p + "ln_2.weight", (c,)), (p + "ln_2.bias", (c,)),
            (p + "mlp.c_fc.weight", (4 * c, c)), (p + "mlp.c_fc.bias", (4 * c,)),
            (p + "mlp.c_proj.weight", (c, 4 * c)), (p + "mlp.c_proj.bias", (c,)),
        ]
    layout += [("ln_f.weight", (c,)), ("ln_f.bias", (c,))]
    return layout


def initial_params(generator):
    """Weights large enough that every gradient is far from zero (GPT-2's std 0.02 would leave
    the logits nearly uniform), rounded to float32."""
    params = {}
    for name, shape in param_layout():
        noise = torch.randn(shape, generator=generator, dtype=torch.float64)
        if name in ("wte", "wpe"):
            value = 0.5 * noise
        elif name.endswith(".weight") and len(shape) == 2:
            value = noise / math.sqrt(shape[1])
        elif name.startswith("ln") or ".ln_" in name:
            value = (1.0 if name.endswith(".weight") else 0.0) + 0.1 * noise
        else:
            value = 0.1 * noise
        params[name] = value.float()
    return params


def forward(p, tokens, targets):
    """Logits and mean loss of GPT-2 on tokens [batch, time]."""
    b, t = tokens.shape
    c, hs = WIDTH, WIDTH // HEADS
    x = p["wte"][tokens] + p["wpe"][:t]
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    for layer in range(LAYERS):
        q = f"h.{layer}."
        h = F.layer_norm(x, (c,), p[q + "ln_1.weight"], p[q + "ln_1.bias"], eps=1e-5)
        qkv = F.linear(h, p[q + "attn.c_attn.weight"], p[q + "attn.c_attn.bias"])
        qq, kk, vv = (z.view(b, t, HEADS, hs).transpose(1, 2) for z in qkv.split(c, dim=2))
        scores = (qq @ kk.transpose(-2, -1)) / math.sqrt(hs)
        attention = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (attention @ vv).transpose(1, 2).reshape(b, t, c)
        x = x + F.linear(y, p[q + "attn.c_proj.weight"], p[q + "attn.c_proj.bias"])
        h = F.layer_norm(x, (c,), p[q + "ln_2.weight"], p[q + "ln_2.bias"], eps=1e-5)
        h = F.gelu(F.linear(h, p[q + "mlp.c_fc.weight"], p[q + "mlp.c_fc.bias"]), approximate="tanh")
        x = x + F.linear(h, p[q + "mlp.c_proj.weight"], p[q + "mlp.c_proj.bias"])
    x = F.layer_norm(x, (c,), p["ln_f.weight"], p["ln_f.bias"], eps=1e-5)
    logits = x @ p["wte"].T  # tied head, no bias
    loss = F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1), ignore_index=IGNORE_INDEX)
    return logits, loss


def leaves(params, dtype):
    return {k: v.to(dtype).clone().requires_grad_(True) for k, v in params.items()}


def gradients(params, tokens, targets, dtype):
    p = leaves(params, dtype)
    logits, loss = forward(p, tokens, targets)
    loss.backward()
    return logits.detach(), loss.detach(), {k: v.grad for k, v in p.items()}


def adamw_losses(params, tokens, targets):
    p = leaves(params, torch.float64)
    decayed = [v for k, v in p.items() if k.endswith(".weight") and v.dim() == 2]
    others = [v for k, v in p.items() if not (k.endswith(".weight") and v.dim() == 2)]
    optimizer = torch.optim.AdamW(
        [{"params": decayed, "weight_decay": WEIGHT_DECAY}, {"params": others, "weight_decay": 0.0}],
        lr=LR, betas=(BETA1, BETA2), eps=EPS)
    losses = []
    for _ in range(ADAM_STEPS):
        optimizer.zero_grad()
        _, loss = forward(p, tokens, targets)
        losses.append(loss.item())
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        losses.append(forward(p, tokens, targets)[1].item())
    return losses


def max_relative(a, b):
    """Largest |a - b| over the largest |b|: the error relative to the tensor's scale."""
    return ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="tests/unit/data/gpt_reference.bin")
    args = parser.parse_args()
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(SEED)
    params = initial_params(generator)
    tokens = torch.randint(0, VOCAB, (BATCH, TIME), generator=generator)
    targets = torch.randint(0, VOCAB, (BATCH, TIME), generator=generator)
    targets[0, 3] = IGNORE_INDEX
    targets[1, TIME - 1] = IGNORE_INDEX

    logits, loss, grads = gradients(params, tokens, targets, torch.float64)
    logits32, loss32, grads32 = gradients(params, tokens, targets, torch.float32)
    losses = adamw_losses(params, tokens, targets)
    print(f"loss {loss.item():.9f}; PyTorch float32 against float64: loss "
          f"{abs(loss32.item() - loss.item()) / loss.item():.2e} relative, logits "
          f"{max_relative(logits32, logits):.2e}, worst gradient "
          f"{max(max_relative(grads32[k], grads[k]) for k in grads):.2e} (of the tensor's max)")
    print("AdamW losses:", " ".join(f"{x:.6f}" for x in losses))

    names = [name for name, _ in param_layout()]
    flat = lambda tensors: torch.cat([tensors[k].reshape(-1) for k in names]).float()
    with open(args.output, "wb") as out:
        out.write(b"TSGPTREF")
        out.write(struct.pack("<9I", 1, LAYERS, HEADS, WIDTH, CONTEXT, VOCAB, BATCH, TIME, ADAM_STEPS))
        out.write(struct.pack("<q", IGNORE_INDEX))
        out.write(struct.pack("<5f", LR, BETA1, BETA2, EPS, WEIGHT_DECAY))
        values = flat(params)
        out.write(struct.pack("<Q", values.numel()))
        out.write(values.numpy().astype("<f4").tobytes())
        out.write(tokens.numpy().astype("<i8").tobytes())
        out.write(targets.numpy().astype("<i8").tobytes())
        out.write(logits.float().numpy().astype("<f4").tobytes())
        out.write(struct.pack("<d", loss.item()))
        out.write(flat(grads).numpy().astype("<f4").tobytes())
        out.write(struct.pack(f"<{len(losses)}d", *losses))
    print(f"wrote {args.output}: {values.numel()} parameters")


if __name__ == "__main__":
    main()
