// Writes the fuzzer's seed corpus: valid states of several shapes (types,
// static scales, whole cache and one sequence, empty, shared cells, a state
// of the paged layout in format version 2, one with a window group in
// version 3), made by the format's writer. Usage: kvrt_state_corpus DIR
#include <cstdio>
#include <string>

#include "fuzz/state_samples.hpp"

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    using kvrt_test::SampleSpec;
    struct Named {
        const char* name;
        SampleSpec spec;
    };
    auto spec = [](kvrt_type k, kvrt_type v, int32_t seq, uint32_t cells, uint32_t seed) {
        SampleSpec s;
        s.type_k = k;
        s.type_v = v;
        s.seq = seq;
        s.n_cells = cells;
        s.seed = seed;
        s.n_kv_heads = 1;
        s.n_layers = seq >= 0 ? 1 : 2;
        return s;
    };
    Named seeds[] = {
        {"f16_whole", spec(KVRT_TYPE_F16, KVRT_TYPE_F16, -1, 5, 1)},
        {"f16_seq", spec(KVRT_TYPE_F16, KVRT_TYPE_F16, 2, 4, 2)},
        {"f32_whole", spec(KVRT_TYPE_F32, KVRT_TYPE_F32, -1, 3, 3)},
        {"q8_0_whole", spec(KVRT_TYPE_Q8_0, KVRT_TYPE_Q8_0, -1, 6, 4)},
        {"q4_0_q8_0_seq", spec(KVRT_TYPE_Q4_0, KVRT_TYPE_Q8_0, 0, 3, 5)},
        {"u8_u16_static_whole", spec(KVRT_TYPE_U8_STATIC, KVRT_TYPE_U16_STATIC, -1, 4, 6)},
        {"u16_static_seq", spec(KVRT_TYPE_U16_STATIC, KVRT_TYPE_F16, 1, 2, 7)},
        {"empty", spec(KVRT_TYPE_F16, KVRT_TYPE_F16, -1, 0, 8)},
        {"window_group_whole", spec(KVRT_TYPE_F16, KVRT_TYPE_Q8_0, -1, 5, 10)},
        {"paged_q8_0_whole", spec(KVRT_TYPE_Q8_0, KVRT_TYPE_F16, -1, 6, 9)},
    };
    Named& paged = seeds[sizeof seeds / sizeof seeds[0] - 1];
    paged.spec.layout = KVRT_LAYOUT_PAGED;
    seeds[sizeof seeds / sizeof seeds[0] - 2].spec.window_group = true;
    for (const Named& n : seeds) {
        const auto bytes = kvrt_test::make_sample_state(n.spec);
        const std::string path = std::string(argv[1]) + "/" + n.name + ".kvrt";
        FILE* f = std::fopen(path.c_str(), "wb");
        if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f) != 0) {
            std::fprintf(stderr, "cannot write %s\n", path.c_str());
            return 1;
        }
    }
    return 0;
}
