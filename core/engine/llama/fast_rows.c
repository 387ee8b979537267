/* One logits row's top-k candidates and its draw, for step_sampler.py's top-k rows.

   Between two decodes every call the host makes runs with cold caches: numpy's few calls
   that pick one 32k row's candidates took ~60 us there, and the chain over them ~20 us more.
   These loops do the same work in one call. The candidates are exactly step_sampler's
   `_row_candidates` (its docstring says why they hold every top-k token), in ascending token
   order, so that the chain draws the very token it draws from numpy's.

   Called through ctypes (fast_rows.py), and by lone_run.c. */

#include <stdlib.h>
#include <string.h>

#include "hot_loops.h"

#define GROUP_ROWS 128  /* step_sampler._GROUP_ROWS */
#define SUBGROUPS 8     /* step_sampler._SUBGROUPS */
#define RUN (GROUP_ROWS / SUBGROUPS)
#define MAX_GROUPS 2048 /* a 262,143-token vocabulary (the arrays below live on the stack) */

/* The k-th largest value of v[0..n) (k from 1), v reordered. */
static float kth_largest(float *v, int n, int k) {
    int lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        float pivot = v[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (v[i] > pivot) i++;
            while (v[j] < pivot) j--;
            if (i <= j) {
                float t = v[i];
                v[i++] = v[j];
                v[j--] = t;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else break;
    }
    return v[want];
}

static int by_id(const void *a, const void *b) {
    return ((const token_data *)a)->id - ((const token_data *)b)->id;
}

/* Appends token t to the candidates; 0 where they fill `cap` already. */
static int keep(token_data *out, int32_t *n, int32_t cap, int32_t t, float logit) {
    if (*n == cap) return 0;
    out[(*n)++] = (token_data){t, logit, 0.0f};
    return 1;
}

/* The tokens of `row` that reach the top_k-th highest maximum of its interleaved groups
   (group g: tokens g, g + nb, g + 2nb, ...), into `out` in ascending token order: how many,
   or -1 where the row is too short or too long for groups, or they would not fit in `cap`.
   As step_sampler's vectorised pass, each group is read in SUBGROUPS runs of its members,
   and only the runs whose maximum reaches the floor are read again. */
int32_t infertui_row_candidates(const float *row, int32_t n_vocab, int32_t top_k,
                                token_data *out, int32_t cap) {
    int nb = n_vocab / GROUP_ROWS;
    float run_max[SUBGROUPS][MAX_GROUPS], group_max[MAX_GROUPS];
    if (nb < 1 || nb > MAX_GROUPS || top_k < 1 || top_k > nb) return -1;
    for (int s = 0; s < SUBGROUPS; s++) {
        float *m = run_max[s];
        const float *first = row + (size_t)s * RUN * nb;
        memcpy(m, first, (size_t)nb * sizeof(float));
        for (int r = 1; r < RUN; r++) {
            const float *part = first + (size_t)r * nb;
            for (int g = 0; g < nb; g++) m[g] = part[g] > m[g] ? part[g] : m[g];
        }
    }
    memcpy(group_max, run_max[0], (size_t)nb * sizeof(float));
    for (int s = 1; s < SUBGROUPS; s++)
        for (int g = 0; g < nb; g++)
            group_max[g] = run_max[s][g] > group_max[g] ? run_max[s][g] : group_max[g];
    float floor = kth_largest(group_max, nb, top_k);
    int32_t n = 0;
    for (int s = 0; s < SUBGROUPS; s++) {
        for (int g = 0; g < nb; g++) {
            if (!(run_max[s][g] >= floor)) continue;
            for (int r = s * RUN; r < (s + 1) * RUN; r++) {
                int32_t t = r * nb + g;
                if (row[t] >= floor && !keep(out, &n, cap, t, row[t])) return -1;
            }
        }
    }
    for (int32_t t = nb * GROUP_ROWS; t < n_vocab; t++)  /* the tail past the last group */
        if (row[t] >= floor && !keep(out, &n, cap, t, row[t])) return -1;
    if (n > 64) {  /* (rows whose top tokens tie, or a floor many tokens reach) */
        qsort(out, (size_t)n, sizeof(token_data), by_id);
        return n;
    }
    for (int32_t i = 1; i < n; i++) {  /* ascending ids: a few dozen, an insertion sort */
        token_data x = out[i];
        int32_t j = i - 1;
        while (j >= 0 && out[j].id > x.id) {
            out[j + 1] = out[j];
            j--;
        }
        out[j + 1] = x;
    }
    return n;
}

/* Sample one row with a chain whose first sampler is top-k: its candidates, the chain over
   them, the token accepted. The token; -1 where the candidates could not be made (nothing
   drawn: the caller may sample the row another way); -2 where the chain selected none. */
int32_t infertui_sample_row(const float *row, int32_t n_vocab, int32_t top_k, void *chain,
                            apply_fn apply, accept_fn accept, token_data *out, int32_t cap) {
    int32_t n = infertui_row_candidates(row, n_vocab, top_k, out, cap);
    if (n < 1) return -1;
    token_data_array candidates = {out, (size_t)n, -1, 0};
    apply(chain, &candidates);
    if (candidates.selected < 0 || (size_t)candidates.selected >= candidates.size) return -2;
    int32_t token = candidates.data[candidates.selected].id;
    accept(chain, token);
    return token;
}
