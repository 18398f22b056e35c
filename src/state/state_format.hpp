// The cache state format (docs/state-format.md): what a saved cache or
// sequence looks like as bytes, written and parsed without a device.
//
// A state is a fixed header, the static scales (only for static-scale types),
// the cell records, the window group's records (version 3, a cache whose
// windowed layers keep a group of their own), every layer's K and V rows in
// their stored type, and an XXH3-64 checksum of everything before it. parse() checks every length
// against the bytes that remain before it allocates anything, then every
// field, then the checksum, and turns a valid state into a Plan: what to
// place and where its rows are. Applying a plan to a cache is the cache's
// part (cache/state.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/result.hpp"
#include "kv/geometry.hpp"
#include "kvrt/kvrt.h"

namespace kvrt::state {

// "KVRTSTAT" at offset 0.
constexpr uint8_t kMagic[8] = {'K', 'V', 'R', 'T', 'S', 'T', 'A', 'T'};
// The newest version this library writes; it reads every version from 1 to
// this. A state is written in the oldest version that can hold it
// (version_for): 1, 2 for a state of the paged layout (layout 3), 3 for one
// with a window group.
constexpr uint32_t kVersion = 3;
constexpr uint32_t kHeaderBytes = 64;
constexpr uint32_t kChecksumBytes = 8;
// Header flags.
constexpr uint32_t kFlagSequence = 0x1;       // one sequence's state (else the whole cache)
constexpr uint32_t kFlagDeferredRope = 0x2;   // K stored before rotation
constexpr uint32_t kFlagWindowGroup = 0x4;    // version 3: windowed layers keep a group of their own
constexpr uint32_t kKnownFlags = kFlagSequence | kFlagDeferredRope | kFlagWindowGroup;

struct Header {
    // As read by parse(); 0 in a description to write. write_prefix writes
    // the larger of this and version_for(), so a parsed state is written
    // back byte for byte and a new one in the oldest version that holds it.
    uint32_t version = 0;
    uint32_t flags = 0;
    uint32_t n_layers = 0;
    uint32_t n_kv_heads = 0;
    uint32_t head_dim_k = 0;
    uint32_t head_dim_v = 0;
    kvrt_type type_k = KVRT_TYPE_F16;
    kvrt_type type_v = KVRT_TYPE_F16;
    uint32_t layout = KVRT_LAYOUT_CELLS;  // the saving cache's layout
    uint32_t capacity = 0;                // the saving cache's cells
    uint32_t max_seqs = 0;                // the saving cache's sequence ids are below this
    uint32_t n_cells = 0;                 // cell records in the state
    int32_t seq = -1;                     // the saved sequence, or -1 for the whole cache
};

// The oldest format version that holds a state of this header: 1; 2 when
// the saving cache's layout is the paged one (a value version 1 lacks); 3
// with a window group.
uint32_t version_for(const Header& h);

// One saved cell: its index in the saving cache, its position, and its
// sequences: seq_ids[seq_begin, seq_begin + n_seq) of the description.
struct CellRecord {
    uint32_t cell = 0;
    int32_t pos = 0;
    uint32_t seq_begin = 0;
    uint32_t n_seq = 0;
};

// One cell whose rows the window group holds: the index of its cell record,
// and the sequences the group holds it for (a non-empty subset of the
// record's): group_seq_ids[seq_begin, seq_begin + n_seq).
struct GroupRecord {
    uint32_t record = 0;
    uint32_t seq_begin = 0;
    uint32_t n_seq = 0;
};

// Everything of a state but its rows.
struct Description {
    Header header;
    std::vector<kv::StaticScale> k_scales;  // n_layers when type_k is static-scale, else empty
    std::vector<kv::StaticScale> v_scales;
    std::vector<CellRecord> cells;           // ascending cell indices
    std::vector<int32_t> seq_ids;            // ascending within each cell
    // With kFlagWindowGroup: which layers are windowed (n_layers entries, 0
    // or 1, at least one 1), and the group's records (ascending records).
    // A windowed layer's rows are those of the group records, in order.
    std::vector<uint8_t> windowed;
    std::vector<GroupRecord> group;
    std::vector<int32_t> group_seq_ids;      // ascending within each record
};

// Bytes of one cell's K (or V) rows of one layer, all KV heads: n_kv_heads *
// head_dim / block size * block bytes. False when the type is unknown or the
// product overflows.
bool row_bytes(kvrt_type type, uint32_t n_kv_heads, uint32_t head_dim, uint64_t* out);

// Where the parts of a state lie, computed from a description (its header
// and the total of its sequence ids).
struct Extents {
    uint64_t k_row_bytes = 0, v_row_bytes = 0;
    uint64_t scales_offset = 0;  // = kHeaderBytes
    uint64_t cells_offset = 0;
    uint64_t data_offset = 0;
    uint64_t layer_bytes = 0;    // n_cells * (k_row_bytes + v_row_bytes)
    uint64_t checksum_offset = 0;
    uint64_t total = 0;
    // With a window group: where each layer's rows begin, and how many
    // rows each layer has (n_cells, or the group's records for a windowed
    // layer). Empty otherwise: every layer has n_cells rows, layer_bytes apart.
    std::vector<uint64_t> layer_offsets;
    std::vector<uint32_t> layer_rows;
    // Rows of `layer`: K rows in record order (group record order for a
    // windowed layer), then V rows.
    uint64_t k_offset(uint32_t layer) const {
        return layer_offsets.empty() ? data_offset + layer * layer_bytes : layer_offsets[layer];
    }
    uint64_t v_offset(uint32_t layer, uint32_t n_cells) const {
        return k_offset(layer) + uint64_t{layer_rows.empty() ? n_cells : layer_rows[layer]} * k_row_bytes;
    }
    // Rows of `layer` (n_cells without a window group).
    uint32_t rows(uint32_t layer, uint32_t n_cells) const { return layer_rows.empty() ? n_cells : layer_rows[layer]; }
};

// The extents of `d`; KVRT_ERROR_CORRUPT_STATE when a size overflows 64
// bits or a type is unknown.
Result extents_of(const Description& d, Extents* out);

// Writes the header, scales and cell records of `d` into `out` (at least
// extents.data_offset bytes). The rows follow at e.data_offset; then
// seal() adds the checksum.
void write_prefix(const Description& d, const Extents& e, uint8_t* out);

// Writes the checksum of out[0, size - 8) into the last 8 bytes.
void seal(uint8_t* out, uint64_t size);

// XXH3-64 of `n` bytes (seed 0).
uint64_t checksum(const void* data, size_t n);

// A parsed, validated state: its description and its rows, in place in the
// caller's bytes (which must outlive the plan).
struct Plan {
    Description desc;
    Extents extents;
    const uint8_t* bytes = nullptr;
    const uint8_t* k_rows(uint32_t layer) const { return bytes + extents.k_offset(layer); }
    const uint8_t* v_rows(uint32_t layer) const {
        return bytes + extents.v_offset(layer, desc.header.n_cells);
    }
};

struct ParseOptions {
    // Off only where a caller fixed up the checksum of mutated bytes itself
    // (the fuzzer, to reach the checks behind it).
    bool verify_checksum = true;
};

// Parses and validates `size` bytes. Fails with KVRT_ERROR_CORRUPT_STATE
// (the message names the field and offset) for anything malformed: a
// truncated or overlong state, a bad magic, unknown flags, zero or
// inconsistent geometry, unknown types, head dims that do not fit the
// types, bad static scales, cells out of range or not ascending, negative
// positions, sequence ids out of range, not ascending or absent, a
// (sequence, position) pair given twice, a sequence state whose cells hold
// another sequence, or a checksum mismatch; KVRT_ERROR_UNSUPPORTED for a
// version newer than this library reads; KVRT_ERROR_INVALID_ARGUMENT for a
// NULL `data` with size > 0 or NULL `out`; KVRT_ERROR_OUT_OF_HOST_MEMORY.
// Nothing is allocated before the bytes that justify it were checked to be
// there.
Result parse(const void* data, uint64_t size, Plan* out, const ParseOptions& options = {});

}  // namespace kvrt::state
