"""The plans of the model, shape and host-path studies and the one rule they share
(``default_cases``): each family's default ``attention()`` configuration for a problem.

- ``models``: the model families (``MODEL_FAMILIES``: encoders, vision transformers,
  diffusion U-Nets, LLM prefill with grouped and multi-query heads, chunks of queries against a
  longer K/V, very long causal sequences), each at several sizes, split into a tuning and a
  validation half with no problem in common (``model_problems``);
- ``hostpath``: the host-path benchmark's problems (``HOSTPATH_PROBLEMS``);
- ``shapes``: the shape suite (``shapes_problems``).

The registry entries are in ``experiments.registry.studies``; the measure hooks in
``experiments.speed.shapes`` (models) and ``experiments.speed.eager`` (hostpath).
"""
from __future__ import annotations

from spec import Arch, Problem
from spec.case import Case


def default_cases(arch: Arch, prob: Problem, panel: str) -> list[Case]:
    """Each family's default ``attention()`` build for ``prob`` on ``arch``, linear order: the
    families' ``default_variant`` (the one place their defaults are resolved), so a study times
    the build ``attention()`` runs."""
    from cuda_baseline.host.backend import default_variant as cuda_default
    from kernels.host.backend import default_residency
    from kernels.host.backend import default_variant as cutile_default
    return [Case(prob, cutile_default(prob, arch),
                 arch.resident_ctas(default_residency(prob, arch)), panel),
            Case(prob, cuda_default(prob, arch), arch.num_sms, panel)]


MODEL_FAMILIES: dict[str, tuple[Problem, ...]] = {
    # BERT-like encoders: base (12 heads) and large (16), D=64, many batches, S 128-1024
    "encoder": tuple(Problem(b, h, s, 64) for b, h, s in (
        (64, 12, 128), (32, 12, 256), (32, 16, 384), (16, 12, 512), (24, 16, 512),
        (8, 16, 1024))),
    # vision transformers with a class token: (224/16)^2+1 = 197, (224/14)^2+1 = 257,
    # (384/16)^2+1 = 577, (448/14)^2+1 = 1025; DeiT-S 6 heads, ViT-B 12, ViT-L/H 16; bf16
    "vit": tuple(Problem(b, h, s, 64, dtype="bf16") for b, h, s in (
        (128, 6, 197), (64, 12, 197), (32, 16, 257), (32, 12, 257), (16, 16, 577),
        (8, 16, 1025))),
    # diffusion U-Nets' self-attention: latent grids 32^2 .. 96^2, 5 to 20 heads of 64,
    # batch 2 (classifier-free guidance)
    "unet": tuple(Problem(2, h, s, 64) for h, s in (
        (20, 1024), (5, 2304), (20, 2304), (5, 4096), (8, 4096), (10, 4096), (10, 9216),
        (8, 9216))),
    # LLM prefill, causal, bf16, D=128: grouped heads 4x (32/8, 64/16... 64/8 is 8x) and 8x,
    # multi-query (one K/V head), lengths that are not multiples of 64
    "llm": tuple(Problem(b, h, s, 128, H_kv=g, dtype="bf16", causal=True) for b, h, g, s in (
        (4, 16, 1, 1000), (1, 32, 8, 1537), (1, 64, 8, 2049), (2, 32, 8, 3001),
        (1, 32, 1, 4097), (1, 32, 4, 5111), (1, 32, 8, 7777))),
    # a chunk of queries against a longer K/V (S_q < S_kv): non-causal (the chunk sees the whole
    # prefix) and causal top-left aligned, as SDPA's is_causal (query row r sees keys 0..r)
    "chunk": (Problem(1, 32, 512, 128, S_kv=8192, H_kv=8, dtype="bf16"),
              Problem(1, 32, 1024, 128, S_kv=6000, H_kv=8, dtype="bf16", causal=True),
              Problem(1, 32, 2048, 128, S_kv=16384, H_kv=8, dtype="bf16"),
              Problem(1, 32, 777, 128, S_kv=12000, H_kv=8, dtype="bf16", causal=True)),
    # very long causal sequences
    "long": (Problem(1, 32, 65536, 128, H_kv=8, dtype="bf16", causal=True),
             Problem(1, 16, 100000, 64, causal=True)),
}
"""The model families, each at several sizes (the problem's label names its shape). None
is a problem ``experiments.tuning.tune`` measures (``kernels.rules.config.representatives``; a CPU
test checks it): every one is unseen by the tuning that set kernels/rules/configs/h100.json."""
HALVES = ("tuning", "validation")


def model_problems() -> list[tuple[str, str, Problem]]:
    """(family, half, problem) of every ``MODEL_FAMILIES`` problem: within a family, ordered by
    FLOPs, the problems alternate between the tuning half and the validation half, so both
    halves span every family's sizes and no problem is in both."""
    out = []
    for fam, probs in MODEL_FAMILIES.items():
        for i, p in enumerate(sorted(probs, key=lambda p: (p.flops, p.label))):
            out.append((fam, HALVES[i % 2], p))
    return out


def models_plan(arch: Arch) -> list[Case]:
    """The model shapes' coverage: every ``model_problems`` problem (panel
    ``models-<family>-<half>``) with each family's default ``attention()`` (``default_cases``),
    timed beside SDPA flash and cuDNN (kernel time, l2 cold) through the correctness gate, the
    peers' own gate where they may read the call differently, and the eager call time of each
    (host included, l2 warm; ``experiments.speed.shapes.measure``). The summary reports each half
    apart (``experiments.speed.shapes.half_lines``).

    H100 time: 33 problems; the two long causal ones cost ~50-70 ms per launch (~5 s each over
    the four launchers' 18 rounds), the others 0.05-10 ms, dominated by inputs, the fp32
    reference and the gates (~0.5-1 s each); compiling ~30 cuTile builds (H is a compile-time
    constant) and the CUDA instances in parallel ~1-2 min: about 3-4 min."""
    return [c for fam, half, p in model_problems()
            for c in default_cases(arch, p, f"models-{fam}-{half}")]


HOSTPATH_PROBLEMS = (Problem(1, 8, 256, 64),
                     Problem(2, 32, 1000, 128, H_kv=8, dtype="bf16", causal=True))
"""The host-path benchmark's problems: a tiny one (the kernel far shorter than any host path)
and an LLM prefill with grouped K/V heads at a length that is not a multiple of 64."""


def hostpath_plan(arch: Arch) -> list[Case]:
    """The host-path benchmark: per problem of ``HOSTPATH_PROBLEMS``, each family's
    default ``attention()`` (``default_cases``); the measure hook
    (``experiments.speed.eager.measure_hostpath``) times the host per call over 10,000 calls of
    ``attention()``, of its operator through the dispatcher and of the prepared launch, beside
    SDPA flash and cuDNN, then the eager call time of each. H100: the 10,000-call blocks take
    about 1 s per caller, so ~15 s per problem with compilation done in parallel first."""
    return [c for p in HOSTPATH_PROBLEMS for c in default_cases(arch, p, "hostpath")]


BENCH_SEQS = (4096, 16384, 32768)
"""The bench study's sequence lengths (the shape suite adds 128K)."""

SHAPES_BENCH_SEQS = BENCH_SEQS + (131072,)
SHAPES_SHORT = dict(B=(16, 32), S=(512, 1024, 2048), D=(64, 128))
SHAPES_GQA = dict(H_kv=(4, 8), S=(4096, 16384))
SHAPES_UNEVEN = dict(S=(1000, 3000, 7000, 20000), H=(4, 12), D=(64, 128), dtype=("fp16", "bf16"))
SHAPES_CROSS = dict(S_q=1024, S_kv=16384)


def shapes_problems() -> list[tuple[str, Problem]]:
    """The shape suite as (panel, problem), fp16 unless named:

    - ``shapes-bench``: the benchmark's shapes, B=1, H=16, S in {4K, 16K, 32K, 128K}, D in
      {64, 128}, causal and not;
    - ``shapes-short``: batched short prefill, B in {16, 32}, H=16, S in {512, 1K, 2K}, D in
      {64, 128}, causal and not;
    - ``shapes-gqa``: grouped queries, B=2, H=32, H_kv in {4, 8}, S in {4K, 16K}, D=128, causal,
      bf16;
    - ``shapes-uneven``: uneven lengths, B=1, H in {4, 12}, S in {1000, 3000, 7000, 20000}, D in
      {64, 128}, causal, fp16 and bf16;
    - ``shapes-cross``: S_q=1024 against S_kv=16K, B=1, H=16, D in {64, 128}, causal (top-left
      aligned, as SDPA's ``is_causal``: query row r sees keys 0..r) and not.
    """
    out = []
    for D in (64, 128):
        for causal in (False, True):
            out += [("shapes-bench", Problem(1, 16, s, D, causal=causal))
                    for s in SHAPES_BENCH_SEQS]
            out += [("shapes-short", Problem(b, 16, s, D, causal=causal))
                    for b in SHAPES_SHORT["B"] for s in SHAPES_SHORT["S"]]
            out.append(("shapes-cross", Problem(1, 16, SHAPES_CROSS["S_q"], D,
                                                S_kv=SHAPES_CROSS["S_kv"], causal=causal)))
    out += [("shapes-gqa", Problem(2, 32, s, 128, H_kv=g, dtype="bf16", causal=True))
            for g in SHAPES_GQA["H_kv"] for s in SHAPES_GQA["S"]]
    out += [("shapes-uneven", Problem(1, h, s, d, dtype=dt, causal=True))
            for s in SHAPES_UNEVEN["S"] for h in SHAPES_UNEVEN["H"] for d in SHAPES_UNEVEN["D"]
            for dt in SHAPES_UNEVEN["dtype"]]
    return out


def shapes_plan(arch: Arch) -> list[Case]:
    """The shape suite (``shapes_problems``, 80 problems): each family's default
    ``attention()`` configuration per problem, linear order, timed beside SDPA's flash and cuDNN
    backends through the correctness gate. cuTile: the configuration the rule chooses
    (``kernels.rules.choice.problem_config``, kernels/rules/configs/<arch>.json) and its default
    schedule; CUDA: ``cuda_baseline.host.backend.default_tiles`` and ``default_schedule`` (grid
    launch for full attention, longest-first over one wave of resident CTAs for causal).

    H100 time, estimated from profiles/h100/scaling-20261121 (per-launch medians of cuTile, CUDA,
    SDPA flash and cuDNN): the four S=128K problems cost 3.3 s per round of the four launchers,
    about 60 s over 3 warm-up and 15 timed rounds; the S=32K ones a sixteenth of that; the 72
    other problems run 0.05-2 ms per launch, so their fixed costs (inputs, fp32 reference, the
    correctness run) dominate at about 0.5 s each, 40 s; compiling the 26 distinct cuTile builds
    and the CUDA instances in parallel about 1-2 min. About 3-4 min in all (the scaling study,
    64 cases with four S=128K problems at 5 repetitions, took 59 s). The summary (geometric mean
    and minimum of the speed ratio to cuDNN and to flash per family, ``experiments.speed.shapes``)
    is printed after the measurement."""
    return [c for panel, prob in shapes_problems() for c in default_cases(arch, prob, panel)]


def bench_plan(arch: Arch) -> list[Case]:
    """The peer benchmark: each family's default ``attention()`` build (``default_cases``),
    linear order, fp16, B=1, H=16, S in {4K, 16K, 32K}, D in {64, 128}, causal and not; timed
    beside SDPA's flash and cuDNN backends."""
    return [c for D in (64, 128) for causal in (False, True) for S in BENCH_SEQS
            for c in default_cases(arch, Problem(1, 16, S, D, causal=causal),
                                   f"bench-d{D}-{'causal' if causal else 'noncausal'}")]
