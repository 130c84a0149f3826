"""A training task that only attention can learn, for the backward-pass tests of both families.

The copy task: each sequence is ``L`` random tokens followed by the same ``L`` tokens again, and a
tiny causal LM (2 layers, 2 heads of ``head_dim``, learned positions) predicts every next token.
The loss is taken on the second half only, where the next token is a copy of one ``L`` positions
back: a model without a working gradient through attention cannot find it and stays at the
unigram entropy ``ln(vocab)`` (4.16 for 64 tokens), while a model with one drives the loss to
about 0. Attention is the model's only path between positions, so its gradient is what is tested.

``attn(q, k, v, causal=True, scale=None)`` is any attention callable of SDPA's layout ([B, H, S,
D]); the model casts q, k, v to ``dtype`` before the call and the output back to fp32, so an
SDPA model and a kernel under test see the same inputs.

- ``train_copy_task(attn, mode=...)``: the loss per step (eager, ``torch.compile(fullgraph=True)``
  of the loss, or one captured CUDA graph of forward, backward and optimizer step).
- ``one_step_grads(attn)``: every parameter's gradient after one forward/backward of a fixed batch.
- ``sdpa`` / ``sdpa_fp32`` / ``detached(attn)``: the reference, the fp32 reference and the control
  that must fail (an attention whose inputs are detached: the silent bug the tests exist for).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Task:
    vocab: int = 64
    half: int = 32            # L: sequence length 2L
    batch: int = 32
    d_model: int = 128
    head_dim: int = 64
    layers: int = 2
    lr: float = 3e-3
    dtype: torch.dtype = torch.bfloat16

    @property
    def heads(self) -> int:
        return self.d_model // self.head_dim

    @property
    def chance_loss(self) -> float:
        return math.log(self.vocab)


def sdpa(q, k, v, causal=True, scale=None):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def sdpa_fp32(q, k, v, causal=True, scale=None):
    """SDPA in fp32 on the same (already rounded) inputs: the reference."""
    out = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal,
                                         scale=scale)
    return out.to(q.dtype)


def detached(attn):
    """The control: ``attn`` with its inputs cut from the graph (what a silently
    non-differentiable attention does to a model)."""
    def run(q, k, v, causal=True, scale=None):
        return attn(q.detach(), k.detach(), v.detach(), causal=causal, scale=scale)
    return run


class Block(nn.Module):
    def __init__(self, t: Task, attn):
        super().__init__()
        self.t, self.attn = t, attn
        self.ln1, self.ln2 = nn.LayerNorm(t.d_model), nn.LayerNorm(t.d_model)
        self.qkv = nn.Linear(t.d_model, 3 * t.d_model)
        self.proj = nn.Linear(t.d_model, t.d_model)
        self.mlp = nn.Sequential(nn.Linear(t.d_model, 4 * t.d_model), nn.GELU(),
                                 nn.Linear(4 * t.d_model, t.d_model))

    def forward(self, x):
        B, S, _ = x.shape
        t = self.t
        qkv = self.qkv(self.ln1(x)).view(B, S, 3, t.heads, t.head_dim)
        q, k, v = (qkv[:, :, i].transpose(1, 2).to(t.dtype) for i in range(3))   # [B, H, S, D]
        o = self.attn(q, k, v, causal=True).float()
        x = x + self.proj(o.transpose(1, 2).reshape(B, S, t.d_model))
        return x + self.mlp(self.ln2(x))


class CopyLM(nn.Module):
    def __init__(self, t: Task, attn):
        super().__init__()
        self.t = t
        self.tok = nn.Embedding(t.vocab, t.d_model)
        self.pos = nn.Embedding(2 * t.half, t.d_model)
        self.blocks = nn.ModuleList(Block(t, attn) for _ in range(t.layers))
        self.ln = nn.LayerNorm(t.d_model)
        self.head = nn.Linear(t.d_model, t.vocab)

    def loss(self, x):
        """Next-token cross entropy on the second half (the copied tokens)."""
        S = x.shape[1]
        h = self.tok(x) + self.pos(torch.arange(S, device=x.device))
        for b in self.blocks:
            h = b(h)
        logits = self.head(self.ln(h))[:, :-1]
        L = self.t.half
        return F.cross_entropy(logits[:, L - 1:].reshape(-1, self.t.vocab),
                               x[:, L:].reshape(-1))


def batch(t: Task, gen: torch.Generator, device) -> torch.Tensor:
    first = torch.randint(0, t.vocab, (t.batch, t.half), generator=gen, device=device)
    return torch.cat([first, first], dim=1)


def _model(t: Task, attn, seed: int, device):
    torch.manual_seed(seed)
    return CopyLM(t, attn).to(device)


def train_copy_task(attn, *, steps: int = 150, seed: int = 0, mode: str = "eager",
                    task: Task = Task(), device="cuda") -> list[float]:
    """Train the copy-task LM with ``attn``; returns the loss of every step. ``mode``: "eager",
    "compile" (``torch.compile(model.loss, fullgraph=True)``) or "graph" (forward, backward and
    Adam step captured once in a CUDA graph and replayed on fresh batches)."""
    model = _model(task, attn, seed, device)
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    opt = torch.optim.Adam(model.parameters(), lr=task.lr, capturable=(mode == "graph"))
    losses: list[float] = []
    if mode in ("eager", "compile"):
        loss_fn = torch.compile(model.loss, fullgraph=True) if mode == "compile" else model.loss
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(batch(task, gen, device))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses
    if mode != "graph":
        raise ValueError(f"mode={mode!r}: eager, compile or graph")
    static_x = batch(task, gen, device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):          # warm-up steps (they train too) outside the capture
        for _ in range(3):
            static_x.copy_(batch(task, gen, device))
            opt.zero_grad(set_to_none=True)
            loss = model.loss(static_x)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = model.loss(static_x)
        static_loss.backward()
        opt.step()
    for _ in range(steps - len(losses)):
        static_x.copy_(batch(task, gen, device))
        graph.replay()
        losses.append(static_loss.item())
    return losses


def one_step_grads(attn, *, seed: int = 0, task: Task = Task(),
                   device="cuda") -> dict[str, torch.Tensor]:
    """Every parameter's gradient (fp32) after one forward/backward of one fixed batch, from the
    same initial weights for every ``attn``; a parameter without a gradient maps to zeros."""
    model = _model(task, attn, seed, device)
    x = batch(task, torch.Generator(device=device).manual_seed(seed + 1), device)
    model.loss(x).backward()
    return {n: (p.grad.detach().float().clone() if p.grad is not None
                else torch.zeros_like(p, dtype=torch.float32))
            for n, p in model.named_parameters()}


def final_loss(losses: list[float], last: int = 10) -> float:
    """The mean of the last ``last`` steps' losses."""
    tail = losses[-last:]
    return sum(tail) / len(tail)


def grad_errors(grads: dict, ref: dict) -> dict[str, float]:
    """Per parameter, ``‖g − g_ref‖ / ‖g_ref‖`` (inf where the reference is 0 and g is not)."""
    out = {}
    for n, r in ref.items():
        den = float(r.norm())
        num = float((grads[n] - r).norm())
        out[n] = num / den if den > 0 else (0.0 if num == 0 else math.inf)
    return out
