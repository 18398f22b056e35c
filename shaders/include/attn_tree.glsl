// Token trees in the attention kernels. The per-call words at params_offset
// + 7 describe the batch's tree (all zero without one): the words of one
// query's ancestor row, the tree's first cell, its cell count, and the
// offsets from params_offset of the cell map (per cell from the first: the
// tree token stored there, or NO_NODE) and of the first query's ancestor row
// (bit j: token j is the query or one of its ancestors). Of the tree's cells,
// a query sees its ancestors' and its own only. Needs `pc.params_offset` and
// `meta_words`.

const uint NO_NODE = 0xFFFFFFFFu;

struct TreeView {
    uint words;  // 0: no tree
    uint first;
    uint cells;
    uint map;
    uint anc;
};

TreeView tree_view() {
    TreeView t;
    t.words = meta_words[pc.params_offset + 7u];
    t.first = meta_words[pc.params_offset + 8u];
    t.cells = meta_words[pc.params_offset + 9u];
    t.map = pc.params_offset + meta_words[pc.params_offset + 10u];
    t.anc = pc.params_offset + meta_words[pc.params_offset + 11u];
    return t;
}

// The tree token stored in cache cell `cell`, or NO_NODE.
uint tree_node(TreeView t, uint cell) {
    if (t.words == 0u) return NO_NODE;
    const uint rel = cell - t.first;  // wraps around below the first cell
    return rel < t.cells ? meta_words[t.map + rel] : NO_NODE;
}

// Whether `query` (of this call) sees tree token `node`.
bool tree_sees(TreeView t, uint query, uint node) {
    return ((meta_words[t.anc + query * t.words + (node >> 5)] >> (node & 31u)) & 1u) != 0u;
}
