// libFuzzer target of the state parser (src/state/): no device, no file.
//
// Each input is parsed twice: as it is (almost always refused by the
// checksum, which is then what is tested), and with its checksum fixed up,
// so that every check behind the checksum is reached. A state the parser
// accepts must be exactly what the writer makes of the parsed description:
// the same size, the same bytes before the rows, rows that lie inside the
// input. Any difference, crash or sanitizer report is a finding.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "state/state_format.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace {

void require(bool ok) {
    if (!ok) std::abort();
}

void check_accepted(const uint8_t* data, size_t size, const kvrt::state::Plan& plan) {
    using namespace kvrt::state;
    const Header& h = plan.desc.header;
    Extents e;
    require(extents_of(plan.desc, &e) == KVRT_SUCCESS);
    require(e.total == size);
    require(h.n_cells == plan.desc.cells.size());
    std::vector<uint8_t> prefix(static_cast<size_t>(e.data_offset));
    write_prefix(plan.desc, e, prefix.data());
    require(std::memcmp(prefix.data(), data, prefix.size()) == 0);
    // Rows lie inside the input (with no cells there are none, however many
    // layers the header names; a windowed layer has the group's rows).
    for (uint32_t l = 0; h.n_cells && l < h.n_layers; ++l) {
        const uint64_t rows = e.rows(l, h.n_cells);
        require(plan.k_rows(l) >= data && plan.k_rows(l) + rows * e.k_row_bytes <= data + size - 8);
        require(plan.v_rows(l) >= data && plan.v_rows(l) + rows * e.v_row_bytes <= data + size - 8);
    }
    // The window group's records: ascending, each a subset of its cell's
    // sequences.
    require(!(h.flags & kFlagWindowGroup) || plan.desc.windowed.size() == h.n_layers);
    for (size_t i = 0; i < plan.desc.group.size(); ++i) {
        const GroupRecord& g = plan.desc.group[i];
        require(g.record < h.n_cells && (i == 0 || g.record > plan.desc.group[i - 1].record));
        const CellRecord& c = plan.desc.cells[g.record];
        require(g.n_seq >= 1 && g.n_seq <= c.n_seq);
        for (uint32_t j = 0; j < g.n_seq; ++j) {
            const int32_t s = plan.desc.group_seq_ids[g.seq_begin + j];
            bool found = false;
            for (uint32_t k = 0; k < c.n_seq; ++k) found = found || plan.desc.seq_ids[c.seq_begin + k] == s;
            require(found);
        }
    }
    // Every record as the parser promises: cells ascending below the
    // capacity, positions >= 0, ids ascending below max_seqs.
    for (size_t i = 0; i < plan.desc.cells.size(); ++i) {
        const CellRecord& c = plan.desc.cells[i];
        require(c.cell < h.capacity && c.pos >= 0 && c.n_seq >= 1);
        require(i == 0 || c.cell > plan.desc.cells[i - 1].cell);
        for (uint32_t j = 0; j < c.n_seq; ++j) {
            const int32_t s = plan.desc.seq_ids[c.seq_begin + j];
            require(s >= 0 && static_cast<uint32_t>(s) < h.max_seqs);
            require(j == 0 || s > plan.desc.seq_ids[c.seq_begin + j - 1]);
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace kvrt::state;
    Plan plan;
    if (parse(data, size, &plan) == KVRT_SUCCESS) check_accepted(data, size, plan);
    if (size >= kHeaderBytes + kChecksumBytes) {
        std::vector<uint8_t> fixed(data, data + size);
        const uint64_t sum = XXH3_64bits(fixed.data(), size - kChecksumBytes);
        for (int i = 0; i < 8; ++i) fixed[size - kChecksumBytes + i] = static_cast<uint8_t>(sum >> (8 * i));
        Plan p2;
        if (parse(fixed.data(), fixed.size(), &p2) == KVRT_SUCCESS) check_accepted(fixed.data(), fixed.size(), p2);
        // The same bytes without the checksum check reach the same verdict.
        Plan p3;
        ParseOptions no_sum;
        no_sum.verify_checksum = false;
        const bool a = parse(fixed.data(), fixed.size(), &p2) == KVRT_SUCCESS;
        const bool b = parse(fixed.data(), fixed.size(), &p3, no_sum) == KVRT_SUCCESS;
        require(a == b);
    }
    return 0;
}
