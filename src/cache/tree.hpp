// A token tree of a batch as the cache takes it.
#pragma once

#include <cstdint>

namespace kvrt::cache {

// A token tree of a batch (kvrt_batch_tree, its rules checked by the caller
// with kv::check_tree): each token's parent and cell.
struct Tree {
    const int32_t* parents = nullptr;
    const uint32_t* cells = nullptr;
};

}  // namespace kvrt::cache
