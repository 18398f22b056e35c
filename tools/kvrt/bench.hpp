// The benchmark program's framework: `kvrt bench <case> [options] [--json]`.
// Every figure comes from Vulkan timestamp queries around the measured
// operations: warm-up runs first (pipelines compile on first use), then
// several timed runs, each its own submission; median and minimum reported.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cli.hpp"

namespace cli::bench {

struct Env {
    kvrt_context ctx = nullptr;
    kvrt_device_info info = KVRT_DEVICE_INFO_INIT;
    int warmup = 2;
    int runs = 7;
    bool json = false;
    bool quiet = false;  // no progress lines
};

// The median of `v` (the mean of the middle two for an even count); 0 when
// empty.
double median_of(std::vector<double> v);

// GPU milliseconds of each timed run.
struct Measurement {
    std::vector<double> ms;
    double median() const;
    double min() const;
};

// Records `record` into `stream` and submits, `env.warmup` times untimed and
// `env.runs` times timed; sums the timings of the operations whose label
// equals `label` (nullptr: all operations) per run.
kvrt_result measure(const Env& env, kvrt_stream stream, const std::function<kvrt_result()>& record,
                    const char* label, Measurement* out);

// Wall milliseconds since t0.
double ms_since(std::chrono::steady_clock::time_point t0);

// GPU milliseconds of one decode attention pass (the batch `queries`, every
// layer 0..n_layers-1) over each of `caches`, the caches interleaved within
// each run: env.warmup untimed rounds, then env.runs timed ones.
kvrt_result measure_attention_interleaved(const Env& env, kvrt_stream stream, const std::vector<kvrt_cache>& caches,
                                          uint32_t n_layers, const kvrt_batch& queries, const kvrt_tensor_ref& q,
                                          const kvrt_output_ref& out, std::vector<Measurement>* per_cache);

// 1 with a message naming `what` when the validation layer reported errors
// in the context's life; else 0.
int validation_status(const Env& env, const char* what);

// One line of results.
struct Row {
    std::string name;                                   // the case, e.g. "fill"
    std::vector<std::pair<std::string, std::string>> params;
    Measurement m;
    double bytes = 0;                                   // bytes moved per run, for GB/s (0: none)
    std::vector<std::pair<std::string, double>> extra;  // other figures
};

struct Case {
    const char* name;
    const char* usage;  // options, for --help
    // Runs the case with its options; appends rows; returns a process exit code.
    int (*run)(Env& env, const Args& args, std::vector<Row>* rows);
    // Option sets for `kvrt bench standard`.
    std::vector<std::vector<std::string>> standard;
};

// Called from static initializers of the bench_*.cpp files.
bool register_case(const Case& c);

// A stream with timestamps, destroyed at scope exit.
class TimedStream {
public:
    explicit TimedStream(kvrt_context ctx);
    ~TimedStream();
    TimedStream(const TimedStream&) = delete;
    TimedStream& operator=(const TimedStream&) = delete;
    kvrt_result result() const { return r_; }
    operator kvrt_stream() const { return s_; }

private:
    kvrt_stream s_ = nullptr;
    kvrt_result r_;
};

// What a cache descriptor with K type `type_k` and V type `type_v` chains on
// `next`: `storage`, filled with one (scale, zero point) for every layer of
// each static-scale array that suits the benches' N(0, 1) data (U8: 1/32 and
// 128, about +-4; U16: 1/4096 and 32768, about +-8); nullptr when neither
// type is static-scale.
const kvrt_static_scales_desc* bench_scales(kvrt_type type_k, kvrt_type type_v, kvrt_static_scales_desc* storage);

// Prints rows as a table (or JSON lines with --json).
void print_rows(const Env& env, const std::vector<Row>& rows, bool header);

int cmd_bench(int argc, char** argv);

}  // namespace cli::bench
