// `kvrt demo`: a small llama-style model decoding through kvrt's KV cache,
// checked against a CPU reference as it goes. This file holds the options and
// the summary; demo_run.cpp the loop, demo_model.cpp the model and
// demo_check.cpp the reference; demo_memory.cpp and demo_static.cpp the loops
// of the memory and static strategies, demo_window.cpp the static layout's
// window checks.
#include "demo.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cli.hpp"
#include "demo_run.hpp"
#include "demo_static.hpp"
#include "kv_types.hpp"

namespace cli {

namespace {

using demo::Options;
using demo::Results;
using demo::Strategy;

const char* kUsage =
    "usage: kvrt demo [options]\n"
    "  Runs a small llama-style model (4 layers, 8 query and 2 KV heads of dim 64,\n"
    "  random weights) the way an engine would: matmuls on the CPU, the KV cache\n"
    "  in kvrt through its C API. It generates tokens greedily until the cache has\n"
    "  filled several times, checks kvrt's attention against a CPU reference in\n"
    "  double precision along the way, and prints speed, GPU time per operation,\n"
    "  memory and the errors it measured.\n"
    "\n"
    "options:\n"
    "  --strategy S      what to do when the cache is full (default shift):\n"
    "                      shift       keep the first --keep positions, drop half of\n"
    "                                  the rest and move the newer half down; kvrt\n"
    "                                  rotates the moved keys in place\n"
    "                      reevaluate  drop the newer half too, then run those tokens\n"
    "                                  through the model again at their new positions\n"
    "                      memory      no cache to fill: every layer's attention is\n"
    "                                  replaced by kvrt's fixed-capacity memory\n"
    "                                  (kvrt_memory_*, SPEC 6), --slots keys MK (model\n"
    "                                  parameters) and values MV (f32 state, from zero)\n"
    "                                  per layer and head; per token the model computes\n"
    "                                  wq and wv with projections of their own and reads\n"
    "                                  with its Q (no RoPE). The device memory stays the\n"
    "                                  same however many tokens stream through; reads\n"
    "                                  and final state are checked against a CPU\n"
    "                                  reference in double (NMSE <= 1e-6)\n"
    "                      static      the static padded layout of NPU/DSP graphs\n"
    "                                  (SPEC 5): each sequence has, per layer and KV\n"
    "                                  head, a K and a V window of --capacity rows\n"
    "                                  (S = capacity + 1) in a region of\n"
    "                                  ceil(R x capacity) rows (--reserve R). A step\n"
    "                                  appends one row (kvrt_cache_place, then\n"
    "                                  kvrt_cache_write per layer) and the window\n"
    "                                  slides by itself when the region runs out: no\n"
    "                                  context shifts. Checkpoints also check every\n"
    "                                  window's description and bytes, bit for bit,\n"
    "                                  and its mask (kvrt_cache_get_static_window, _mask),\n"
    "                                  the slides and bytes moved\n"
    "                                  (kvrt_cache_get_static_stats) and that the device\n"
    "                                  memory does not grow\n"
    "  --kv-type T       K and V storage: f16 (default), q8_0, q4_0 or f32; static:\n"
    "                    f16, f32, u8_static or u16_static, whose per-layer scales\n"
    "                    are calibrated on the prompt's K/V in f32: max |x| x 1.25\n"
    "                    / 127 with zero point 128 (u8), max |x| x 2 / 32767 with\n"
    "                    zero point 32768 (u16); memory: only f32, its state's type\n"
    "  --capacity N      cache cells (default 256; static: window rows of each\n"
    "                    sequence, S - 1; not with memory)\n"
    "  --reserve R       static: rows reserved per region, in windows: a decimal\n"
    "                    from 1 to 64 (default 2; 1 slides the whole window at\n"
    "                    every step)\n"
    "  --slots M         memory slots per layer and head (default 256; memory only)\n"
    "  --tokens N        decode steps per sequence (default 4 x capacity; memory:\n"
    "                    1024)\n"
    "  --seqs K          sequences decoding together in one batch (default 1, at\n"
    "                    most 16), sharing the prompt's cells (memory: each with\n"
    "                    its own state, forked from the prompt's; static: each\n"
    "                    with its own windows, the prompt placed in every one)\n"
    "  --keep N          attention sinks kept when making room (default 4; not with\n"
    "                    memory or static)\n"
    "  --check-every N   check attention every N steps (default 64); also checked:\n"
    "                    the prompt, and the steps right after making room (memory:\n"
    "                    the first step after the forks and the last step; static:\n"
    "                    the steps that slide a window, at most one per N steps,\n"
    "                    and the last step)\n"
    "  --device D        device index or name substring (KVRT_DEVICE overrides it)\n"
    "  --json            print the summary as one JSON object\n"
    "\n"
    "Exit status: 0 when every check passed; 1 after an error, a failed check (for\n"
    "memory and static also: device memory that grew during decoding) or a\n"
    "validation-layer error (KVRT_VALIDATION=1); 2 for bad options.\n";

constexpr uint32_t kMaxSeqs = 16;
constexpr uint32_t kMaxCapacity = 16384;
constexpr uint32_t kMaxSlots = 65536;
constexpr uint64_t kMaxTokens = 1000000;

const char* strategy_name(Strategy s) {
    switch (s) {
        case Strategy::Reevaluate: return "reevaluate";
        case Strategy::Memory: return "memory";
        case Strategy::Static: return "static";
        default: return "shift";
    }
}

int usage_error(const std::string& message) {
    std::fprintf(stderr, "error: %s\nRun 'kvrt demo --help' for the options.\n", message.c_str());
    return 2;
}

// Rejects names Args would accept silently: unknown options and positional
// arguments.
bool known_options(int argc, char** argv, std::string* error) {
    static const char* const names[] = {"strategy", "kv-type",     "capacity", "slots", "tokens", "seqs",
                                        "keep",     "check-every", "device",   "json",  "help", "reserve"};
    for (int i = 0; i < argc; ++i) {
        const std::string a = argv[i];
        if (a.rfind("--", 0) != 0) {
            *error = "unexpected argument '" + a + "'";
            return false;
        }
        const std::string name = a.substr(2, a.find('=') == std::string::npos ? std::string::npos : a.find('=') - 2);
        bool known = false;
        for (const char* n : names) known = known || name == n;
        if (!known) {
            *error = "unknown option '" + a + "'";
            return false;
        }
        const bool takes_value = name != "json" && name != "help";
        if (takes_value && a.find('=') == std::string::npos) ++i;  // skip the value
    }
    return true;
}

// Reads an integer option within [lo, hi].
bool bounded(const Args& args, const char* name, uint64_t def, uint64_t lo, uint64_t hi, uint64_t* out,
             std::string* error) {
    if (!args.u64(name, def, out, error)) return false;
    if (*out < lo || *out > hi) {
        *error = "option --" + std::string(name) + " must be between " + std::to_string(lo) + " and " +
                 std::to_string(hi) + ", not " + std::to_string(*out);
        return false;
    }
    return true;
}

// The options of --strategy memory. The cell cache's options do not apply: the
// memory never fills (no --capacity, nothing to keep), and its state is f32
// (--kv-type is accepted only as f32).
bool parse_memory_options(const Args& args, Options* opt, std::string* error) {
    for (const char* name : {"capacity", "keep"}) {
        if (args.has(name)) {
            *error = "--" + std::string(name) + " does not apply to --strategy memory, which never fills (its size is "
                     "--slots)";
            return false;
        }
    }
    const std::string type = args.str("kv-type", "f32");
    kvrt_type kv_type = KVRT_TYPE_UNDEFINED;
    if (kvrt_type_from_name(type.c_str(), &kv_type) != KVRT_SUCCESS || kv_type != KVRT_TYPE_F32) {
        *error = "--kv-type " + type + " does not apply to --strategy memory: its state is f32 (give no --kv-type, or "
                 "f32)";
        return false;
    }
    uint64_t seqs = 0, slots = 0, tokens = 0, every = 0;
    if (!bounded(args, "seqs", 1, 1, kMaxSeqs, &seqs, error) ||
        !bounded(args, "slots", 256, 1, kMaxSlots, &slots, error) ||
        !bounded(args, "tokens", 1024, 1, kMaxTokens, &tokens, error) ||
        !bounded(args, "check-every", 64, 1, kMaxTokens, &every, error))
        return false;
    opt->kv_type = KVRT_TYPE_F32;  // not used: the memory's state type
    opt->seqs = static_cast<uint32_t>(seqs);
    opt->slots = static_cast<uint32_t>(slots);
    opt->tokens = static_cast<uint32_t>(tokens);
    opt->check_every = static_cast<uint32_t>(every);
    opt->device = args.str("device");
    return true;
}

// Fills `opt` from the command line; false with a message for bad values.
bool parse_options(const Args& args, Options* opt, std::string* error) {
    const std::string strategy = args.str("strategy", "shift");
    if (strategy == "shift") {
        opt->strategy = Strategy::Shift;
    } else if (strategy == "reevaluate") {
        opt->strategy = Strategy::Reevaluate;
    } else if (strategy == "memory") {
        opt->strategy = Strategy::Memory;
    } else if (strategy == "static") {
        opt->strategy = Strategy::Static;
    } else {
        *error = "unknown --strategy '" + strategy + "' (shift, reevaluate, memory or static)";
        return false;
    }
    if (opt->strategy != Strategy::Static && args.has("reserve")) {
        *error = "--reserve applies to --strategy static only";
        return false;
    }
    if (opt->strategy == Strategy::Memory) return parse_memory_options(args, opt, error);
    if (args.has("slots")) {
        *error = "--slots applies to --strategy memory only (the cell cache's size is --capacity)";
        return false;
    }

    const bool is_static = opt->strategy == Strategy::Static;
    const std::string type = args.str("kv-type", "f16");
    if (kvrt_type_from_name(type.c_str(), &opt->kv_type) != KVRT_SUCCESS) {
        *error = "unknown --kv-type '" + type + "' (" +
                 (is_static ? "f16, f32, u8_static or u16_static" : "f16, q8_0, q4_0 or f32") + ")";
        return false;
    }
    if (is_static && (opt->kv_type == KVRT_TYPE_Q8_0 || opt->kv_type == KVRT_TYPE_Q4_0)) {
        *error = "--kv-type " + type + " does not apply to --strategy static: the static layout's rows are f16, f32, "
                 "u8_static or u16_static (block-quantized rows are not what a static graph binds)";
        return false;
    }
    if (!is_static && is_static_scale(opt->kv_type)) {
        *error = "--kv-type " + type + " is offered with --strategy static (its scales are calibrated there)";
        return false;
    }
    if (is_static) {
        if (args.has("keep")) {
            *error = "--keep does not apply to --strategy static: nothing is discarded by choice, the oldest token "
                     "leaves the window by itself";
            return false;
        }
        if (!args.f64("reserve", 2.0, &opt->reserve, error)) return false;
        if (!std::isfinite(opt->reserve) || opt->reserve < 1.0 || opt->reserve > 64.0) {
            *error = "--reserve must be a decimal from 1 to 64 (rows reserved per region, in windows), not " +
                     args.str("reserve");
            return false;
        }
    }

    const uint64_t prompt = std::strlen(demo::kPrompt);
    uint64_t seqs = 0, keep = 0, capacity = 0, tokens = 0, every = 0;
    if (!bounded(args, "seqs", 1, 1, kMaxSeqs, &seqs, error) ||
        !bounded(args, "keep", 4, 0, prompt - 2, &keep, error) ||
        !bounded(args, "check-every", 64, 1, kMaxTokens, &every, error))
        return false;
    opt->seqs = static_cast<uint32_t>(seqs);
    opt->n_keep = static_cast<uint32_t>(keep);
    opt->check_every = static_cast<uint32_t>(every);
    // The prompt plus a few steps of every sequence must fit before the first
    // context change.
    if (!bounded(args, "capacity", 256, demo::min_capacity(*opt), kMaxCapacity, &capacity, error)) return false;
    opt->capacity = static_cast<uint32_t>(capacity);
    if (!bounded(args, "tokens", 4 * capacity, 1, kMaxTokens, &tokens, error)) return false;
    opt->tokens = static_cast<uint32_t>(tokens);
    opt->device = args.str("device");
    return true;
}

std::string human_bytes(double bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB"};
    int u = 0;
    while (bytes >= 1024 && u < 3) {
        bytes /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof(buf), u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
    return buf;
}

// The first `max` bytes of a generated text (printable ASCII, as sampled),
// escaped for a double-quoted string.
std::string preview(const std::string& text, size_t max) {
    std::string out;
    for (size_t i = 0; i < text.size() && i < max; ++i) {
        if (text[i] == '"' || text[i] == '\\') out += '\\';
        out += text[i];
    }
    return out;
}

bool validation_enabled() {
    const char* v = std::getenv("KVRT_VALIDATION");
    return v && std::strcmp(v, "1") == 0;
}

double tokens_per_s(const Results& r) { return r.decode_s > 0 ? static_cast<double>(r.generated) / r.decode_s : 0; }

// One line of the accuracy figures: the worst error against a limit.
void print_error_line(const std::string& what, const demo::ErrorFigures& e, double limit) {
    std::printf("  %-36s max abs %.2e  NMSE %.2e  (limit %.0e)  %s\n", what.c_str(), e.max_abs, e.nmse, limit,
                e.nmse <= limit ? "ok" : "FAILED");
}

// The accuracy of attention, checks (a) and (b) (demo_check.hpp); `fresh` names (b).
void print_attention_accuracy(const Results& r, const char* fresh) {
    std::printf("accuracy       %llu attention calls at %llu checkpoints against a CPU reference in double:\n",
                static_cast<unsigned long long>(r.checked_calls), static_cast<unsigned long long>(r.checkpoints));
    print_error_line("(a) K/V read back from the cache", r.vs_cache, r.cache_limit);
    print_error_line(fresh, r.vs_fresh, r.fresh_limit);
}

void print_validation(const Results& r) {
    if (validation_enabled())
        std::printf("validation     %llu errors, %llu warnings from the Khronos validation layer\n",
                    static_cast<unsigned long long>(r.validation_errors),
                    static_cast<unsigned long long>(r.validation_warnings));
    else
        std::printf("validation     off (KVRT_VALIDATION=1 runs under the Khronos validation layer)\n");
}

// The GPU time per operation label, from the stream's timestamps.
void print_gpu_times(const Results& r) {
    if (r.timestamps) {
        std::printf("  GPU time     per operation, from the stream's timestamps:\n");
        int width = 12;
        for (const auto& entry : r.gpu) width = std::max(width, static_cast<int>(entry.first.size()));
        for (const auto& [label, op] : r.gpu)
            std::printf("    %-*s %7llu x %8.3f ms = %9.1f ms\n", width, label.c_str(),
                        static_cast<unsigned long long>(op.count),
                        op.count ? op.ms / static_cast<double>(op.count) : 0.0, op.ms);
    } else {
        std::printf("  GPU time     not measured: the device's queue has no timestamps\n");
    }
}

// The prompt, each sequence's output, throughput and where the time went:
// the part of the summary every strategy shares.
void print_text_and_times(const Results& r) {
    std::printf("\n  prompt       \"%s\"\n", demo::kPrompt);
    for (size_t s = 0; s < r.text.size(); ++s)
        std::printf("  output %-5s \"%s\"%s\n", r.text.size() > 1 ? ("#" + std::to_string(s)).c_str() : "",
                    preview(r.text[s], 56).c_str(), s == 0 ? "  (random weights: noise)" : "");

    std::printf("\nspeed          %.1f tokens/s: %llu tokens in %.2f s (without the reference checks)\n",
                tokens_per_s(r), static_cast<unsigned long long>(r.generated), r.decode_s);
    std::printf("  prompt       %u tokens in %.2f s, kvrt's kernels compiled on first use included\n", r.prompt_tokens,
                r.prompt_s);
    std::printf("  wall clock   model on the CPU %.2f s; kvrt calls %.2f s (recording, submission, waits);\n"
                "               reference checks %.2f s; setup %.2f s\n",
                r.model_s, r.runtime_s, r.check_s, r.setup_s);
    print_gpu_times(r);
}

void print_text(const Options& opt, const Results& r) {
    const demo::ModelConfig cfg;
    std::printf("kvrt demo: a small llama-style model on the CPU, its KV cache in kvrt\n\n");
    std::printf("  device       %s\n", r.device.c_str());
    std::printf("  model        %d layers, d_model %d, %d query heads and %d KV heads of dim %d,\n"
                "               SwiGLU %d, RoPE base %.0f, %d byte tokens, random weights\n",
                cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.d_ffn, cfg.rope_base,
                cfg.vocab);
    std::printf("  cache        %s K and V, %u cells, %s per token, %s on the device\n", type_name(opt.kv_type),
                opt.capacity, human_bytes(static_cast<double>(r.cache.bytes_per_token)).c_str(),
                human_bytes(static_cast<double>(r.cache.device_bytes)).c_str());
    std::printf("  run          %u decode steps after a %u-token prompt, %u sequence%s\n", opt.tokens, r.prompt_tokens,
                opt.seqs, opt.seqs > 1 ? "s sharing the prompt's cells" : "");
    std::printf("  when full    %s, keeping %u sinks\n",
                opt.strategy == Strategy::Shift ? "context shift" : "discard and re-evaluate", opt.n_keep);
    print_text_and_times(r);
    const std::string each = opt.seqs > 1 ? " (each over all " + std::to_string(opt.seqs) + " sequences)" : "";
    if (opt.strategy == Strategy::Shift)
        std::printf("context        %u context shifts%s, %llu positions discarded\n", r.shifts, each.c_str(),
                    static_cast<unsigned long long>(r.discarded));
    else
        std::printf("context        %u re-evaluations%s, %llu positions discarded, %llu tokens evaluated again\n",
                    r.reevaluations, each.c_str(), static_cast<unsigned long long>(r.discarded),
                    static_cast<unsigned long long>(r.reevaluated));
    std::printf("               kvrt's cell metadata matched the demo's own account after each\n");
    std::printf("memory         cache %s (%u of %u cells in use at the end); peak device memory %s,\n"
                "               the cache plus kvrt's staging and scratch buffers\n",
                human_bytes(static_cast<double>(r.cache.device_bytes)).c_str(), r.cache.used, r.cache.capacity,
                human_bytes(static_cast<double>(r.peak_device_bytes)).c_str());
    print_attention_accuracy(r, "(b) K/V in f32, RoPE at current pos");
    std::printf("               (a) is kvrt's arithmetic alone; (b) adds the cost of %s storage%s\n",
                type_name(opt.kv_type), opt.strategy == Strategy::Shift ? " and of the RoPE shifts" : "");
    print_validation(r);
}

bool memory_constant(const Results& r) {
    return r.memory.device_bytes_start != 0 && r.memory.device_bytes_end == r.memory.device_bytes_start;
}

void print_memory_text(const Options& opt, const Results& r) {
    demo::ModelConfig cfg;
    cfg.memory_slots = static_cast<int>(opt.slots);
    const Results::MemoryFigures& m = r.memory;
    std::printf("kvrt demo: a small llama-style model on the CPU, its attention replaced by kvrt's\n"
                "fixed-capacity memory\n\n");
    std::printf("  device       %s\n", r.device.c_str());
    std::printf("  model        %d layers, d_model %d, %d heads of dim %d, SwiGLU %d, %d byte tokens,\n"
                "               random weights; per layer, a memory instead of attention: wq and wv\n"
                "               from projections of their own, reads with Q (no RoPE)\n",
                cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.head_dim, cfg.d_ffn, cfg.vocab);
    std::printf("  memory       %u slots per layer and head, keys and values of %d, f32 state, %u sequence%s:\n"
                "               %s on the device (kvrt_memory_estimate_size: %s)\n",
                opt.slots, cfg.head_dim, opt.seqs, opt.seqs > 1 ? "s" : "",
                human_bytes(static_cast<double>(m.created_bytes)).c_str(),
                human_bytes(static_cast<double>(m.estimate_bytes)).c_str());
    std::printf("  run          %u decode steps after a %u-token prompt, %u sequence%s\n", opt.tokens, r.prompt_tokens,
                opt.seqs, opt.seqs > 1 ? "s, each forked from the prompt's state" : "");
    print_text_and_times(r);
    std::printf("device memory context total %s (%llu bytes) after the prompt, %llu tokens absorbed\n"
                "               per sequence; %s (%llu bytes) after the last step, %llu tokens: %s\n",
                human_bytes(static_cast<double>(m.device_bytes_start)).c_str(),
                static_cast<unsigned long long>(m.device_bytes_start), static_cast<unsigned long long>(m.tokens_start),
                human_bytes(static_cast<double>(m.device_bytes_end)).c_str(),
                static_cast<unsigned long long>(m.device_bytes_end), static_cast<unsigned long long>(m.tokens_end),
                memory_constant(r) ? "unchanged" : "GREW (FAILED)");
    std::printf("               (the memory, the reads' buffer, kvrt's staging); peak %s\n",
                human_bytes(static_cast<double>(r.peak_device_bytes)).c_str());
    std::printf("accuracy       %llu update+read calls at %llu checkpoints against a CPU reference in double\n"
                "               that absorbed every token itself:\n",
                static_cast<unsigned long long>(r.checked_calls), static_cast<unsigned long long>(r.checkpoints));
    print_error_line("reads (the layers' outputs)", m.reads, m.limit);
    print_error_line("final state MV, " + std::to_string(opt.seqs) + " seq x " + std::to_string(cfg.n_layers) + " layers",
                     m.state, m.limit);
    print_validation(r);
}

// The validation figures and the verdict, closing a JSON summary.
void print_json_end(const Results& r, bool passed) {
    std::printf("\"validation\": %s, \"validation_errors\": %llu, \"validation_warnings\": %llu, \"passed\": %s}\n",
                validation_enabled() ? "true" : "false", static_cast<unsigned long long>(r.validation_errors),
                static_cast<unsigned long long>(r.validation_warnings), passed ? "true" : "false");
}

// The GPU times as a JSON object's members.
void print_gpu_json(const Results& r) {
    std::printf("\"gpu_timestamps\": %s, \"gpu_ms\": {", r.timestamps ? "true" : "false");
    const char* sep = "";
    for (const auto& [label, op] : r.gpu) {
        std::printf("%s\"%s\": {\"count\": %llu, \"total_ms\": %.4f}", sep, json_escape(label).c_str(),
                    static_cast<unsigned long long>(op.count), op.ms);
        sep = ", ";
    }
    std::printf("}, ");
}

void print_memory_json(const Options& opt, const Results& r, bool passed) {
    const Results::MemoryFigures& m = r.memory;
    std::printf("{\"device\": \"%s\", \"strategy\": \"memory\", \"state_type\": \"f32\", \"slots\": %u, "
                "\"seqs\": %u, \"prompt_tokens\": %u, \"decode_steps\": %u, \"generated_tokens\": %llu, "
                "\"evaluated_tokens\": %llu, ",
                json_escape(r.device).c_str(), opt.slots, opt.seqs, r.prompt_tokens, opt.tokens,
                static_cast<unsigned long long>(r.generated), static_cast<unsigned long long>(r.evaluated));
    std::printf("\"tokens_per_s\": %.3f, \"decode_s\": %.4f, \"prompt_s\": %.4f, \"setup_s\": %.4f, "
                "\"check_s\": %.4f, \"model_cpu_s\": %.4f, \"kvrt_calls_s\": %.4f, ",
                tokens_per_s(r), r.decode_s, r.prompt_s, r.setup_s, r.check_s, r.model_s, r.runtime_s);
    print_gpu_json(r);
    std::printf("\"forks\": %u, \"memory_estimate_bytes\": %llu, \"memory_device_bytes\": %llu, "
                "\"device_bytes_start\": %llu, \"tokens_start\": %llu, \"device_bytes_end\": %llu, "
                "\"tokens_end\": %llu, \"device_bytes_constant\": %s, \"peak_device_bytes\": %llu, ",
                m.forks, static_cast<unsigned long long>(m.estimate_bytes),
                static_cast<unsigned long long>(m.created_bytes), static_cast<unsigned long long>(m.device_bytes_start),
                static_cast<unsigned long long>(m.tokens_start), static_cast<unsigned long long>(m.device_bytes_end),
                static_cast<unsigned long long>(m.tokens_end), memory_constant(r) ? "true" : "false",
                static_cast<unsigned long long>(r.peak_device_bytes));
    std::printf("\"checkpoints\": %llu, \"checked_calls\": %llu, "
                "\"reads\": {\"max_abs\": %.6e, \"nmse\": %.6e, \"limit\": %.1e}, "
                "\"state\": {\"max_abs\": %.6e, \"nmse\": %.6e, \"limit\": %.1e}, ",
                static_cast<unsigned long long>(r.checkpoints), static_cast<unsigned long long>(r.checked_calls),
                m.reads.max_abs, m.reads.nmse, m.limit, m.state.max_abs, m.state.nmse, m.limit);
    print_json_end(r, passed);
}

void print_json(const Options& opt, const Results& r, bool passed) {
    std::printf("{\"device\": \"%s\", \"strategy\": \"%s\", \"kv_type\": \"%s\", \"seqs\": %u, \"capacity\": %u, "
                "\"n_keep\": %u, \"prompt_tokens\": %u, \"decode_steps\": %u, \"generated_tokens\": %llu, "
                "\"evaluated_tokens\": %llu, ",
                json_escape(r.device).c_str(), strategy_name(opt.strategy), type_name(opt.kv_type), opt.seqs,
                opt.capacity, opt.n_keep, r.prompt_tokens, opt.tokens, static_cast<unsigned long long>(r.generated),
                static_cast<unsigned long long>(r.evaluated));
    std::printf("\"tokens_per_s\": %.3f, \"decode_s\": %.4f, \"prompt_s\": %.4f, \"setup_s\": %.4f, \"check_s\": %.4f, "
                "\"model_cpu_s\": %.4f, \"kvrt_calls_s\": %.4f, ",
                tokens_per_s(r), r.decode_s, r.prompt_s, r.setup_s, r.check_s, r.model_s, r.runtime_s);
    print_gpu_json(r);
    std::printf("\"context_shifts\": %u, \"reevaluations\": %u, \"discarded_positions\": %llu, "
                "\"reevaluated_tokens\": %llu, ",
                r.shifts, r.reevaluations, static_cast<unsigned long long>(r.discarded),
                static_cast<unsigned long long>(r.reevaluated));
    std::printf("\"cache_device_bytes\": %llu, \"bytes_per_token\": %llu, \"cells_used\": %u, \"peak_device_bytes\": %llu, ",
                static_cast<unsigned long long>(r.cache.device_bytes),
                static_cast<unsigned long long>(r.cache.bytes_per_token), r.cache.used,
                static_cast<unsigned long long>(r.peak_device_bytes));
    std::printf("\"checkpoints\": %llu, \"checked_calls\": %llu, "
                "\"vs_cache\": {\"max_abs\": %.6e, \"nmse\": %.6e, \"limit\": %.1e}, "
                "\"vs_fresh\": {\"max_abs\": %.6e, \"nmse\": %.6e, \"limit\": %.1e}, ",
                static_cast<unsigned long long>(r.checkpoints), static_cast<unsigned long long>(r.checked_calls),
                r.vs_cache.max_abs, r.vs_cache.nmse, r.cache_limit, r.vs_fresh.max_abs, r.vs_fresh.nmse,
                r.fresh_limit);
    print_json_end(r, passed);
}

// The cache's device memory never changed, and the context's did not grow
// after the first overlapping slide (see Results::StaticFigures).
bool static_memory_constant(const Results& r) {
    const Results::StaticFigures& st = r.stat;
    const uint64_t baseline = st.device_bytes_first_slide ? st.device_bytes_first_slide : st.device_bytes_start;
    return st.cache_bytes_constant && st.device_bytes_start != 0 && st.device_bytes_end == baseline;
}

std::string with_commas(uint64_t v) {
    std::string digits = std::to_string(v), out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return out;
}

// "0.0312..0.0405" over the layers' scales.
std::string scale_range(const std::vector<QuantScale>& scales) {
    float lo = scales.empty() ? 0 : scales[0].scale, hi = lo;
    for (const QuantScale& s : scales) {
        lo = std::min(lo, s.scale);
        hi = std::max(hi, s.scale);
    }
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.4g..%.4g", static_cast<double>(lo), static_cast<double>(hi));
    return buf;
}

void print_static_text(const Options& opt, const Results& r) {
    const demo::ModelConfig cfg;
    const Results::StaticFigures& st = r.stat;
    const demo::WindowFigures& w = st.windows;
    std::printf("kvrt demo: a small llama-style model on the CPU, its KV cache in kvrt's static padded\n"
                "layout (the NPU/DSP graphs' windows)\n\n");
    std::printf("  device       %s\n", r.device.c_str());
    std::printf("  model        %d layers, d_model %d, %d query heads and %d KV heads of dim %d,\n"
                "               SwiGLU %d, RoPE base %.0f, %d byte tokens, random weights\n",
                cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.d_ffn, cfg.rope_base,
                cfg.vocab);
    std::printf("  cache        static layout, %s K and V: S = %u, windows of %u rows, R = %g: %u rows\n"
                "               reserved per region; %u sequence%s with %s own windows;\n"
                "               %s on the device (kvrt_cache_estimate_size: %s)\n",
                type_name(opt.kv_type), st.seq_len, opt.capacity, opt.reserve, st.reserved_rows, opt.seqs,
                opt.seqs > 1 ? "s" : "", opt.seqs > 1 ? "their" : "its", human_bytes(static_cast<double>(st.cache_bytes)).c_str(),
                human_bytes(static_cast<double>(st.estimate_bytes)).c_str());
    if (!st.k_scales.empty())
        std::printf("  scales       per layer, from the prompt's K/V in f32 (max |x| x %.2f / %s, zero point %s):\n"
                    "               K %s, V %s\n",
                    st.calibration_margin, opt.kv_type == KVRT_TYPE_U8_STATIC ? "127" : "32767",
                    opt.kv_type == KVRT_TYPE_U8_STATIC ? "128" : "32768", scale_range(st.k_scales).c_str(),
                    scale_range(st.v_scales).c_str());
    std::printf("  run          %u decode steps after a %u-token prompt, %u sequence%s\n", opt.tokens, r.prompt_tokens,
                opt.seqs, opt.seqs > 1 ? "s" : "");
    std::printf("  when full    nothing to do: the oldest token leaves the window, which slides by\n"
                "               itself when its region runs out (no context shifts)\n");
    print_text_and_times(r);
    const bool stats_ok = st.stats.slides == st.model_slides && st.stats.rows_moved == st.model_rows_moved;
    std::printf("windows        %llu slides, %llu rows moved per region, %s bytes moved in all, %s rows\n"
                "               appended (kvrt_cache_get_static_stats): %s\n",
                static_cast<unsigned long long>(st.stats.slides), static_cast<unsigned long long>(st.stats.rows_moved),
                with_commas(st.stats.bytes_moved).c_str(), with_commas(st.stats.rows_appended).c_str(),
                stats_ok ? "as the demo's own window model predicts" : "NOT what the window model predicts (FAILED)");
    std::printf("               checked at each checkpoint: %s windows (every sequence, layer, KV head,\n"
                "               K and V): buffer, offset, row stride, valid rows and positions; %s\n"
                "               bytes downloaded: %s valid rows equal to the demo's own rows in %s\n"
                "               and to kvrt_cache_read; %s masks (f32 and f16); %s cells from\n"
                "               kvrt_cache_place. %s\n",
                with_commas(w.windows).c_str(), with_commas(w.bytes).c_str(), with_commas(w.rows).c_str(),
                type_name(opt.kv_type), with_commas(w.masks).c_str(), with_commas(st.cells_checked).c_str(),
                w.mismatches + st.cell_mismatches == 0
                    ? "All as expected."
                    : ("MISMATCHES: " + std::to_string(w.mismatches + st.cell_mismatches) + " (FAILED)").c_str());
    if (w.mismatches) std::printf("               first: %s\n", w.first_mismatch.c_str());
    std::printf("memory         cache %s at creation and at every checkpoint%s (estimated: %s)\n",
                human_bytes(static_cast<double>(st.cache_bytes)).c_str(),
                st.cache_bytes_constant ? "" : " (CHANGED: FAILED)",
                human_bytes(static_cast<double>(st.estimate_bytes)).c_str());
    const char* verdict = static_memory_constant(r) ? "never grew" : "GREW (FAILED)";
    if (st.device_bytes_first_slide > st.device_bytes_start) {
        std::printf("               context total: %s after the prompt; %s after the first overlapping\n"
                    "               slide (+%s: kvrt's scratch for its copy, kept for the next ones);\n"
                    "               %s after the last step: %s after that slide; peak %s\n",
                    human_bytes(static_cast<double>(st.device_bytes_start)).c_str(),
                    human_bytes(static_cast<double>(st.device_bytes_first_slide)).c_str(),
                    human_bytes(static_cast<double>(st.device_bytes_first_slide - st.device_bytes_start)).c_str(),
                    human_bytes(static_cast<double>(st.device_bytes_end)).c_str(), verdict,
                    human_bytes(static_cast<double>(r.peak_device_bytes)).c_str());
    } else {
        std::printf("               context total: %s after the prompt, %s after the last step:\n"
                    "               %s; peak %s\n",
                    human_bytes(static_cast<double>(st.device_bytes_start)).c_str(),
                    human_bytes(static_cast<double>(st.device_bytes_end)).c_str(), verdict,
                    human_bytes(static_cast<double>(r.peak_device_bytes)).c_str());
    }
    print_attention_accuracy(r, "(b) K/V in f32, RoPE in double");
    std::printf("               (a) is kvrt's arithmetic alone; (b) adds the cost of %s storage\n",
                type_name(opt.kv_type));
    if (w.stored_values)
        std::printf("               (%s of %s stored values, %.2g%%, outside the scales' range: clamped)\n",
                    with_commas(w.clipped_values).c_str(), with_commas(w.stored_values).c_str(),
                    100.0 * static_cast<double>(w.clipped_values) / static_cast<double>(w.stored_values));
    print_validation(r);
}

void print_static_json(const Options& opt, const Results& r, bool passed) {
    const Results::StaticFigures& st = r.stat;
    const demo::WindowFigures& w = st.windows;
    std::printf("{\"device\": \"%s\", \"strategy\": \"static\", \"kv_type\": \"%s\", \"seqs\": %u, \"seq_len\": %u, "
                "\"window_rows\": %u, \"reserve\": %.15g, \"reserved_rows\": %u, \"prompt_tokens\": %u, "
                "\"decode_steps\": %u, \"generated_tokens\": %llu, \"evaluated_tokens\": %llu, ",
                json_escape(r.device).c_str(), type_name(opt.kv_type), opt.seqs, st.seq_len, opt.capacity, opt.reserve,
                st.reserved_rows, r.prompt_tokens, opt.tokens, static_cast<unsigned long long>(r.generated),
                static_cast<unsigned long long>(r.evaluated));
    std::printf("\"tokens_per_s\": %.3f, \"decode_s\": %.4f, \"prompt_s\": %.4f, \"setup_s\": %.4f, \"check_s\": %.4f, "
                "\"model_cpu_s\": %.4f, \"kvrt_calls_s\": %.4f, ",
                tokens_per_s(r), r.decode_s, r.prompt_s, r.setup_s, r.check_s, r.model_s, r.runtime_s);
    print_gpu_json(r);
    const auto scales = [](const char* name, const std::vector<QuantScale>& v) {
        std::printf("\"%s\": [", name);
        for (size_t i = 0; i < v.size(); ++i)
            std::printf("%s{\"scale\": %.9g, \"zero_point\": %d}", i ? ", " : "", static_cast<double>(v[i].scale),
                        v[i].zero_point);
        std::printf("], ");
    };
    scales("k_scales", st.k_scales);
    scales("v_scales", st.v_scales);
    std::printf("\"stored_values\": %llu, \"clipped_values\": %llu, ", static_cast<unsigned long long>(w.stored_values),
                static_cast<unsigned long long>(w.clipped_values));
    std::printf("\"rows_appended\": %llu, \"slides\": %llu, \"rows_moved\": %llu, \"bytes_moved\": %llu, "
                "\"model_slides\": %llu, \"model_rows_moved\": %llu, ",
                static_cast<unsigned long long>(st.stats.rows_appended), static_cast<unsigned long long>(st.stats.slides),
                static_cast<unsigned long long>(st.stats.rows_moved), static_cast<unsigned long long>(st.stats.bytes_moved),
                static_cast<unsigned long long>(st.model_slides), static_cast<unsigned long long>(st.model_rows_moved));
    std::printf("\"windows_checked\": %llu, \"window_rows_checked\": %llu, \"window_bytes_checked\": %llu, "
                "\"masks_checked\": %llu, \"cells_checked\": %llu, \"mismatches\": %llu, ",
                static_cast<unsigned long long>(w.windows), static_cast<unsigned long long>(w.rows),
                static_cast<unsigned long long>(w.bytes), static_cast<unsigned long long>(w.masks),
                static_cast<unsigned long long>(st.cells_checked),
                static_cast<unsigned long long>(w.mismatches + st.cell_mismatches));
    std::printf("\"cache_device_bytes\": %llu, \"estimate_device_bytes\": %llu, \"cache_bytes_constant\": %s, "
                "\"device_bytes_start\": %llu, \"device_bytes_first_slide\": %llu, \"device_bytes_end\": %llu, "
                "\"device_bytes_constant\": %s, \"peak_device_bytes\": %llu, ",
                static_cast<unsigned long long>(st.cache_bytes), static_cast<unsigned long long>(st.estimate_bytes),
                st.cache_bytes_constant ? "true" : "false", static_cast<unsigned long long>(st.device_bytes_start),
                static_cast<unsigned long long>(st.device_bytes_first_slide),
                static_cast<unsigned long long>(st.device_bytes_end), static_memory_constant(r) ? "true" : "false",
                static_cast<unsigned long long>(r.peak_device_bytes));
    std::printf("\"checkpoints\": %llu, \"checked_calls\": %llu, "
                "\"vs_cache\": {\"max_abs\": %.6e, \"nmse\": %.6e, \"limit\": %.1e}, "
                "\"vs_fresh\": {\"max_abs\": %.6e, \"nmse\": %.6e, \"limit\": %.1e}, ",
                static_cast<unsigned long long>(r.checkpoints), static_cast<unsigned long long>(r.checked_calls),
                r.vs_cache.max_abs, r.vs_cache.nmse, r.cache_limit, r.vs_fresh.max_abs, r.vs_fresh.nmse, r.fresh_limit);
    print_json_end(r, passed);
}

}  // namespace

int cmd_demo(int argc, char** argv) {
    std::string error;
    Args args;
    if (!known_options(argc, argv, &error) || !args.parse(argc, argv, {"json", "help"}, &error))
        return usage_error(error);
    if (args.has("help")) {
        std::printf("%s", kUsage);
        return 0;
    }
    Options opt;
    if (!parse_options(args, &opt, &error)) return usage_error(error);

    Results r;
    if (demo::run(opt, &r) != 0) return 1;

    const bool passed = r.checks_passed && r.validation_errors == 0;
    const bool memory = opt.strategy == Strategy::Memory;
    const bool is_static = opt.strategy == Strategy::Static;
    const bool json = args.has("json");
    if (memory) json ? print_memory_json(opt, r, passed) : print_memory_text(opt, r);
    else if (is_static) json ? print_static_json(opt, r, passed) : print_static_text(opt, r);
    else json ? print_json(opt, r, passed) : print_text(opt, r);
    std::fflush(stdout);
    if (!r.checks_passed && memory && !memory_constant(r))
        std::fprintf(stderr, "error: the device memory grew while the tokens streamed through the memory\n");
    if (!r.checks_passed && is_static) {
        const Results::StaticFigures& st = r.stat;
        if (!static_memory_constant(r))
            std::fprintf(stderr, "error: the device memory grew while the windows slid\n");
        if (st.windows.mismatches || st.cell_mismatches || st.stats.slides != st.model_slides ||
            st.stats.rows_moved != st.model_rows_moved)
            std::fprintf(stderr, "error: kvrt's static windows differ from what the demo stored and expects\n");
    }
    if (!r.checks_passed && !(memory && !memory_constant(r)) &&
        (r.vs_cache.nmse > r.cache_limit || r.vs_fresh.nmse > r.fresh_limit ||
         (memory && (r.memory.reads.nmse > r.memory.limit || r.memory.state.nmse > r.memory.limit))))
        std::fprintf(stderr, "error: kvrt's %s is further from the CPU reference than the limits allow\n",
                     memory ? "memory" : "attention");
    if (r.validation_errors)
        std::fprintf(stderr, "error: the Vulkan validation layer reported %llu errors\n",
                     static_cast<unsigned long long>(r.validation_errors));
    if (!args.has("json")) std::printf("\n%s\n", passed ? "PASS" : "FAIL");
    return passed ? 0 : 1;
}

}  // namespace cli
