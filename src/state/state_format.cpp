// The state format's writer and its strict parser (state_format.hpp).
#include "state/state_format.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

#include "core/checked.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvrt::state {

namespace {

// Little-endian fields, whatever the host's byte order.
void put_u32(uint8_t* p, uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
    for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
    return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
uint64_t get_u64(const uint8_t* p) { return uint64_t{get_u32(p)} | uint64_t{get_u32(p + 4)} << 32; }
uint32_t float_bits(float f) {
    uint32_t u = 0;
    std::memcpy(&u, &f, 4);
    return u;
}
float bits_float(uint32_t u) {
    float f = 0;
    std::memcpy(&f, &u, 4);
    return f;
}

constexpr uint64_t kCellRecordBytes = 12;  // cell, pos, n_seq; then n_seq ids
constexpr uint64_t kScaleBytes = 8;        // scale (f32), zero point (i32)
constexpr uint64_t kGroupRecordBytes = 8;  // record, n_seq; then n_seq ids

// The window section's fixed part: the windowed-layer mask (one u32 per 32
// layers) and the group record count.
uint64_t window_fixed_bytes(uint32_t n_layers) { return (uint64_t{n_layers} + 31) / 32 * 4 + 4; }

// Reads a state front to back; every read first checks that the bytes are
// there (before the checksum), so a read never passes the end.
class Reader {
public:
    Reader(const uint8_t* p, uint64_t end) : p_(p), end_(end) {}
    uint64_t at() const { return at_; }
    uint64_t left() const { return end_ - at_; }
    bool has(uint64_t n) const { return n <= left(); }
    uint32_t u32() {
        const uint32_t v = get_u32(p_ + at_);
        at_ += 4;
        return v;
    }

private:
    const uint8_t* p_;
    uint64_t end_;
    uint64_t at_ = 0;
};

Result corrupt(const char* fmt, unsigned long long offset, const char* detail) {
    return fail(KVRT_ERROR_CORRUPT_STATE, fmt, offset, detail);
}

Result check_scale(const char* what, uint32_t layer, const kv::StaticScale& s, kvrt_type type, uint64_t offset) {
    const int32_t qmax = type == KVRT_TYPE_U8_STATIC ? 255 : 65535;
    if (!std::isfinite(s.scale) || !(s.scale >= 1.17549435e-38f))
        return fail(KVRT_ERROR_CORRUPT_STATE, "state offset %llu: %s scale of layer %u is not finite, normal and > 0",
                    static_cast<unsigned long long>(offset), what, layer);
    if (s.zero_point < 0 || s.zero_point > qmax)
        return fail(KVRT_ERROR_CORRUPT_STATE, "state offset %llu: %s zero point %d of layer %u is outside 0..%d",
                    static_cast<unsigned long long>(offset + 4), what, s.zero_point, layer, qmax);
    return KVRT_SUCCESS;
}

Result read_scales(Reader& r, const uint8_t* base, const char* what, kvrt_type type, uint32_t n_layers,
                   std::vector<kv::StaticScale>* out) {
    if (!kv::is_static_scale(type)) return KVRT_SUCCESS;
    uint64_t need = 0;
    if (!checked_mul(n_layers, kScaleBytes, &need) || !r.has(need))
        return fail(KVRT_ERROR_CORRUPT_STATE,
                    "state offset %llu: truncated: %u layers of %s scales need %llu bytes, %llu remain",
                    static_cast<unsigned long long>(r.at()), n_layers, what, static_cast<unsigned long long>(need),
                    static_cast<unsigned long long>(r.left()));
    out->resize(n_layers);
    for (uint32_t l = 0; l < n_layers; ++l) {
        const uint64_t at = r.at();
        kv::StaticScale s;
        s.scale = bits_float(r.u32());
        s.zero_point = static_cast<int32_t>(r.u32());
        KVRT_TRY(check_scale(what, l, s, type, at));
        s.inv = 1.0f / s.scale;
        (*out)[l] = s;
    }
    (void)base;
    return KVRT_SUCCESS;
}

// The window group's section (version 3): the windowed-layer mask, then the
// group records, each a subset of its cell record's sequences.
Result read_window_group(Reader& r, Description* d) {
    const Header& h = d->header;
    if (!r.has(window_fixed_bytes(h.n_layers)))
        return corrupt("state offset %llu: truncated %s", r.at(), "window group section");
    d->windowed.assign(h.n_layers, 0);
    uint32_t n_windowed = 0;
    for (uint32_t w = 0; w < (h.n_layers + 31) / 32; ++w) {
        const uint64_t at = r.at();
        const uint32_t mask = r.u32();
        for (uint32_t bit = 0; bit < 32; ++bit) {
            if (!(mask >> bit & 1u)) continue;
            const uint64_t l = uint64_t{w} * 32 + bit;
            if (l >= h.n_layers)
                return fail(KVRT_ERROR_CORRUPT_STATE, "state offset %llu: windowed layer %llu of %u layers",
                            static_cast<unsigned long long>(at), static_cast<unsigned long long>(l), h.n_layers);
            d->windowed[static_cast<size_t>(l)] = 1;
            ++n_windowed;
        }
    }
    if (!n_windowed) return corrupt("state offset %llu: %s", r.at() - 4, "a window group without windowed layers");
    const uint64_t count_at = r.at();
    const uint32_t n_group = r.u32();
    uint64_t fixed = 0;
    if (n_group > h.n_cells || !checked_mul(n_group, kGroupRecordBytes, &fixed) || !r.has(fixed))
        return fail(KVRT_ERROR_CORRUPT_STATE,
                    "state offset %llu: %u group records for %u cells (or truncated: %llu bytes remain)",
                    static_cast<unsigned long long>(count_at), n_group, h.n_cells,
                    static_cast<unsigned long long>(r.left()));
    d->group.resize(n_group);
    for (uint32_t i = 0; i < n_group; ++i) {
        const uint64_t at = r.at();
        if (!r.has(kGroupRecordBytes)) return corrupt("state offset %llu: truncated %s", at, "group record");
        GroupRecord g;
        g.record = r.u32();
        g.n_seq = r.u32();
        g.seq_begin = static_cast<uint32_t>(d->group_seq_ids.size());
        if (g.record >= h.n_cells || (i && g.record <= d->group[i - 1].record))
            return fail(KVRT_ERROR_CORRUPT_STATE, "state offset %llu: group record %u is out of range or does not ascend",
                        static_cast<unsigned long long>(at), g.record);
        const CellRecord& c = d->cells[g.record];
        if (g.n_seq == 0 || g.n_seq > c.n_seq)
            return fail(KVRT_ERROR_CORRUPT_STATE, "state offset %llu: group record %u lists %u sequences (its cell %u)",
                        static_cast<unsigned long long>(at + 4), g.record, g.n_seq, c.n_seq);
        if (!r.has(uint64_t{g.n_seq} * 4)) return corrupt("state offset %llu: truncated %s", r.at(), "sequence ids");
        for (uint32_t j = 0; j < g.n_seq; ++j) {
            const uint64_t id_at = r.at();
            const int32_t s = static_cast<int32_t>(r.u32());
            const int32_t* first = d->seq_ids.data() + c.seq_begin;
            if ((j && s <= d->group_seq_ids.back()) || !std::binary_search(first, first + c.n_seq, s))
                return fail(KVRT_ERROR_CORRUPT_STATE,
                            "state offset %llu: sequence %d of group record %u is out of order or not its cell's",
                            static_cast<unsigned long long>(id_at), s, g.record);
            d->group_seq_ids.push_back(s);
        }
        d->group[i] = g;
    }
    return KVRT_SUCCESS;
}

Result parse_body(const uint8_t* b, uint64_t size, Plan* out, const ParseOptions& options) {
    Reader r(b, size - kChecksumBytes);
    Header h;
    // The header (64 bytes, checked present by the caller).
    (void)r.u32(), (void)r.u32();  // magic
    h.version = r.u32();
    const uint32_t header_bytes = r.u32();
    if (header_bytes != kHeaderBytes)
        return fail(KVRT_ERROR_CORRUPT_STATE, "state offset 12: header size %u is not %u", header_bytes, kHeaderBytes);
    h.flags = r.u32();
    h.n_layers = r.u32();
    h.n_kv_heads = r.u32();
    h.head_dim_k = r.u32();
    h.head_dim_v = r.u32();
    const uint32_t raw_k = r.u32(), raw_v = r.u32();
    h.layout = r.u32();
    h.capacity = r.u32();
    h.max_seqs = r.u32();
    h.n_cells = r.u32();
    h.seq = static_cast<int32_t>(r.u32());
    if (h.flags & ~kKnownFlags)
        return fail(KVRT_ERROR_CORRUPT_STATE, "state offset 16: unknown flags 0x%x", h.flags & ~kKnownFlags);
    if ((h.flags & kFlagWindowGroup) && h.version < 3)
        return fail(KVRT_ERROR_CORRUPT_STATE, "state offset 16: a window group needs format version 3, not %u",
                    h.version);
    if (!h.n_layers || !h.n_kv_heads || !h.head_dim_k || !h.head_dim_v)
        return fail(KVRT_ERROR_CORRUPT_STATE,
                    "state offset 20: zero geometry (layers %u, KV heads %u, head dims %u, %u)", h.n_layers,
                    h.n_kv_heads, h.head_dim_k, h.head_dim_v);
    const kv::TypeInfo* tk = kv::type_info_raw(static_cast<int32_t>(raw_k));
    const kv::TypeInfo* tv = kv::type_info_raw(static_cast<int32_t>(raw_v));
    if (!tk) return fail(KVRT_ERROR_CORRUPT_STATE, "state offset 36: unknown K type %u", raw_k);
    if (!tv) return fail(KVRT_ERROR_CORRUPT_STATE, "state offset 40: unknown V type %u", raw_v);
    h.type_k = tk->type;
    h.type_v = tv->type;
    if (h.head_dim_k % tk->block_elems || h.head_dim_v % tv->block_elems)
        return fail(KVRT_ERROR_CORRUPT_STATE, "state offset 28: head dims %u, %u are not multiples of the types' blocks",
                    h.head_dim_k, h.head_dim_v);
    // Version 2 adds the paged layout; nothing else differs.
    if (h.layout != KVRT_LAYOUT_CELLS && h.layout != KVRT_LAYOUT_STATIC &&
        !(h.layout == KVRT_LAYOUT_PAGED && h.version >= 2))
        return fail(KVRT_ERROR_CORRUPT_STATE, "state offset 44: unknown layout %u (format version %u)", h.layout,
                    h.version);
    if (!h.capacity) return fail(KVRT_ERROR_CORRUPT_STATE, "state offset 48: capacity 0");
    if (!h.max_seqs || h.max_seqs > INT32_MAX)
        return fail(KVRT_ERROR_CORRUPT_STATE, "state offset 52: max_seqs %u is outside 1..%d", h.max_seqs, INT32_MAX);
    if (h.n_cells > h.capacity)
        return fail(KVRT_ERROR_CORRUPT_STATE, "state offset 56: %u cells exceed the capacity %u", h.n_cells,
                    h.capacity);
    const bool one_seq = h.flags & kFlagSequence;
    if (one_seq ? (h.seq < 0 || static_cast<uint32_t>(h.seq) >= h.max_seqs) : h.seq != -1)
        return fail(KVRT_ERROR_CORRUPT_STATE, "state offset 60: sequence %d does not fit a %s state (max_seqs %u)",
                    h.seq, one_seq ? "sequence" : "whole-cache", h.max_seqs);

    Description& d = out->desc;
    d = Description{};
    d.header = h;
    KVRT_TRY(read_scales(r, b, "K", h.type_k, h.n_layers, &d.k_scales));
    KVRT_TRY(read_scales(r, b, "V", h.type_v, h.n_layers, &d.v_scales));

    // Cell records: the fixed part of every record must be there before the
    // list is allocated; ids are read only once their bytes are known to be.
    uint64_t fixed = 0;
    if (!checked_mul(h.n_cells, kCellRecordBytes, &fixed) || !r.has(fixed))
        return fail(KVRT_ERROR_CORRUPT_STATE, "state offset %llu: truncated: %u cell records need %llu bytes, %llu remain",
                    static_cast<unsigned long long>(r.at()), h.n_cells, static_cast<unsigned long long>(fixed),
                    static_cast<unsigned long long>(r.left()));
    d.cells.resize(h.n_cells);
    for (uint32_t i = 0; i < h.n_cells; ++i) {
        const uint64_t at = r.at();
        if (!r.has(kCellRecordBytes))
            return corrupt("state offset %llu: truncated %s", at, "cell record");
        CellRecord c;
        c.cell = r.u32();
        c.pos = static_cast<int32_t>(r.u32());
        c.n_seq = r.u32();
        c.seq_begin = static_cast<uint32_t>(d.seq_ids.size());
        if (c.cell >= h.capacity)
            return fail(KVRT_ERROR_CORRUPT_STATE, "state offset %llu: cell %u is outside the capacity %u",
                        static_cast<unsigned long long>(at), c.cell, h.capacity);
        if (i && c.cell <= d.cells[i - 1].cell)
            return fail(KVRT_ERROR_CORRUPT_STATE, "state offset %llu: cell %u does not ascend (after %u)",
                        static_cast<unsigned long long>(at), c.cell, d.cells[i - 1].cell);
        if (c.pos < 0)
            return fail(KVRT_ERROR_CORRUPT_STATE, "state offset %llu: cell %u has negative position %d",
                        static_cast<unsigned long long>(at + 4), c.cell, c.pos);
        if (c.n_seq == 0 || c.n_seq > h.max_seqs || (one_seq && c.n_seq != 1))
            return fail(KVRT_ERROR_CORRUPT_STATE, "state offset %llu: cell %u lists %u sequences",
                        static_cast<unsigned long long>(at + 8), c.cell, c.n_seq);
        if (!r.has(uint64_t{c.n_seq} * 4))
            return corrupt("state offset %llu: truncated %s", r.at(), "sequence ids");
        for (uint32_t j = 0; j < c.n_seq; ++j) {
            const uint64_t id_at = r.at();
            const int32_t s = static_cast<int32_t>(r.u32());
            if (s < 0 || static_cast<uint32_t>(s) >= h.max_seqs || (j && s <= d.seq_ids.back()) ||
                (one_seq && s != h.seq))
                return fail(KVRT_ERROR_CORRUPT_STATE,
                            "state offset %llu: sequence %d of cell %u is out of range, repeated, out of order or "
                            "not the saved sequence",
                            static_cast<unsigned long long>(id_at), s, c.cell);
            d.seq_ids.push_back(s);
        }
        d.cells[i] = c;
    }
    if (h.flags & kFlagWindowGroup) KVRT_TRY(read_window_group(r, &d));

    // The rows: exactly what the geometry says, then the checksum.
    Extents& e = out->extents;
    KVRT_TRY(extents_of(d, &e));
    if (e.data_offset != r.at())
        return fail(KVRT_ERROR_INTERNAL, "state parser: data offset %llu, expected %llu",
                    static_cast<unsigned long long>(r.at()), static_cast<unsigned long long>(e.data_offset));
    if (e.total != size)
        return fail(KVRT_ERROR_CORRUPT_STATE, "state offset %llu: %s: the rows and checksum need %llu bytes, %llu remain",
                    static_cast<unsigned long long>(r.at()), e.total > size ? "truncated" : "trailing bytes",
                    static_cast<unsigned long long>(e.total - e.data_offset),
                    static_cast<unsigned long long>(size - e.data_offset));

    if (options.verify_checksum) {
        const uint64_t stored = get_u64(b + size - kChecksumBytes);
        const uint64_t actual = checksum(b, static_cast<size_t>(size - kChecksumBytes));
        if (stored != actual)
            return fail(KVRT_ERROR_CORRUPT_STATE,
                        "state offset %llu: checksum mismatch (stored %016llx, computed %016llx)",
                        static_cast<unsigned long long>(size - kChecksumBytes), static_cast<unsigned long long>(stored),
                        static_cast<unsigned long long>(actual));
    }
    out->bytes = b;
    return KVRT_SUCCESS;
}

}  // namespace

uint64_t checksum(const void* data, size_t n) { return XXH3_64bits(data, n); }

bool row_bytes(kvrt_type type, uint32_t n_kv_heads, uint32_t head_dim, uint64_t* out) {
    kv::TypeSize ts{};
    if (!kv::type_size(type, &ts) || ts.block_elems == 0 || head_dim % ts.block_elems) return false;
    return checked_mul(uint64_t{n_kv_heads} * (head_dim / ts.block_elems), ts.block_bytes, out);
}

Result extents_of(const Description& d, Extents* out) {
    const Header& h = d.header;
    Extents e;
    if (!row_bytes(h.type_k, h.n_kv_heads, h.head_dim_k, &e.k_row_bytes) ||
        !row_bytes(h.type_v, h.n_kv_heads, h.head_dim_v, &e.v_row_bytes))
        return fail(KVRT_ERROR_CORRUPT_STATE, "state: its row sizes overflow 64 bits");
    e.scales_offset = kHeaderBytes;
    const uint64_t scales = (d.k_scales.size() + d.v_scales.size()) * kScaleBytes;
    uint64_t cells = uint64_t{h.n_cells} * kCellRecordBytes + uint64_t{d.seq_ids.size()} * 4;
    const bool group = h.flags & kFlagWindowGroup;
    if (group)
        cells += window_fixed_bytes(h.n_layers) + uint64_t{d.group.size()} * kGroupRecordBytes +
                 uint64_t{d.group_seq_ids.size()} * 4;
    uint64_t per_cell = 0, data = 0;
    bool ok = checked_add(e.scales_offset, scales, &e.cells_offset) &&
              checked_add(e.cells_offset, cells, &e.data_offset) &&
              checked_add(e.k_row_bytes, e.v_row_bytes, &per_cell) && checked_mul(per_cell, h.n_cells, &e.layer_bytes);
    if (ok && group) {
        // Layer by layer: a windowed layer has the group's rows.
        e.layer_offsets.resize(h.n_layers);
        e.layer_rows.resize(h.n_layers);
        uint64_t at = e.data_offset;
        for (uint32_t l = 0; l < h.n_layers && ok; ++l) {
            e.layer_offsets[l] = at;
            e.layer_rows[l] = l < d.windowed.size() && d.windowed[l] ? static_cast<uint32_t>(d.group.size()) : h.n_cells;
            uint64_t bytes = 0;
            ok = checked_mul(per_cell, e.layer_rows[l], &bytes) && checked_add(at, bytes, &at);
        }
        ok = ok && checked_add(at, 0, &e.checksum_offset);
    } else {
        ok = ok && checked_mul(e.layer_bytes, h.n_layers, &data) && checked_add(e.data_offset, data, &e.checksum_offset);
    }
    ok = ok && checked_add(e.checksum_offset, kChecksumBytes, &e.total);
    if (!ok) return fail(KVRT_ERROR_CORRUPT_STATE, "state: its size overflows 64 bits");
    *out = e;
    return KVRT_SUCCESS;
}

uint32_t version_for(const Header& h) {
    if (h.flags & kFlagWindowGroup) return 3;
    return h.layout == KVRT_LAYOUT_PAGED ? 2 : 1;
}

void write_prefix(const Description& d, const Extents& e, uint8_t* out) {
    const Header& h = d.header;
    std::memcpy(out, kMagic, 8);
    const uint32_t fields[] = {std::max(h.version, version_for(h)), kHeaderBytes,
                               h.flags,      h.n_layers,
                               h.n_kv_heads, h.head_dim_k,
                               h.head_dim_v, static_cast<uint32_t>(h.type_k),
                               static_cast<uint32_t>(h.type_v), h.layout,
                               h.capacity,   h.max_seqs,
                               h.n_cells,    static_cast<uint32_t>(h.seq)};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; ++i) put_u32(out + 8 + 4 * i, fields[i]);
    uint8_t* p = out + e.scales_offset;
    for (const auto* list : {&d.k_scales, &d.v_scales})
        for (const kv::StaticScale& s : *list) {
            put_u32(p, float_bits(s.scale));
            put_u32(p + 4, static_cast<uint32_t>(s.zero_point));
            p += kScaleBytes;
        }
    for (const CellRecord& c : d.cells) {
        put_u32(p, c.cell);
        put_u32(p + 4, static_cast<uint32_t>(c.pos));
        put_u32(p + 8, c.n_seq);
        p += kCellRecordBytes;
        for (uint32_t j = 0; j < c.n_seq; ++j, p += 4) put_u32(p, static_cast<uint32_t>(d.seq_ids[c.seq_begin + j]));
    }
    if (!(h.flags & kFlagWindowGroup)) return;
    for (uint32_t w = 0; w < (h.n_layers + 31) / 32; ++w, p += 4) {
        uint32_t mask = 0;
        for (uint32_t bit = 0; bit < 32 && w * 32 + bit < h.n_layers; ++bit)
            if (d.windowed[w * 32 + bit]) mask |= 1u << bit;
        put_u32(p, mask);
    }
    put_u32(p, static_cast<uint32_t>(d.group.size()));
    p += 4;
    for (const GroupRecord& g : d.group) {
        put_u32(p, g.record);
        put_u32(p + 4, g.n_seq);
        p += kGroupRecordBytes;
        for (uint32_t j = 0; j < g.n_seq; ++j, p += 4)
            put_u32(p, static_cast<uint32_t>(d.group_seq_ids[g.seq_begin + j]));
    }
}

void seal(uint8_t* out, uint64_t size) {
    put_u64(out + size - kChecksumBytes, checksum(out, static_cast<size_t>(size - kChecksumBytes)));
}

Result parse(const void* data, uint64_t size, Plan* out, const ParseOptions& options) {
    if (!out) return fail(KVRT_ERROR_INVALID_ARGUMENT, "the plan is NULL");
    if (!data && size) return fail(KVRT_ERROR_INVALID_ARGUMENT, "data is NULL");
    const auto* b = static_cast<const uint8_t*>(data);
    if (size < kHeaderBytes + kChecksumBytes)
        return fail(KVRT_ERROR_CORRUPT_STATE, "truncated state: %llu bytes, a state has at least %u",
                    static_cast<unsigned long long>(size), kHeaderBytes + kChecksumBytes);
    if (std::memcmp(b, kMagic, 8) != 0)
        return fail(KVRT_ERROR_CORRUPT_STATE, "not a kvrt state: the first 8 bytes are not \"KVRTSTAT\"");
    const uint32_t version = get_u32(b + 8);
    if (version == 0) return fail(KVRT_ERROR_CORRUPT_STATE, "state offset 8: version 0");
    if (version > kVersion)
        return fail(KVRT_ERROR_UNSUPPORTED, "state format version %u is newer than this library reads (1..%u)", version,
                    kVersion);
    try {
        // Versions 1..kVersion: version 2 is version 1 with one more layout
        // value, version 3 adds the window group's section (behind a flag),
        // so one parser reads them all.
        return parse_body(b, size, out, options);
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "out of host memory parsing a state");
    }
}

}  // namespace kvrt::state
