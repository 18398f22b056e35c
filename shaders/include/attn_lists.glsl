// Per-sequence lists of cells in the attention kernels (cell_lists.comp
// builds them): each list holds a sequence's cells in increasing cell order.
// Needs the buffer `cell_lists`.

// The first of the `len` listed cells at `first` that is at or above `cell`
// (len when none).
uint list_lower_bound(uint first, uint len, uint cell) {
    uint lo = 0u, hi = len;
    while (lo < hi) {
        const uint mid = (lo + hi) >> 1;
        if (cell_lists[first + mid] < cell) lo = mid + 1u;
        else hi = mid;
    }
    return lo;
}
