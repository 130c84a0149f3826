// The CTA scheduler of the CUDA kernels, the twin of kernels/device/work.py: which work items a
// CTA takes and in which order (the CTA schedule), which K/V tiles a Q tile visits and, its mirror
// image, which Q tiles a K/V tile visits, and in which direction a CTA scans its next item (the
// scan order). spec/schedules.py and spec/orders.py are the host-side definitions the trace
// builds check these against.
//
// The work iterator takes the kernel body as a callable: for_each_work_item<SCHEDULE, WORK>(...,
// body) calls body(bh, q_tile, iter) for each of this CTA's items in order, iter counting them
// (what the sawtooth order alternates on); for_each_dealt_item<SCHEDULE>(n_work, body) is the
// deal underneath, body(w, iter) with the item's index w, for kernels that map items themselves
// (the backward's dK/dV pass). Every branch is on a template parameter, so a build keeps only
// its own schedule's arithmetic.
//
// Worked example (persistent, P = 3 CTAs, 7 items): CTA 0 takes items 0, 3, 6 grid-stride; under
// SNAKE (odd rounds dealt from the other end) it takes 0, 3 + 3 - 1 - 0 = 5, 6.
#pragma once

// Scan order: does the CTA walk the tiles of its `iter`-th work item backwards? One name in
// Python, C++ and cuTile: spec ScanOrder.reversed_for, kernels/device/work.py reversed_for, this
// function.
template <OrderKind ORDER>
__device__ __forceinline__ bool reversed_for(int iter, int cta, int sawtooth_group) {
    if constexpr (ORDER == OrderKind::LINEAR) return false;
    else if constexpr (ORDER == OrderKind::REVERSE) return true;
    else if constexpr (ORDER == OrderKind::SAWTOOTH) return (iter / sawtooth_group) & 1;
    else return cta & 1;   // BLOCK_PARITY: the ablation, direction by CTA index
}

// K/V tiles the Q tile of rows [q0, q0 + q_rows) visits, 0 .. n - 1: all n_kv, or (causal,
// top-left aligned as SDPA's is_causal) up to the one holding its last row's diagonal.
template <int TILE_N, bool CAUSAL>
__device__ __forceinline__ int kv_tiles_of_q_tile(int q0, int q_rows, int n_kv) {
    return CAUSAL ? min((q0 + q_rows + TILE_N - 1) / TILE_N, n_kv) : n_kv;
}

// The mirror image: the first Q tile that sees any key of the K/V tile starting at key k0 (the
// tiles from it to n_q - 1 do): 0, or (causal) the one holding query k0.
template <int TILE_M, bool CAUSAL>
__device__ __forceinline__ int first_q_tile_of_kv_tile(int k0, int n_q) {
    return CAUSAL ? min(k0 / TILE_M, n_q) : 0;
}

// The deal of n_work items to the CTAs. GRID: one item per CTA, item = CTA. Persistent: exactly
// P = gridDim.x CTAs; in round `iter` they take items iter * P .. iter * P + P - 1: CTA c takes
// iter * P + c (PERSISTENT, grid-stride), or in odd rounds iter * P + P - 1 - c (SNAKE and
// LONGEST_FIRST, the snake deal).
template <ScheduleKind SCHEDULE, typename Body>
__device__ __forceinline__ void for_each_dealt_item(int n_work, Body&& body) {
    const int cta = blockIdx.x;
    if constexpr (SCHEDULE == ScheduleKind::GRID) {
        body(cta, 0);
    } else {
        const int P = gridDim.x;
        for (int iter = 0; iter * P < n_work; ++iter) {
            int w = iter * P + cta;
            if constexpr (SCHEDULE == ScheduleKind::LONGEST_FIRST
                          || SCHEDULE == ScheduleKind::SNAKE) {
                if (iter & 1) w = iter * P + P - 1 - cta;
                if (w >= n_work) continue;    // the last round, dealt from either end
            } else {
                if (w >= n_work) break;
            }
            body(w, iter);
        }
    }
}

// The same grid-stride deal as for_each_dealt_item<PERSISTENT> with the last round's exit in the
// loop condition (iter * P + c < n_work): what the dK/dV pass walks. The two spellings compile to
// different SASS, and each kernel keeps the code it was measured with.
template <ScheduleKind SCHEDULE, typename Body>
__device__ __forceinline__ void for_each_strided_item(int n_work, Body&& body) {
    static_assert(SCHEDULE == ScheduleKind::GRID || SCHEDULE == ScheduleKind::PERSISTENT,
                  "grid or persistent");
    const int cta = blockIdx.x;
    if constexpr (SCHEDULE == ScheduleKind::GRID) {
        body(cta, 0);
    } else {
        for (int iter = 0; iter * static_cast<int>(gridDim.x) + cta < n_work; ++iter)
            body(iter * gridDim.x + cta, iter);
    }
}

// One work item: Q tile q_tile of batch*head bh.
struct WorkItem {
    int bh, q_tile;
};

// Whether the schedule gives each CTA exactly one item (GRID, SECTIONED_LONGEST_FIRST).
template <ScheduleKind SCHEDULE>
__host__ __device__ constexpr bool one_item() {
    return SCHEDULE == ScheduleKind::GRID || SCHEDULE == ScheduleKind::SECTIONED_LONGEST_FIRST;
}

// This CTA's one item under a one-item schedule (for_each_work_item's first two cases; the
// forward kernel calls its body with it directly, flash_fwd_impl says why).
template <ScheduleKind SCHEDULE>
__device__ __forceinline__ WorkItem one_work_item(int n_q, int n_work, int section) {
    static_assert(one_item<SCHEDULE>(), "GRID or SECTIONED_LONGEST_FIRST");
    const int cta = blockIdx.x;
    if constexpr (SCHEDULE == ScheduleKind::GRID) {
        return {cta / n_q, cta % n_q};
    } else {
        const int n_bh = n_work / n_q, G = section;
        const int sec = cta / (G * n_q), within = cta % (G * n_q);
        const int heads = min(G, n_bh - sec * G);            // the last section may be short
        return {sec * G + within % heads, n_q - 1 - within / heads};
    }
}

// This CTA's work items (bh, q_tile) of n_work = n_bh * n_q, in order (spec CtaSchedule.work_items).
// GRID: one Q tile per CTA, Q tile fastest: CTA c = q + n_q * bh. SECTIONED_LONGEST_FIRST: one Q
// tile per CTA, longest first within sections of `section` heads, heads fastest. TILE_X:
// `tiles_per_cta` consecutive Q tiles of one head per CTA: CTA c = group + n_groups * bh.
// Persistent (for_each_dealt_item): q-major w -> (bh = w / n_q, q = w % n_q); head-major
// (w % n_bh, w / n_bh); LONGEST_FIRST: items sorted longest first (q = n_q - 1 - w / n_bh,
// bh = w % n_bh).
template <ScheduleKind SCHEDULE, WorkOrder WORK, typename Body>
__device__ __forceinline__ void for_each_work_item(int n_q, int n_work, int tiles_per_cta,
                                                   int section, Body&& body) {
    const int cta = blockIdx.x;
    if constexpr (one_item<SCHEDULE>()) {
        const WorkItem w = one_work_item<SCHEDULE>(n_q, n_work, section);
        body(w.bh, w.q_tile, 0);
    } else if constexpr (SCHEDULE == ScheduleKind::TILE_X) {
        const int n_groups = (n_q + tiles_per_cta - 1) / tiles_per_cta;
        const int bh = cta / n_groups, first = (cta % n_groups) * tiles_per_cta;
        for (int k = 0; k < tiles_per_cta && first + k < n_q; ++k) body(bh, first + k, k);
    } else {
        const int n_bh = n_work / n_q;
        for_each_dealt_item<SCHEDULE>(n_work, [&](int w, int iter) {
            if constexpr (SCHEDULE == ScheduleKind::LONGEST_FIRST) {
                body(w % n_bh, n_q - 1 - w / n_bh, iter);
            } else if constexpr (WORK == WorkOrder::HEAD_MAJOR) {
                body(w % n_bh, w / n_bh, iter);
            } else {
                body(w / n_q, w % n_q, iter);
            }
        });
    }
}
