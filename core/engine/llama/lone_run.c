/* A lone stream's decode loop (lone_run.py): decode its token, sample the next, hand it out,
   again, without going back to Python between two decodes.

   One stream's rate is decided by what the host does between two decodes. The batch loop's
   Python step costs ~70 us a token there (the plan, the sampling's bookkeeping, the text, the
   events), a tenth of a tiny model's decode on a CPU or of a 1B model's on a GPU. Here only
   the sampling stays between two decodes: each token is written to `tokens`, counted, and
   announced with a byte on `wake_fd`. A Python thread reads them meanwhile (the text, stop
   strings, the events) while the next decode runs, and sets `stop` where the run must end
   early (a stop string, a cancel, a new job). The byte is written only while that thread
   sleeps: waking a thread on another core cost this one ~19 us a token in a VM (the
   interprocessor interrupt), so the reader looks by itself while tokens come.

   Called through ctypes (lone_run.py) with the GIL released. */

#include <math.h>
#include <time.h>
#include <unistd.h>

#include "hot_loops.h"

typedef int32_t (*decode_fn)(void *ctx, llama_batch batch);
typedef float *(*logits_fn)(void *ctx, int32_t i);
typedef _Bool (*is_eog_fn)(const void *vocab, int32_t token);
typedef int32_t (*sampled_fn)(void *ctx, int32_t i);
typedef int32_t (*chain_sample_fn)(void *chain, void *ctx, int32_t i);

typedef struct {
    /* llama.cpp's context, vocabulary and functions */
    void *ctx;
    const void *vocab;
    decode_fn decode;
    logits_fn logits;
    is_eog_fn is_eog;
    sampled_fn sampled;  /* llama_get_sampled_token_ith */
    chain_sample_fn chain_sample; /* llama_sampler_sample */
    llama_batch *batch;  /* one token: its sequence and logits flag set by the caller */
    /* the stream */
    int32_t n_vocab;
    int32_t top_k;       /* 0: greedy, the row's first highest token; else the chain's draw */
    int32_t in_graph;    /* 1: the chain runs in the graph: its token is read, not drawn here
                            (where the graph ran only its first samplers, it finishes here) */
    int32_t stateful;    /* with in_graph: the chain accepts the token here (its history) */
    void *chain;
    apply_fn apply;
    accept_fn accept;
    token_data *room;    /* candidates of a top-k row */
    int32_t room_size;
    const int32_t *ends; /* tokens that end the job besides end-of-generation ones */
    int32_t n_ends;
    int32_t ignore_eos;  /* 1: no token ends the job */
    int32_t limit;       /* tokens to sample at most */
    double max_s;        /* seconds to run at most (Python keeps its figures current) */
    int32_t wake_fd;     /* written a byte after a token while `sleeping`; -1: none */
    /* shared with the Python thread that reads the tokens */
    volatile int32_t stop; /* set from Python: no decode after this one */
    volatile int32_t sleeping; /* the reader waits for a byte on wake_fd */
    volatile int32_t count; /* tokens in `tokens` */
    int32_t *tokens;
    /* results */
    int32_t decoded;     /* decodes that succeeded (each put a cell in the sequence) */
    int32_t rc;          /* 0; llama_decode's code where it failed; -1: the last row is left
                            for the caller to sample; -2: the chain selected no token */
    double decode_s;     /* seconds in llama_decode and reading the logits */
} lone_run;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The first token with the row's highest logit. The highest value comes first, in LANES
   independent maxima the compiler vectorises, then its first place: ~5 us for a 32k row,
   against ~33 us for one loop that carries the index (a twentieth of a tiny model's decode). */
#define LANES 16
static int32_t first_highest(const float *row, int32_t n) {
    float lane[LANES], high = -INFINITY; /* (a NaN never wins: skipped, where numpy picks it) */
    int32_t t = 0;
    for (int j = 0; j < LANES; j++) lane[j] = -INFINITY;
    for (; t + LANES <= n; t += LANES)
        for (int j = 0; j < LANES; j++) lane[j] = row[t + j] > lane[j] ? row[t + j] : lane[j];
    for (int j = 0; j < LANES; j++) high = lane[j] > high ? lane[j] : high;
    for (; t < n; t++) high = row[t] > high ? row[t] : high;
    for (t = 0; t < n; t++)
        if (row[t] == high) return t;
    return 0; /* (a row of NaNs) */
}

static int ends_job(const lone_run *r, int32_t token) {
    if (r->ignore_eos) return 0;
    for (int32_t i = 0; i < r->n_ends; i++)
        if (r->ends[i] == token) return 1;
    return r->is_eog(r->vocab, token);
}

/* Runs until `limit` tokens are sampled, one ends the job, `max_s` passes, `stop` is set or
   something fails (`rc`). The batch holds the stream's next token at its position. */
void infertui_lone_run(lone_run *r) {
    double began = now();
    for (int32_t i = 0; i < r->limit; i++) {
        if (__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE) || (i && now() - began > r->max_s))
            return;
        double start = now();
        int32_t rc = r->decode(r->ctx, *r->batch);
        int32_t token = -1;
        const float *row = 0;
        if (!rc && r->in_graph)
            token = r->sampled(r->ctx, 0); /* (-1: the graph ran part of the chain) */
        else if (!rc)
            row = r->logits(r->ctx, -1);
        r->decode_s += now() - start;
        if (rc) {
            r->rc = rc;
            return;
        }
        r->decoded++;
        if (r->in_graph) { /* as step_sampler.py's StepSampler.sample */
            if (token < 0)
                token = r->chain_sample(r->chain, r->ctx, 0);
            else if (r->stateful)
                r->accept(r->chain, token);
        } else if (row) {
            token = r->top_k ? infertui_sample_row(row, r->n_vocab, r->top_k, r->chain, r->apply,
                                                   r->accept, r->room, r->room_size)
                             : first_highest(row, r->n_vocab);
        }
        if (token < 0) { /* -1: Python samples the row (and says what is wrong, if anything) */
            r->rc = token;
            return;
        }
        r->tokens[i] = token;
        /* (sequentially consistent, with the reader's in infertui_lone_run_sleep: either it
           sees this token or this sees it sleeping) */
        __atomic_store_n(&r->count, i + 1, __ATOMIC_SEQ_CST);
        if (r->wake_fd >= 0 && __atomic_load_n(&r->sleeping, __ATOMIC_SEQ_CST)) {
            char byte = 1;
            if (write(r->wake_fd, &byte, 1) < 0) { /* (a full pipe: the reader is awake) */
            }
        }
        if (ends_job(r, token)) return;
        r->batch->token[0] = token;
        r->batch->pos[0] += 1;
    }
}

/* The struct's version (bumped with every change of its fields or of these functions) and
   size: Python checks its copy against them. */
#define LAYOUT 4
int32_t infertui_lone_run_layout(void) { return LAYOUT << 16 | (int32_t)sizeof(lone_run); }

/* `count` as the reader must read it: the tokens it counts are written before it. */
int32_t infertui_lone_run_count(const lone_run *r) {
    return __atomic_load_n(&r->count, __ATOMIC_ACQUIRE);
}

/* The reader is about to wait for a byte: any token counted after this call writes one, and
   the reader's look at the count after it sees every token counted before. */
void infertui_lone_run_sleep(lone_run *r) {
    __atomic_store_n(&r->sleeping, 1, __ATOMIC_SEQ_CST);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

/* The reader is awake: no byte is needed until it sleeps again. */
void infertui_lone_run_awake(lone_run *r) { __atomic_store_n(&r->sleeping, 0, __ATOMIC_RELAXED); }
