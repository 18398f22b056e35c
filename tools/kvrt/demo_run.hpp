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

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "demo_check.hpp"
#include "demo_model.hpp"
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

// Creates the demo's context on opt.device, logging to stderr, and reads the
// device's name into *device. Returns the first failing call's result and,
// in *step, what it was doing.
kvrt_result create_context(const Options& opt, kvrt_context* ctx, std::string* device, const char** step);

// Creates a stream labelled "kvrt demo" with GPU timestamps around every
// operation where the queue has them, without otherwise; *timestamps says which.
kvrt_result create_timed_stream(kvrt_context ctx, kvrt_stream* stream, bool* timestamps);

// A progress line on stderr: redrawn in place on a terminal (at most 10 times
// a second), otherwise one line per eighth of the run.
class ProgressLine {
public:
    ProgressLine();

    // "token <step>/<steps> | <state> | <rate> tokens/s" (seqs tokens a step),
    // when one is due; state() gives the middle part.
    template <typename State>
    void update(uint32_t step, uint32_t steps, uint32_t seqs, double elapsed_s, State state) {
        if (tty_ ? elapsed_s - last_s_ < 0.1 && step != steps : step % std::max(1u, steps / 8) != 0) return;
        print(step, steps, seqs, elapsed_s, state());
    }
    // Erases the line of a terminal, before other output.
    void clear();

private:
    void print(uint32_t step, uint32_t steps, uint32_t seqs, double elapsed_s, const std::string& state);

    const bool tty_;
    double last_s_ = -1;
    bool shown_ = false;
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

    kvrt_cache_info cache = KVRT_CACHE_INFO_INIT;                // at the end of the run
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
        uint64_t estimate_bytes = 0;   // kvrt_memory_estimate_size's device_bytes
        uint64_t created_bytes = 0;    // context device bytes added by kvrt_memory_create
        // The context's device bytes (memory, output buffer, staging) after
        // the prompt (and the forks) and after the last decode step.
        uint64_t device_bytes_start = 0, device_bytes_end = 0;
        uint64_t tokens_start = 0, tokens_end = 0;  // tokens absorbed per sequence at those points
        uint32_t forks = 0;            // kvrt_memory_seq_cp calls
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
        kvrt_static_stats stats = KVRT_STATIC_STATS_INIT;  // kvrt_cache_get_static_stats of every sequence
        uint64_t model_slides = 0, model_rows_moved = 0;  // the demo's window model, all sequences
        uint64_t cells_checked = 0, cell_mismatches = 0;  // cells from kvrt_cache_place against the model
        WindowFigures windows;
        std::vector<QuantScale> k_scales, v_scales;  // static-scale types: per layer
        double calibration_margin = 0;
    } stat;
};

// What the attention strategies' runners (Runner in demo_run.cpp,
// StaticRunner in demo_static.cpp) have in common: the kvrt objects, the
// batch evaluation (kvrt_cache_place, then per layer kvrt_cache_write and
// kvrt_cache_attention in one submission, the download and the optional
// reference check), the token bookkeeping, timings, progress and the figures
// of the end of the run. A runner supplies what differs through the virtual
// functions below.
namespace runner {

// Tokens evaluated together, each in one sequence; the tokens of a sequence
// in increasing positions.
struct Batch {
    std::vector<int> tokens;
    std::vector<int32_t> positions;
    std::vector<int32_t> seq_ids;
    std::vector<int> logit_rows;  // rows whose logits are needed

    void add(int token, size_t pos, uint32_t seq) {
        tokens.push_back(token);
        positions.push_back(static_cast<int32_t>(pos));
        seq_ids.push_back(static_cast<int32_t>(seq));
    }
    uint32_t size() const { return static_cast<uint32_t>(tokens.size()); }
};

struct Sequence {
    std::vector<int> tokens;  // the token at each position of the sequence: its n_past is tokens.size()
    int pending = 0;          // sampled from the last logits, evaluated by the next step
};

// The wording of the errors of the shared steps.
struct Labels {
    const char* place;   // kvrt_cache_place
    const char* write;   // recording kvrt_cache_write
    const char* submit;  // submitting store and attention
    const char* read;    // kvrt_cache_read of the checked cells
};

class RunnerBase {
public:
    RunnerBase(const Options& opt, Results* res, uint32_t mirror_cells, const Labels& labels);
    virtual ~RunnerBase();

    RunnerBase(const RunnerBase&) = delete;
    RunnerBase& operator=(const RunnerBase&) = delete;

    // Sets up, evaluates the prompt and decodes; returns 0, or 1 after
    // printing why it stopped.
    int run();

protected:
    virtual bool setup() = 0;
    virtual bool prompt() = 0;
    virtual bool decode() = 0;
    // Gathers the figures of the end of the run (after the shared ones).
    virtual void finish() {}
    // After kvrt_cache_place gave the batch its cells: the runner's own
    // bookkeeping (the mirror's cells).
    virtual void placed(const Batch& b, const std::vector<uint32_t>& cells) = 0;
    // After a layer's K/V rows were stored in `cells`.
    virtual void stored(const AttentionIO& io, const Batch& b, const std::vector<uint32_t>& cells) = 0;
    // The cells a reference check compares: kvrt's and the mirror's.
    virtual void checked_cells(std::vector<uint32_t>* cells, std::vector<uint32_t>* mirror_cells) const = 0;
    // The middle of the progress line, e.g. "cache 10/256 cells | context shifts 0".
    virtual std::string progress_state() const = 0;

    // Reports a failed kvrt call; true when `r` is a success.
    bool ok(kvrt_result r, const char* what);
    // Reports a disagreement between kvrt and the demo's own bookkeeping;
    // returns false.
    bool mismatch(const char* fmt, ...) __attribute__((format(printf, 2, 3)));

    // Creates the context and reads the device's name.
    bool create_context();
    // Creates the stream, with GPU timestamps where the queue has them.
    bool create_stream();
    // Creates the attention output buffer for batches of up to `rows` tokens.
    bool create_output(uint64_t rows);

    // Places a batch, then runs the model over it; the model calls attend()
    // for every layer.
    bool evaluate(const Batch& b, bool check, std::vector<float>* logits);
    // Appends each sequence's pending token to it and samples the next from
    // its row of `logits` (row s for sequence s).
    void advance(const std::vector<float>& logits);
    // Submits the recording, waits, and adds its GPU timings per operation label.
    bool submit(const char* what);
    void progress(uint32_t step, double elapsed_s);
    void progress_clear();

    const Options& opt_;
    Results& res_;
    Model model_;
    Mirror mirror_;
    Checker checker_;
    std::vector<Sequence> seqs_;

    kvrt_context ctx_ = nullptr;
    kvrt_cache cache_ = nullptr;
    kvrt_stream stream_ = nullptr;
    kvrt_buffer out_ = nullptr;  // attention outputs, downloaded after each layer

private:
    bool attend(const AttentionIO& io, const Batch& b, const std::vector<uint32_t>& cells, bool check);
    void finish_common();

    const Labels labels_;
    ProgressLine progress_line_;
};

}  // namespace runner

// Copies the context's peak device memory and validation counts into *res.
void read_context_stats(kvrt_context ctx, Results* res);

// Runs the demo. Returns 0, or 1 after printing why it stopped; `out` holds
// the figures gathered so far either way.
int run(const Options& opt, Results* out);

}  // namespace cli::demo
