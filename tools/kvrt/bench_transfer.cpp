// `kvrt bench fill` and `kvrt bench copy`: the device's streaming bandwidth
// through kvrt's simplest kernels, the floor other kernels are compared with.
#include <string>

#include "bench.hpp"

namespace cli::bench {

namespace {

int run_transfer(Env& env, const Args& args, std::vector<Row>* rows, bool copy) {
    std::string error;
    uint64_t mib = 0;
    if (!args.u64("mib", 16, &mib, &error) || mib == 0 || mib > 4096) {
        std::fprintf(stderr, "error: %s\n", error.empty() ? "--mib must be 1..4096" : error.c_str());
        return 2;
    }
    const uint64_t bytes = mib << 20;
    kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
    bd.size = bytes;
    kvrt_buffer a = nullptr, b = nullptr;
    kvrt_result r = kvrt_buffer_create(env.ctx, &bd, &a);
    if (r == KVRT_SUCCESS && copy) r = kvrt_buffer_create(env.ctx, &bd, &b);
    TimedStream s(env.ctx);
    if (r == KVRT_SUCCESS) r = s.result();
    Row row;
    row.name = copy ? "copy" : "fill";
    row.params = {{"mib", std::to_string(mib)}};
    if (r == KVRT_SUCCESS)
        r = measure(env, s, [&] { return copy ? kvrt_cmd_copy(s, a, 0, b, 0, bytes) : kvrt_cmd_fill(s, a, 0, bytes, 1); },
                    nullptr, &row.m);
    kvrt_buffer_destroy(a);
    kvrt_buffer_destroy(b);
    if (r != KVRT_SUCCESS) return report(copy ? "bench copy" : "bench fill", r);
    row.bytes = static_cast<double>(copy ? 2 * bytes : bytes);
    rows->push_back(row);
    return 0;
}

const bool registered_fill = register_case(
    {"fill", "[--mib N]: write N MiB (default 16)",
     [](Env& env, const Args& args, std::vector<Row>* rows) { return run_transfer(env, args, rows, false); },
     {{"--mib", "16"}}});
const bool registered_copy = register_case(
    {"copy", "[--mib N]: copy N MiB between buffers (default 16)",
     [](Env& env, const Args& args, std::vector<Row>* rows) { return run_transfer(env, args, rows, true); },
     {{"--mib", "16"}}});

}  // namespace

}  // namespace cli::bench
