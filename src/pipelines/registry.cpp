#include "pipelines/registry.hpp"

#include <cstring>

namespace kvrt::spirv {

const ShaderBlob* find_shader(const char* name) {
    // The table is sorted by name; it is small, so a binary search is plenty.
    size_t lo = 0, hi = kShaderCount;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        const int c = std::strcmp(kShaders[mid].name, name);
        if (c == 0) return &kShaders[mid];
        if (c < 0) lo = mid + 1; else hi = mid;
    }
    return nullptr;
}

}  // namespace kvrt::spirv
