// `kvrt estimate`: the memory a cache needs, before anything is allocated.
#include <cstdio>
#include <string>

#include "cli.hpp"

namespace cli {

namespace {

const char* kUsage =
    "usage: kvrt estimate --layers N --kv-heads N --head-dim N [--head-dim-v N] [--heads N]\n"
    "                     [--type f32|f16|q8_0|q4_0] [--type-v T] [--cells N] [--json]\n"
    "  Prints the bytes per token and the device memory of a cache with this geometry\n"
    "  (assuming a 128 MiB largest binding, the common mobile and lavapipe limit).\n";


std::string human(double bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.2f %s", bytes, units[u]);
    return buf;
}

}  // namespace

int cmd_estimate(int argc, char** argv) {
    Args args;
    std::string error;
    if (!args.parse(argc, argv, {"json", "help"}, &error)) {
        std::fprintf(stderr, "error: %s\n%s", error.c_str(), kUsage);
        return 2;
    }
    if (args.has("help")) {
        std::printf("%s", kUsage);
        return 0;
    }
    uint64_t layers = 0, kv_heads = 0, heads = 0, dk = 0, dv = 0, cells = 0;
    if (!args.u64("layers", 0, &layers, &error) || !args.u64("kv-heads", 0, &kv_heads, &error) ||
        !args.u64("heads", 0, &heads, &error) || !args.u64("head-dim", 0, &dk, &error) ||
        !args.u64("head-dim-v", 0, &dv, &error) || !args.u64("cells", 4096, &cells, &error)) {
        std::fprintf(stderr, "error: %s\n", error.c_str());
        return 2;
    }
    if (layers == 0 || kv_heads == 0 || dk == 0) {
        std::fprintf(stderr, "error: --layers, --kv-heads and --head-dim are required\n%s", kUsage);
        return 2;
    }
    if (layers > UINT32_MAX || kv_heads > UINT32_MAX || heads > UINT32_MAX || dk > UINT32_MAX || dv > UINT32_MAX ||
        cells > UINT32_MAX) {
        std::fprintf(stderr, "error: values must fit in 32 bits\n");
        return 2;
    }
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.n_layers = static_cast<uint32_t>(layers);
    d.n_kv_heads = static_cast<uint32_t>(kv_heads);
    d.n_heads = static_cast<uint32_t>(heads ? heads : kv_heads);
    d.head_dim_k = static_cast<uint32_t>(dk);
    d.head_dim_v = static_cast<uint32_t>(dv);
    d.capacity = static_cast<uint32_t>(cells);
    if (!type_option(args, "type", "f16", &d.type_k, nullptr)) return 2;
    d.type_v = d.type_k;
    if (args.has("type-v") && !type_option(args, "type-v", "f16", &d.type_v, nullptr)) return 2;

    kvrt_cache_estimate e = KVRT_CACHE_ESTIMATE_INIT;
    const kvrt_result r = kvrt_cache_estimate_size(nullptr, &d, &e);
    if (r != KVRT_SUCCESS) return report("estimating", r);
    if (args.has("json")) {
        std::printf(
            "{\"layout\": \"cells\", \"layers\": %u, \"kv_heads\": %u, \"head_dim_k\": %u, \"head_dim_v\": %u, "
            "\"type_k\": \"%s\", \"type_v\": \"%s\", \"cells\": %u, \"bytes_per_token\": %llu, \"data_bytes\": %llu, "
            "\"device_bytes\": %llu, \"max_binding_bytes\": %llu}\n",
            d.n_layers, d.n_kv_heads, d.head_dim_k, d.head_dim_v ? d.head_dim_v : d.head_dim_k,
            args.str("type", "f16").c_str(), args.str("type-v", args.str("type", "f16")).c_str(), d.capacity,
            static_cast<unsigned long long>(e.bytes_per_token), static_cast<unsigned long long>(e.data_bytes),
            static_cast<unsigned long long>(e.device_bytes), static_cast<unsigned long long>(e.max_binding_bytes));
        return 0;
    }
    std::printf("bytes per token   %llu (%s)\n", static_cast<unsigned long long>(e.bytes_per_token),
                human(static_cast<double>(e.bytes_per_token)).c_str());
    std::printf("K/V data          %llu (%s) for %u cells\n", static_cast<unsigned long long>(e.data_bytes),
                human(static_cast<double>(e.data_bytes)).c_str(), d.capacity);
    std::printf("device memory     %llu (%s), with alignment padding\n", static_cast<unsigned long long>(e.device_bytes),
                human(static_cast<double>(e.device_bytes)).c_str());
    return 0;
}

}  // namespace cli
