/* memory.c: the fixed-capacity memory (Experimental: this part of the API
 * may change in any minor release).
 *
 * Instead of a cache that grows with every token, a memory holds per layer
 * and head N_SLOTS keys MK (fixed) and N_SLOTS value rows MV (the sequence's
 * state). A token with projections wq, wv updates the state:
 *
 *     ww = softmax(MK wq);   MV += ww (outer) wv
 *
 * and a query q reads it like attention over MK and MV:
 *
 *     out = softmax(scale * MK q) MV
 *
 * so memory and time per token stay constant however long the input. This
 * program updates a memory with 3 tokens, reads it with one query, and checks
 * both the state and the result against the same formulas computed here.
 *
 * Experimental parts are declared only for a program that opts in by
 * defining KVRT_EXPERIMENTAL before it includes kvrt.h. */
#define KVRT_EXPERIMENTAL
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <kvrt/kvrt.h>

#define N_SLOTS 4
#define DIM 4 /* key_dim and value_dim */
#define N_TOKENS 3

static void check(kvrt_result r, const char* what) {
    if (r != KVRT_SUCCESS) {
        fprintf(stderr, "%s failed: %s: %s\n", what, kvrt_result_string(r), kvrt_last_error_message());
        exit(1);
    }
}

static void log_message(void* user_data, kvrt_log_level level, const char* message) {
    (void)user_data;
    fprintf(stderr, "kvrt: %s: %s\n", level >= KVRT_LOG_LEVEL_ERROR ? "error" : "warning", message);
}

/* weights[i] = softmax(scale * keys[i] . x) over the slots. */
static void slot_weights(const float keys[N_SLOTS][DIM], const float* x, double scale, double weights[N_SLOTS]) {
    double top = -INFINITY, sum = 0.0;
    for (int i = 0; i < N_SLOTS; ++i) {
        weights[i] = 0.0;
        for (int d = 0; d < DIM; ++d) weights[i] += (double)keys[i][d] * x[d];
        weights[i] *= scale;
        if (weights[i] > top) top = weights[i];
    }
    for (int i = 0; i < N_SLOTS; ++i) sum += (weights[i] = exp(weights[i] - top));
    for (int i = 0; i < N_SLOTS; ++i) weights[i] /= sum;
}

int main(void) {
    kvrt_context_desc context_desc = KVRT_CONTEXT_DESC_INIT;
    context_desc.log_callback = log_message;
    kvrt_context ctx;
    check(kvrt_context_create(&context_desc, &ctx), "kvrt_context_create");

    /* MK: made-up keys, one row per slot, given from host memory. */
    float keys[N_SLOTS][DIM];
    for (int i = 0; i < N_SLOTS; ++i)
        for (int d = 0; d < DIM; ++d) keys[i][d] = (i == d ? 1.0f : 0.0f) + 0.25f * (float)((i + d) % 3 - 1);
    kvrt_memory_init key_init = KVRT_MEMORY_INIT_INIT;
    key_init.source = KVRT_MEMORY_SOURCE_HOST;
    key_init.host = keys;

    kvrt_memory_desc desc = KVRT_MEMORY_DESC_INIT; /* f32 state */
    desc.n_layers = 1;
    desc.n_heads = 1;
    desc.n_slots = N_SLOTS;
    desc.key_dim = DIM; /* value_dim 0: the same */
    desc.keys = &key_init;
    /* desc.values NULL: every sequence starts with MV = 0. */

    /* What it will take on the device, before creating it. */
    kvrt_memory_estimate estimate = KVRT_MEMORY_ESTIMATE_INIT;
    check(kvrt_memory_estimate_size(ctx, &desc, &estimate), "kvrt_memory_estimate_size");
    printf("memory: %llu device bytes, %llu bytes of state per sequence\n",
           (unsigned long long)estimate.device_bytes, (unsigned long long)estimate.state_bytes_per_seq);

    kvrt_memory memory;
    check(kvrt_memory_create(ctx, &desc, &memory), "kvrt_memory_create");

    /* Update sequence 0 (seq_ids NULL) with three tokens. */
    float wq[N_TOKENS][DIM], wv[N_TOKENS][DIM];
    for (int t = 0; t < N_TOKENS; ++t)
        for (int d = 0; d < DIM; ++d) {
            wq[t][d] = (float)((t + 2 * d) % 5 - 2) / 2.0f;
            wv[t][d] = (float)(t + 1) * (d % 2 ? -0.5f : 1.0f);
        }
    kvrt_tensor_ref wq_ref = KVRT_TENSOR_REF_INIT, wv_ref = KVRT_TENSOR_REF_INIT;
    wq_ref.host = wq;
    wv_ref.host = wv;
    kvrt_memory_batch update = KVRT_MEMORY_BATCH_INIT;
    update.n_tokens = N_TOKENS;
    update.layer = 0;
    update.wq = &wq_ref;
    update.wv = &wv_ref;
    check(kvrt_memory_update(memory, NULL, &update), "kvrt_memory_update");

    /* Read it with one query. */
    float q[DIM] = {0.5f, -1.0f, 1.0f, 0.25f}, out[DIM];
    kvrt_tensor_ref q_ref = KVRT_TENSOR_REF_INIT;
    q_ref.host = q;
    kvrt_output_ref out_ref = KVRT_OUTPUT_REF_INIT;
    out_ref.host = out;
    kvrt_memory_batch read = KVRT_MEMORY_BATCH_INIT;
    read.n_tokens = 1;
    read.layer = 0;
    read.q = &q_ref;
    read.out = &out_ref; /* scale 0: 1/sqrt(key_dim) */
    check(kvrt_memory_read(memory, NULL, &read), "kvrt_memory_read");

    /* The state after the update, for comparison. */
    float state[N_SLOTS][DIM];
    check(kvrt_memory_get_state(memory, 0, 0, &state[0][0], sizeof state), "kvrt_memory_get_state");

    /* The same on the CPU. */
    double mv[N_SLOTS][DIM] = {{0}}, ww[N_SLOTS], want[DIM] = {0}, max_err = 0.0;
    for (int t = 0; t < N_TOKENS; ++t) {
        slot_weights((const float(*)[DIM])keys, wq[t], 1.0, ww); /* no scale in the update */
        for (int i = 0; i < N_SLOTS; ++i)
            for (int d = 0; d < DIM; ++d) mv[i][d] += ww[i] * wv[t][d];
    }
    slot_weights((const float(*)[DIM])keys, q, 1.0 / sqrt((double)DIM), ww);
    for (int i = 0; i < N_SLOTS; ++i)
        for (int d = 0; d < DIM; ++d) {
            want[d] += ww[i] * mv[i][d];
            max_err = fmax(max_err, fabs(mv[i][d] - state[i][d]));
        }
    printf("read:     ");
    for (int d = 0; d < DIM; ++d) {
        max_err = fmax(max_err, fabs(want[d] - out[d]));
        printf(" %8.5f", out[d]);
    }
    printf("\nexpected: ");
    for (int d = 0; d < DIM; ++d) printf(" %8.5f", want[d]);
    printf("\nlargest difference (state and read): %.2e\n", max_err);

    kvrt_memory_destroy(memory);
    kvrt_context_destroy(ctx);
    if (max_err > 1e-4) {
        fprintf(stderr, "the memory does not match the CPU reference\n");
        return 1;
    }
    return 0;
}
