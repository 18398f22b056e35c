// The fixed-capacity memory (kvrt_memory, SPEC.md section 6): device buffers,
// per-sequence state slots, and the recording of updates and reads.
//
// All or nothing. Every (sequence, layer) has two state slots and a flag
// "fresh" (the state is the initial one and lives in no slot). A call that
// updates a sequence never writes its current slot: the first chunk reads the
// current state and the last chunk writes the other slot; when a sequence
// needs several chunks in one call they alternate between that slot and a
// third, scratch slot (arranged so that the last one lands in the other slot).
// The metadata (current slot, fresh) changes when the work is recorded and is
// restored when the call fails, when its recording is dropped, or when its
// submission fails (a vk::Transaction's undo). Since no kernel ever writes a
// current slot, restoring the metadata restores the state exactly, even if
// the GPU work of a timed-out call completes later.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/result.hpp"
#include "kv/memory_layout.hpp"
#include "ops/memory_kernels.hpp"
#include "vk/buffer.hpp"
#include "vk/context.hpp"
#include "vk/stream.hpp"
#include "vk/transaction.hpp"

namespace kvrt::memory {

using kv::MemoryGeometry;
using kv::MemoryLayout;

enum class MemoryOp { Update, Read, UpdateRead };

enum class MemorySource { Zero, Host, Buffer, Seed };

// Initial MK or MV values (checked by the caller against the geometry).
struct MemoryInit {
    MemorySource source = MemorySource::Zero;
    bool f16 = false;
    const void* host = nullptr;
    vk::Buffer* buffer = nullptr;
    uint64_t offset = 0;
    uint64_t seed = 0;
};

// One per-token input or output of a batch: a buffer range or host memory.
struct MemoryData {
    const vk::Buffer* buffer = nullptr;
    const void* host = nullptr;  // inputs
    void* host_out = nullptr;    // outputs
    bool f16 = false;
    uint64_t offset = 0;         // bytes into `buffer`
    bool present() const { return buffer || host || host_out; }
};

struct MemoryBatch {
    uint32_t n_tokens = 0;
    const int32_t* seq_ids = nullptr;  // NULL: all in sequence 0
    int32_t layer = -1;                // -1: all layers
    MemoryData wq, wv, q, out;
    float scale = 0.0f;                // 0: 1/sqrt(key_dim)
};

class Memory {
public:
    struct Params {
        MemoryGeometry geo;
        MemoryInit keys, values;
        std::string label;
    };

    // The largest piece a memory uses on `ctx`.
    static uint64_t piece_cap(const vk::Context& ctx);

    // Allocates the buffers and uploads the initial values; nothing stays
    // allocated on failure.
    static Result create(vk::Context& ctx, const Params& params, std::unique_ptr<Memory>* out);

    Memory(const Memory&) = delete;
    Memory& operator=(const Memory&) = delete;
    // Drops the undos registered in streams (they would name a dead object);
    // device memory goes once submitted work completes.
    ~Memory();

    const MemoryLayout& layout() const { return layout_; }
    const MemoryGeometry& geometry() const { return layout_.geo; }
    vk::Context& context() const { return ctx_; }

    // Checks a batch against the geometry (ids, layer, presence, types, ranges).
    Result check_batch(MemoryOp op, const MemoryBatch& batch, bool sync) const;

    // Records (stream) or runs (stream == nullptr) an update and/or read.
    Result run(vk::Stream* stream, MemoryOp op, const MemoryBatch& batch);

    // Sequence operations; `seq` is checked by the caller (< 0: every sequence).
    Result seq_rm(vk::Stream* stream, int32_t seq);
    Result seq_cp(vk::Stream* stream, uint32_t src, uint32_t dst);

    // Downloads the state of (seq, layer) as f32 [n_heads][m][d].
    Result get_state(uint32_t seq, uint32_t layer, float* out);

private:
    // Where a chunk's source or destination state lives.
    enum class Where { Zero, Init, Slot, Temp, None };
    struct StateRef {
        Where where = Where::None;
        uint32_t slot = 0;
    };
    struct SeqLayer {
        uint8_t slot = 0;
        bool fresh = true;
    };
    // The tokens of one sequence in a batch, in batch order.
    struct SeqRun {
        uint32_t seq = 0;
        std::vector<uint32_t> rows;
    };
    using InputRef = ops::memory_kernels::Input;
    struct Chunk {
        uint32_t layer = 0, layer_rel = 0, seq = 0, tokens = 0, rows = 0;
        const uint32_t* batch_rows = nullptr;
        StateRef src, dst;
        InputRef wq, wv, q;
        vk::BufferUse idx;
        uint32_t idx_base = 0;
    };

    Memory(vk::Context& ctx, const MemoryLayout& layout, const std::string& label)
        : ctx_(ctx), layout_(layout), label_(label), sync_(ctx, label, vk::PrivateStream::AfterFailure::Replace) {}

    Result upload_init(const Params& params);
    SeqLayer& meta(uint32_t seq, uint32_t layer) {
        return meta_[static_cast<size_t>(seq) * layout_.geo.n_layers + layer];
    }

    // An undo that restores the metadata as it is now.
    void undo_to_now(vk::Transaction& tx) { tx.on_undo([this, saved = meta_]() { meta_ = saved; }); }

    Result record(vk::Stream& s, MemoryOp op, const MemoryBatch& b, const std::vector<SeqRun>& runs);
    Result prepare_input(vk::Stream& s, const MemoryData& data, uint32_t dim, const MemoryBatch& b, const Chunk& c,
                         InputRef* out);
    Result record_chunk(vk::Stream& s, MemoryOp op, const MemoryBatch& b, const Chunk& c);
    Result record_out(vk::Stream& s, const MemoryBatch& b, const Chunk& c);
    Result ensure_host_out(uint64_t layer_bytes, uint32_t n_layers);
    // The binding and offset (in 8-element units of the state precision) of a
    // state reference for group g.
    ops::memory_kernels::StateBinding bind_state(const StateRef& ref, uint32_t seq, uint32_t layer, uint32_t g,
                                                 bool write) const;
    vk::BufferUse whole(const vk::Buffer& b, size_t piece, bool write) const;

    vk::Context& ctx_;
    MemoryLayout layout_;
    ops::memory_kernels::Pipelines pipes_;
    std::unique_ptr<vk::Buffer> keys_, state_, init_, work_, stage_;
    std::unique_ptr<vk::Buffer> host_out_;  // reads for host memory, [layer][token][n_heads * d]
    uint64_t host_out_stride_ = 0;          // bytes between its layers
    std::vector<SeqLayer> meta_;  // [seq][layer]
    std::string label_;
    vk::PrivateStream sync_;      // for calls with a NULL stream
};

}  // namespace kvrt::memory
