// The cache's small shared types, and the declarations its parts (the front,
// the layouts, the window group) name one another by.
#pragma once

#include <cstdint>

namespace kvrt::cache {

class Cache;
class Layout;
class WindowGroup;

// Rows of a caller's tensor (cache.hpp).
template <class Host>
struct TensorRows;
using Source = TensorRows<const uint8_t>;
using Output = TensorRows<void>;

// A token tree of a batch (kvrt_batch_tree, its rules checked by the caller
// with kv::check_tree): each token's parent and cell.
struct Tree {
    const int32_t* parents = nullptr;
    const uint32_t* cells = nullptr;
};

}  // namespace kvrt::cache
