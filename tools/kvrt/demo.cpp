// `kvrt demo`: a small llama-style model decoding through kvrt's KV cache,
// checked against a CPU reference as it goes. This file holds the options and
// the summary; demo_run.cpp the loop, demo_model.cpp the model and
// demo_check.cpp the reference.
#include "demo.hpp"

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
    "  --kv-type T       K and V storage: f16 (default), q8_0, q4_0 or f32\n"
    "  --capacity N      cache cells (default 256)\n"
    "  --tokens N        decode steps per sequence (default 4 x capacity)\n"
    "  --seqs K          sequences decoding together in one batch, sharing the\n"
    "                    prompt's cells (default 1, at most 16)\n"
    "  --keep N          attention sinks kept when making room (default 4)\n"
    "  --check-every N   check attention every N steps (default 64); also checked:\n"
    "                    the prompt, and the steps right after making room\n"
    "  --device D        device index or name substring (KVRT_DEVICE overrides it)\n"
    "  --json            print the summary as one JSON object\n"
    "\n"
    "Exit status: 0 when every check passed; 1 after an error, a failed check or a\n"
    "validation-layer error (KVRT_VALIDATION=1); 2 for bad options.\n";

constexpr uint32_t kMaxSeqs = 16;
constexpr uint32_t kMaxCapacity = 16384;
constexpr uint64_t kMaxTokens = 1000000;

const char* type_name(kvrt_type t) {
    switch (t) {
        case KVRT_TYPE_F32: return "f32";
        case KVRT_TYPE_Q8_0: return "q8_0";
        case KVRT_TYPE_Q4_0: return "q4_0";
        default: return "f16";
    }
}

const char* strategy_name(Strategy s) { return s == Strategy::Shift ? "shift" : "reevaluate"; }

int usage_error(const std::string& message) {
    std::fprintf(stderr, "error: %s\nRun 'kvrt demo --help' for the options.\n", message.c_str());
    return 2;
}

// Rejects names Args would accept silently: unknown options and positional
// arguments.
bool known_options(int argc, char** argv, std::string* error) {
    static const char* const names[] = {"strategy", "kv-type", "capacity", "tokens", "seqs",
                                        "keep",     "check-every", "device", "json",   "help"};
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

// Fills `opt` from the command line; false with a message for bad values.
bool parse_options(const Args& args, Options* opt, std::string* error) {
    const std::string strategy = args.str("strategy", "shift");
    if (strategy == "shift") {
        opt->strategy = Strategy::Shift;
    } else if (strategy == "reevaluate") {
        opt->strategy = Strategy::Reevaluate;
    } else if (strategy == "static" || strategy == "memory") {
        *error = "--strategy " + strategy + " is not available in this build (it needs the " +
                 (strategy == "static" ? "static padded layout" : "fixed-capacity memory") +
                 ", which kvrt does not offer yet)";
        return false;
    } else {
        *error = "unknown --strategy '" + strategy + "' (shift or reevaluate)";
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
    if (r.timestamps) {
        std::printf("  GPU time     per operation, from the stream's timestamps:\n");
        for (const auto& [label, op] : r.gpu)
            std::printf("    %-12s %7llu x %8.3f ms = %9.1f ms\n", label.c_str(), static_cast<unsigned long long>(op.count),
                        op.count ? op.ms / static_cast<double>(op.count) : 0.0, op.ms);
    } else {
        std::printf("  GPU time     not measured: the device's queue has no timestamps\n");
    }
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
    std::printf("\"gpu_timestamps\": %s, \"gpu_ms\": {", r.timestamps ? "true" : "false");
    const char* sep = "";
    for (const auto& [label, op] : r.gpu) {
        std::printf("%s\"%s\": {\"count\": %llu, \"total_ms\": %.4f}", sep, json_escape(label).c_str(),
                    static_cast<unsigned long long>(op.count), op.ms);
        sep = ", ";
    }
    std::printf("}, \"context_shifts\": %u, \"reevaluations\": %u, \"discarded_positions\": %llu, "
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
    if (args.has("json")) print_json(opt, r, passed);
    else print_text(opt, r);
    std::fflush(stdout);
    if (!r.checks_passed)
        std::fprintf(stderr, "error: kvrt's attention is further from the CPU reference than the limits allow\n");
    if (r.validation_errors)
        std::fprintf(stderr, "error: the Vulkan validation layer reported %llu errors\n",
                     static_cast<unsigned long long>(r.validation_errors));
    if (!args.has("json")) std::printf("\n%s\n", passed ? "PASS" : "FAIL");
    return passed ? 0 : 1;
}

}  // namespace cli
