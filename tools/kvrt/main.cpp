// kvrt: the command-line program of the kvrt KV-cache runtime.
#include <cstdio>
#include <cstring>

#include "bench.hpp"
#include "cli.hpp"

namespace {

void usage(FILE* out) {
    std::fprintf(out,
                 "usage: kvrt <command> [options]\n"
                 "\n"
                 "commands:\n"
                 "  info       list the Vulkan devices and their features\n"
                 "  bench      run a benchmark case (kvrt bench --help)\n"
                 "  estimate   memory of a cache for a model geometry\n"
                 "  version    print the library version\n"
                 "\n"
                 "Run 'kvrt <command> --help' for a command's options. KVRT_DEVICE=<index|name>\n"
                 "picks the device; KVRT_VALIDATION=1 turns on the Vulkan validation layer.\n");
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char* cmd = argv[1];
    if (!std::strcmp(cmd, "info")) return cli::cmd_info(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "bench")) return cli::bench::cmd_bench(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "estimate")) return cli::cmd_estimate(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "version")) {
        std::printf("kvrt %s\n", kvrt_version_string());
        return 0;
    }
    if (!std::strcmp(cmd, "help") || !std::strcmp(cmd, "--help") || !std::strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    std::fprintf(stderr, "error: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
