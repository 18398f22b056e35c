// The run loop of `kvrt demo`: an engine's decode loop over kvrt's KV cache.
//
// The model (demo_model.hpp) computes Q, K and V on the CPU; everything about
// the cache goes through the public C API: kvrt_cache_place once per batch,
// then per layer kvrt_cache_write and kvrt_cache_attention recorded into one
// stream and submitted together. When the cache is full, the chosen strategy
// makes room (kvrt_cache_context_shift, or kvrt_cache_discard_for_reevaluation
// followed by evaluating the returned tokens again at their new positions).
// The memory strategy has a loop of its own (demo_memory.hpp): the model's
// memory variant over kvrt_memory_*, which never fills. So has the static
// strategy (demo_static.hpp): a cache in the static padded layout, whose
// windows slide by themselves.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "demo_check.hpp"
#include "demo_window.hpp"
#include "kvrt/kvrt.h"

namespace cli::demo {

// Shift and Reevaluate: attention over a cell cache, and what to do when it
// is full. Memory: the fixed-capacity memory instead of attention. Static:
// attention over a cache in the static padded layout, which never fills.
enum class Strategy { Shift, Reevaluate, Memory, Static };

struct Options {
    Strategy strategy = Strategy::Shift;
    kvrt_type kv_type = KVRT_TYPE_F16;
    uint32_t seqs = 1;
    uint32_t capacity = 256;  // cells; static: window rows per sequence (S - 1)
    uint32_t slots = 256;    // memory: slots per layer and head
    uint32_t tokens = 1024;  // decode steps per sequence
    uint32_t n_keep = 4;     // attention sinks kept when making room
    uint32_t check_every = 64;  // reference check every N decode steps
    double reserve = 2.0;    // static: rows reserved per region, in windows
    std::string device;      // kvrt_context_desc.device
};

// The demo's fixed prompt, one token per byte.
extern const char* const kPrompt;

// The smallest --capacity that `opt` can run with.
uint32_t min_capacity(const Options& opt);

// The token of rank `r` (0 = most likely) in a row of logits, among the
// printable ASCII bytes only: a logit mask (as engines apply for grammars)
// that keeps the output of the random model showable.
int ranked_token(const float* logits, uint32_t r);

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Adds the wall-clock time of its scope to *total.
class ScopeTimer {
public:
    explicit ScopeTimer(double* total) : total_(total), start_(Clock::now()) {}
    ~ScopeTimer() { *total_ += seconds_since(start_); }
    ScopeTimer(const ScopeTimer&) = delete;
    ScopeTimer& operator=(const ScopeTimer&) = delete;

private:
    double* total_;
    Clock::time_point start_;
};

// GPU time of one kind of operation, from the stream's timestamps.
struct OpTime {
    uint64_t count = 0;
    double ms = 0;
};

// Submits the stream's recording and waits for it; with `timestamps`, adds
// the GPU time of each recorded operation to gpu[label]. Returns the first
// failing call's result and, in *step, which call failed.
kvrt_result submit_timed(kvrt_stream stream, bool timestamps, std::map<std::string, OpTime>* gpu, const char** step);

struct Results {
    std::string device;
    uint32_t prompt_tokens = 0;
    uint64_t generated = 0;        // tokens generated, all sequences together
    uint64_t evaluated = 0;        // tokens run through the model, re-evaluations included
    std::vector<std::string> text; // the bytes each sequence generated

    // Wall clock, seconds. decode_s covers the generation loop with its
    // context management and without the reference checks (check_s).
    double setup_s = 0, prompt_s = 0, decode_s = 0, check_s = 0;
    double model_s = 0;    // the CPU model (matmuls, norms, RoPE)
    double runtime_s = 0;  // kvrt calls, submission and waits included

    bool timestamps = false;                // gpu holds figures
    std::map<std::string, OpTime> gpu;      // by operation label

    // Rounds of making room; each round shifts (or discards in) every sequence.
    uint32_t shifts = 0;                    // strategy shift
    uint32_t reevaluations = 0;             // strategy reevaluate
    uint64_t discarded = 0;                 // positions dropped, all sequences
    uint64_t reevaluated = 0;               // tokens evaluated again

    kvrt_cache_info cache{};                // at the end of the run
    uint64_t peak_device_bytes = 0;
    uint64_t validation_errors = 0;
    uint64_t validation_warnings = 0;

    uint64_t checkpoints = 0;               // steps whose attention was checked
    uint64_t checked_calls = 0;             // attention calls compared
    ErrorFigures vs_cache, vs_fresh;
    double cache_limit = 0, fresh_limit = 0;
    bool checks_passed = false;

    // Strategy memory (the cache figures above stay empty).
    struct MemoryFigures {
        uint64_t estimate_bytes = 0;   // kvrt_memory_estimate
        uint64_t created_bytes = 0;    // context device bytes added by kvrt_memory_create
        // The context's device bytes (memory, output buffer, staging) after
        // the prompt (and the forks) and after the last decode step.
        uint64_t device_bytes_start = 0, device_bytes_end = 0;
        uint64_t tokens_start = 0, tokens_end = 0;  // tokens absorbed per sequence at those points
        uint32_t forks = 0;            // kvrt_memory_seq_fork calls
        ErrorFigures reads;            // reads against the reference (checked calls)
        ErrorFigures state;            // final MV of every sequence and layer
        double limit = 0;              // NMSE limit of both
    } memory;

    // Strategy static.
    struct StaticFigures {
        uint32_t seq_len = 0;          // S = window rows + 1
        uint32_t reserved_rows = 0;    // ceil(R x (S-1)) per region
        uint64_t estimate_bytes = 0;   // kvrt_cache_estimate_size's device_bytes
        // The cache's device bytes (kvrt_cache_get_info) at creation, and
        // whether every checkpoint saw the same.
        uint64_t cache_bytes = 0;
        bool cache_bytes_constant = true;
        // The context's device bytes after the prompt, after the first step
        // whose slide copy overlapped itself (0: none did; R < 2 only: kvrt
        // copies through scratch memory, taken the first time), and after
        // the last step.
        uint64_t device_bytes_start = 0, device_bytes_first_slide = 0, device_bytes_end = 0;
        kvrt_static_stats stats{};     // kvrt_cache_static_stats of every sequence
        uint64_t model_slides = 0, model_rows_moved = 0;  // the demo's window model, all sequences
        uint64_t cells_checked = 0, cell_mismatches = 0;  // cells from kvrt_cache_place against the model
        WindowFigures windows;
        std::vector<kvrt_quant_scale> k_scales, v_scales;  // static-scale types: per layer
        double calibration_margin = 0;
    } stat;
};

// Runs the demo. Returns 0, or 1 after printing why it stopped; `out` holds
// the figures gathered so far either way.
int run(const Options& opt, Results* out);

}  // namespace cli::demo
