// `kvrt demo`: a small llama-style model decoding through kvrt's KV cache,
// checked against a CPU reference as it goes. This file holds the options and
// the summary; demo_run.cpp the loop, demo_model.cpp the model and
// demo_check.cpp the reference.
#include "demo.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cli.hpp"
#include "demo_run.hpp"

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
    "  --kv-type T       K and V storage: f16 (default), q8_0, q4_0 or f32\n"
    "                    (memory: only f32, the type of its state)\n"
    "  --capacity N      cache cells (default 256; not with memory)\n"
    "  --slots M         memory slots per layer and head (default 256; memory only)\n"
    "  --tokens N        decode steps per sequence (default 4 x capacity; memory:\n"
    "                    1024)\n"
    "  --seqs K          sequences decoding together in one batch (default 1, at\n"
    "                    most 16), sharing the prompt's cells (memory: each with\n"
    "                    its own state, forked from the prompt's)\n"
    "  --keep N          attention sinks kept when making room (default 4; not with\n"
    "                    memory)\n"
    "  --check-every N   check attention every N steps (default 64); also checked:\n"
    "                    the prompt, and the steps right after making room (memory:\n"
    "                    the first step after the forks and the last step)\n"
    "  --device D        device index or name substring (KVRT_DEVICE overrides it)\n"
    "  --json            print the summary as one JSON object\n"
    "\n"
    "Exit status: 0 when every check passed; 1 after an error, a failed check (for\n"
    "memory also: device memory that grew during decoding) or a validation-layer\n"
    "error (KVRT_VALIDATION=1); 2 for bad options.\n";

constexpr uint32_t kMaxSeqs = 16;
constexpr uint32_t kMaxCapacity = 16384;
constexpr uint32_t kMaxSlots = 65536;
constexpr uint64_t kMaxTokens = 1000000;

const char* type_name(kvrt_type t) {
    switch (t) {
        case KVRT_TYPE_F32: return "f32";
        case KVRT_TYPE_Q8_0: return "q8_0";
        case KVRT_TYPE_Q4_0: return "q4_0";
        default: return "f16";
    }
}

const char* strategy_name(Strategy s) {
    switch (s) {
        case Strategy::Reevaluate: return "reevaluate";
        case Strategy::Memory: return "memory";
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
                                        "keep",     "check-every", "device",   "json",  "help"};
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
    if (type != "f32") {
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
        *error = "--strategy static is not available in this build (it needs the static padded layout, which kvrt "
                 "does not offer yet)";
        return false;
    } else {
        *error = "unknown --strategy '" + strategy + "' (shift, reevaluate or memory)";
        return false;
    }
    if (opt->strategy == Strategy::Memory) return parse_memory_options(args, opt, error);
    if (args.has("slots")) {
        *error = "--slots applies to --strategy memory only (the cell cache's size is --capacity)";
        return false;
    }

    const std::string type = args.str("kv-type", "f16");
    if (type == "f16") opt->kv_type = KVRT_TYPE_F16;
    else if (type == "q8_0") opt->kv_type = KVRT_TYPE_Q8_0;
    else if (type == "q4_0") opt->kv_type = KVRT_TYPE_Q4_0;
    else if (type == "f32") opt->kv_type = KVRT_TYPE_F32;
    else {
        *error = "unknown --kv-type '" + type + "' (f16, q8_0, q4_0 or f32)";
        return false;
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
    std::printf("accuracy       %llu attention calls at %llu checkpoints against a CPU reference in double:\n",
                static_cast<unsigned long long>(r.checked_calls), static_cast<unsigned long long>(r.checkpoints));
    const auto line = [](const char* what, const demo::ErrorFigures& e, double limit) {
        std::printf("  %-36s max abs %.2e  NMSE %.2e  (limit %.0e)  %s\n", what, e.max_abs, e.nmse, limit,
                    e.nmse <= limit ? "ok" : "FAILED");
    };
    line("(a) K/V read back from the cache", r.vs_cache, r.cache_limit);
    line("(b) K/V in f32, RoPE at current pos", r.vs_fresh, r.fresh_limit);
    std::printf("               (a) is kvrt's arithmetic alone; (b) adds the cost of %s storage%s\n",
                type_name(opt.kv_type), opt.strategy == Strategy::Shift ? " and of the RoPE shifts" : "");
    if (validation_enabled())
        std::printf("validation     %llu errors, %llu warnings from the Khronos validation layer\n",
                    static_cast<unsigned long long>(r.validation_errors),
                    static_cast<unsigned long long>(r.validation_warnings));
    else
        std::printf("validation     off (KVRT_VALIDATION=1 runs under the Khronos validation layer)\n");
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
                "               %s on the device (kvrt_memory_estimate: %s)\n",
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
    const auto line = [&](const std::string& what, const demo::ErrorFigures& e) {
        std::printf("  %-36s max abs %.2e  NMSE %.2e  (limit %.0e)  %s\n", what.c_str(), e.max_abs, e.nmse, m.limit,
                    e.nmse <= m.limit ? "ok" : "FAILED");
    };
    line("reads (the layers' outputs)", m.reads);
    line("final state MV, " + std::to_string(opt.seqs) + " seq x " + std::to_string(cfg.n_layers) + " layers", m.state);
    if (validation_enabled())
        std::printf("validation     %llu errors, %llu warnings from the Khronos validation layer\n",
                    static_cast<unsigned long long>(r.validation_errors),
                    static_cast<unsigned long long>(r.validation_warnings));
    else
        std::printf("validation     off (KVRT_VALIDATION=1 runs under the Khronos validation layer)\n");
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
    std::printf("\"validation\": %s, \"validation_errors\": %llu, \"validation_warnings\": %llu, \"passed\": %s}\n",
                validation_enabled() ? "true" : "false", static_cast<unsigned long long>(r.validation_errors),
                static_cast<unsigned long long>(r.validation_warnings), passed ? "true" : "false");
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
    std::printf("\"validation\": %s, \"validation_errors\": %llu, \"validation_warnings\": %llu, \"passed\": %s}\n",
                validation_enabled() ? "true" : "false", static_cast<unsigned long long>(r.validation_errors),
                static_cast<unsigned long long>(r.validation_warnings), passed ? "true" : "false");
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
    if (args.has("json")) memory ? print_memory_json(opt, r, passed) : print_json(opt, r, passed);
    else memory ? print_memory_text(opt, r) : print_text(opt, r);
    std::fflush(stdout);
    if (!r.checks_passed && memory && !memory_constant(r))
        std::fprintf(stderr, "error: the device memory grew while the tokens streamed through the memory\n");
    if (!r.checks_passed && (!memory || memory_constant(r)))
        std::fprintf(stderr, "error: kvrt's %s is further from the CPU reference than the limits allow\n",
                     memory ? "memory" : "attention");
    if (r.validation_errors)
        std::fprintf(stderr, "error: the Vulkan validation layer reported %llu errors\n",
                     static_cast<unsigned long long>(r.validation_errors));
    if (!args.has("json")) std::printf("\n%s\n", passed ? "PASS" : "FAIL");
    return passed ? 0 : 1;
}

}  // namespace cli
