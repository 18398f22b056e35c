// `kvrt info`: the Vulkan devices kvrt can use and what they support.
#include <cstdio>
#include <string>
#include <vector>

#include "cli.hpp"

namespace cli {

namespace {

const char* type_name(kvrt_device_type t) {
    switch (t) {
        case KVRT_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
        case KVRT_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
        case KVRT_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
        case KVRT_DEVICE_TYPE_CPU: return "CPU";
        default: return "other";
    }
}

template <size_t N>
std::string bit_names(kvrt_flags f, const std::pair<kvrt_flags, const char*> (&names)[N]) {
    std::string out;
    for (const auto& [bit, name] : names) {
        if (!(f & bit)) continue;
        if (!out.empty()) out += " ";
        out += name;
    }
    return out.empty() ? "none" : out;
}

std::string feature_list(kvrt_flags f) {
    static const std::pair<kvrt_flags, const char*> names[] = {
        {KVRT_DEVICE_FEATURE_SHADER_FLOAT16, "float16"}, {KVRT_DEVICE_FEATURE_SHADER_INT8, "int8"},
        {KVRT_DEVICE_FEATURE_SHADER_INT16, "int16"},     {KVRT_DEVICE_FEATURE_SHADER_INT64, "int64"},
        {KVRT_DEVICE_FEATURE_STORAGE_16BIT, "storage16"}, {KVRT_DEVICE_FEATURE_STORAGE_8BIT, "storage8"},
        {KVRT_DEVICE_FEATURE_TIMESTAMPS, "timestamps"},   {KVRT_DEVICE_FEATURE_UNIFIED_MEMORY, "unified-memory"},
    };
    return bit_names(f, names);
}

std::string subgroup_list(kvrt_flags f) {
    static const std::pair<kvrt_flags, const char*> names[] = {
        {KVRT_SUBGROUP_OP_BASIC, "basic"},     {KVRT_SUBGROUP_OP_VOTE, "vote"},
        {KVRT_SUBGROUP_OP_ARITHMETIC, "arithmetic"}, {KVRT_SUBGROUP_OP_BALLOT, "ballot"},
        {KVRT_SUBGROUP_OP_SHUFFLE, "shuffle"}, {KVRT_SUBGROUP_OP_SHUFFLE_RELATIVE, "shuffle-relative"},
        {KVRT_SUBGROUP_OP_CLUSTERED, "clustered"}, {KVRT_SUBGROUP_OP_QUAD, "quad"},
    };
    return bit_names(f, names);
}

std::string version(uint32_t v) {
    return std::to_string(v >> 22) + "." + std::to_string((v >> 12) & 0x3ff) + "." + std::to_string(v & 0xfff);
}

}  // namespace

int cmd_info(int argc, char** argv) {
    Args args;
    std::string error;
    if (!args.parse(argc, argv, {"json", "tuning", "help"}, &error)) {
        std::fprintf(stderr, "error: %s\n", error.c_str());
        return 2;
    }
    if (args.has("help")) {
        std::printf(
            "usage: kvrt info [--json] [--tuning]\n"
            "  Lists the Vulkan devices and the features kvrt uses. --tuning also creates a\n"
            "  context (on KVRT_DEVICE's device, or the one kvrt picks) and prints what kvrt\n"
            "  chose for it: kernel variants, workgroups, lane groups, tiles, splits.\n"
            "  KVRT_DEVICE_PROFILE=<name> shows a device as the named real GPU's limits and\n"
            "  features make it (docs/device-profiles.md).\n");
        return 0;
    }
    std::string tuning;
    if (args.has("tuning")) {
        kvrt_context ctx = nullptr;
        kvrt_result r = kvrt_context_create(nullptr, &ctx);
        if (r != KVRT_SUCCESS) return report("creating a context", r);
        uint64_t size = 0;
        r = kvrt_context_get_tuning(ctx, nullptr, &size);
        if (r == KVRT_SUCCESS) {
            tuning.resize(size);
            r = kvrt_context_get_tuning(ctx, tuning.data(), &size);
            tuning.resize(size - 1);
        }
        kvrt_context_destroy(ctx);
        if (r != KVRT_SUCCESS) return report("reading the context's tuning", r);
    }
    uint32_t n = 0;
    kvrt_result r = kvrt_enumerate_devices(nullptr, &n);
    if (r != KVRT_SUCCESS) return report("listing devices", r);
    std::vector<kvrt_device_info> devs(n, kvrt_device_info KVRT_DEVICE_INFO_INIT);
    r = kvrt_enumerate_devices(devs.data(), &n);
    if (r != KVRT_SUCCESS) return report("listing devices", r);

    const bool json = args.has("json");
    if (json) std::printf("{\"kvrt_version\": \"%s\", \"devices\": [", kvrt_version_string());
    else std::printf("kvrt %s: %u Vulkan device%s\n", kvrt_version_string(), n, n == 1 ? "" : "s");
    for (uint32_t i = 0; i < n; ++i) {
        const kvrt_device_info& d = devs[i];
        if (json) {
            std::printf(
                "%s\n  {\"index\": %u, \"name\": \"%s\", \"type\": \"%s\", \"driver\": \"%s\", \"driver_info\": \"%s\", "
                "\"api_version\": \"%s\", \"features\": \"%s\", \"subgroup_size\": %u, \"subgroup_ops\": \"%s\", "
                "\"max_storage_buffer_range\": %llu, \"max_memory_allocation_size\": %llu, "
                "\"max_shared_memory_bytes\": %u, \"max_workgroup_invocations\": %u, \"max_push_constants_bytes\": %u, "
                "\"device_local_bytes\": %llu, \"timestamp_period_ns\": %g}",
                i ? "," : "", d.index, json_escape(d.name).c_str(), type_name(d.device_type),
                json_escape(d.driver_name).c_str(), json_escape(d.driver_info).c_str(), version(d.api_version).c_str(),
                feature_list(d.features).c_str(), d.subgroup_size, subgroup_list(d.subgroup_ops).c_str(),
                static_cast<unsigned long long>(d.max_storage_buffer_range),
                static_cast<unsigned long long>(d.max_memory_allocation_size), d.max_shared_memory_bytes,
                d.max_workgroup_invocations, d.max_push_constants_bytes,
                static_cast<unsigned long long>(d.device_local_bytes), static_cast<double>(d.timestamp_period_ns));
            continue;
        }
        std::printf("\n[%u] %s (%s)\n", d.index, d.name, type_name(d.device_type));
        std::printf("    driver            %s %s, Vulkan %s\n", d.driver_name, d.driver_info, version(d.api_version).c_str());
        std::printf("    features          %s\n", feature_list(d.features).c_str());
        std::printf("    subgroups         size %u: %s\n", d.subgroup_size, subgroup_list(d.subgroup_ops).c_str());
        std::printf("    storage binding   %.1f MiB max (maxStorageBufferRange)\n",
                    static_cast<double>(d.max_storage_buffer_range) / (1 << 20));
        std::printf("    allocation        %.1f MiB max\n", static_cast<double>(d.max_memory_allocation_size) / (1 << 20));
        std::printf("    device memory     %.2f GiB\n", static_cast<double>(d.device_local_bytes) / (1 << 30));
        std::printf("    shared memory     %u KiB per workgroup, %u invocations max\n", d.max_shared_memory_bytes / 1024,
                    d.max_workgroup_invocations);
        std::printf("    push constants    %u bytes\n", d.max_push_constants_bytes);
        std::printf("    timestamp period  %g ns\n", static_cast<double>(d.timestamp_period_ns));
    }
    if (json) std::printf("\n]");
    if (args.has("tuning")) {
        // "name value" lines: a JSON object of strings, or an indented block.
        std::printf(json ? ", \"tuning\": {" : "\ntuning\n");
        size_t at = 0;
        bool first = true;
        while (at < tuning.size()) {
            size_t end = tuning.find('\n', at);
            if (end == std::string::npos) end = tuning.size();
            const std::string row = tuning.substr(at, end - at);
            at = end + 1;
            const size_t space = row.find(' ');
            const std::string name = row.substr(0, space), value = space == std::string::npos ? "" : row.substr(space + 1);
            if (json)
                std::printf("%s\n  \"%s\": \"%s\"", first ? "" : ",", json_escape(name).c_str(),
                            json_escape(value).c_str());
            else
                std::printf("    %-30s %s\n", name.c_str(), value.c_str());
            first = false;
        }
        if (json) std::printf("\n}");
    }
    if (json) std::printf("}\n");
    return 0;
}

}  // namespace cli
