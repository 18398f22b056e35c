//! The paged layout (`kvrt_paged.h`): per-sequence block tables, prefix
//! sharing, copy-on-write forks and reuse of cached blocks.

use std::ptr;

use kvrt_sys as sys;

use crate::cache::Cache;
use crate::error::{check, Error, Result};
use crate::stream::Recording;
use crate::types::len_u32;

/// The block size of a paged layout (`kvrt_paged_layout_desc`), given with
/// [`CacheDesc::paged_layout`](crate::CacheDesc::paged_layout) for a
/// [`Layout::Paged`](crate::Layout::Paged) cache. The library checks it
/// when the cache is created or estimated.
///
/// ```
/// use kvrt::{CacheDesc, Layout, PagedLayoutDesc};
/// let mut desc = CacheDesc::new(2, 4, 2, 64, 1024);
/// desc.layout = Layout::Paged;
/// desc.paged_layout = Some(PagedLayoutDesc::new(32));
/// assert!(desc.estimate().is_ok());
/// // 16, 32 or 64 only, and the capacity must be a multiple of it.
/// desc.paged_layout = Some(PagedLayoutDesc::new(24));
/// assert!(matches!(desc.estimate(), Err(kvrt::Error::InvalidArgument(_))));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub struct PagedLayoutDesc {
    /// Tokens per block: 16, 32 or 64; 0 = 16. The cache's capacity must be
    /// a multiple of it.
    pub block_size: u32,
}

impl PagedLayoutDesc {
    /// Blocks of `block_size` tokens (16, 32 or 64; 0 = 16).
    pub fn new(block_size: u32) -> Self {
        Self { block_size }
    }

    /// The C struct, chained before `next`.
    pub(crate) fn raw(&self, next: *const std::ffi::c_void) -> sys::kvrt_paged_layout_desc {
        sys::kvrt_paged_layout_desc {
            next,
            block_size: self.block_size,
            ..sys::KVRT_PAGED_LAYOUT_DESC_INIT
        }
    }
}

/// Block counts of a paged cache (`kvrt_paged_stats`, from
/// [`Cache::paged_stats`]): `free_blocks + cached_blocks + used_blocks ==
/// n_blocks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub struct PagedStats {
    /// Tokens per block.
    pub block_size: u32,
    /// Blocks: capacity / block_size.
    pub n_blocks: u32,
    /// Blocks no sequence uses and the prefix registry does not hold.
    pub free_blocks: u32,
    /// Blocks no sequence uses but registered: reusable by
    /// [`Cache::paged_admit`] until a new block needs their room.
    pub cached_blocks: u32,
    /// Blocks in some sequence's block table.
    pub used_blocks: u32,
    /// Blocks in the prefix registry (cached or used).
    pub registered_blocks: u32,
    /// Blocks in more than one block table entry (shared prefixes and forks).
    pub shared_blocks: u32,
}

/// What [`Cache::paged_admit`] did with a prompt.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Admitted {
    /// Leading tokens of the prompt whose rows are already cached (a multiple
    /// of the block size, and fewer than the prompt's tokens): the engine
    /// computes and writes only the rest.
    pub n_cached: u32,
    /// The cell of every token of the prompt, in prompt order.
    pub cells: Vec<u32>,
}

impl Admitted {
    /// The cells of the tokens that still need their rows written
    /// (`cells[n_cached..]`).
    pub fn uncached_cells(&self) -> &[u32] {
        &self.cells[(self.n_cached as usize).min(self.cells.len())..]
    }
}

/// Checks that the ids (when known) match the positions in number; the
/// library cannot check host array lengths.
fn check_ids(token_ids: Option<&[i32]>, positions: &[i32]) -> Result<u32> {
    if let Some(ids) = token_ids {
        if ids.len() != positions.len() {
            return Err(Error::invalid(format!(
                "token_ids has {} entries for {} positions",
                ids.len(),
                positions.len()
            )));
        }
    }
    len_u32(positions.len(), "positions")
}

fn append_raw(
    cache: &Cache,
    stream: sys::kvrt_stream,
    seq: i32,
    token_ids: Option<&[i32]>,
    positions: &[i32],
) -> Result<Vec<u32>> {
    let n = check_ids(token_ids, positions)?;
    let mut cells = vec![0u32; positions.len()];
    let ids = token_ids.map_or(ptr::null(), |t| t.as_ptr());
    // SAFETY: the caller holds the cache exclusively (&mut, or a Recording's
    // borrow on this thread) and the stream; `ids` (when not NULL) and
    // `positions` hold n entries, and `cells` has n entries.
    check(unsafe {
        sys::kvrt_cache_paged_append(
            cache.as_raw(),
            stream,
            seq,
            n,
            ids,
            positions.as_ptr(),
            cells.as_mut_ptr(),
        )
    })?;
    Ok(cells)
}

/// The paged layout's calls ([`Layout::Paged`](crate::Layout::Paged)).
/// Each fails with [`Error::Unsupported`] on a cache of another layout, and
/// a call that fails changes no sequence.
impl Cache {
    /// Starts the empty sequence `seq` with a prompt of tokens (`token_ids`,
    /// each >= 0, and their `positions`) under `salt`
    /// (`kvrt_cache_paged_admit`).
    ///
    /// With sharing on (the default, see [`Cache::paged_set_sharing`]),
    /// maps the longest run of registered blocks equal to the start of the
    /// prompt (same ids, positions and salt), always leaving at least one
    /// token to compute. Returns how many leading tokens are cached and the
    /// cell of every token: write the rows of the others
    /// ([`Admitted::uncached_cells`]) with [`Cache::write`] (every layer);
    /// the cached ones may be read. The salt stands for whatever else
    /// decides K and V (model, adapter, RoPE): prompts with different salts
    /// never share. Metadata only: nothing is recorded on the device.
    ///
    /// ```no_run
    /// # fn main() -> kvrt::Result<()> {
    /// use kvrt::{CacheDesc, Layers, Layout, TensorRef};
    /// let ctx = kvrt::Context::new()?;
    /// let mut desc = CacheDesc::new(1, 1, 1, 8, 256);
    /// desc.layout = Layout::Paged;
    /// let mut cache = ctx.create_cache(&desc)?;
    /// let ids: Vec<i32> = (0..40).collect();
    /// let positions: Vec<i32> = (0..40).collect();
    /// let admitted = cache.paged_admit(0, &ids, &positions, 0)?;
    /// let todo = admitted.uncached_cells();
    /// let rows = vec![0f32; todo.len() * 8]; // the model's K and V of those tokens
    /// cache.write(todo, Layers::One(0), &TensorRef::host_f32(&rows), &TensorRef::host_f32(&rows))?;
    /// # Ok(()) }
    /// ```
    ///
    /// Fails with [`Error::InvalidArgument`] when `token_ids` and
    /// `positions` differ in length (before calling the library), for a
    /// sequence out of range or not empty, or a negative id or position;
    /// [`Error::CacheFull`] when free and cached blocks are too few;
    /// [`Error::Unsupported`] when the layout is not paged.
    pub fn paged_admit(
        &mut self,
        seq: i32,
        token_ids: &[i32],
        positions: &[i32],
        salt: u64,
    ) -> Result<Admitted> {
        let n = check_ids(Some(token_ids), positions)?;
        let mut n_cached = 0u32;
        let mut cells = vec![0u32; positions.len()];
        // SAFETY: Unsafe on the cache (&mut); `token_ids` and `positions`
        // hold n entries, `cells` has n entries, `n_cached` is valid.
        check(unsafe {
            sys::kvrt_cache_paged_admit(
                self.as_raw(),
                seq,
                n,
                token_ids.as_ptr(),
                positions.as_ptr(),
                salt,
                &mut n_cached,
                cells.as_mut_ptr(),
            )
        })?;
        Ok(Admitted { n_cached, cells })
    }

    /// Appends tokens to the end of `seq`, synchronously
    /// (`kvrt_cache_paged_append`), and returns their cells: write their
    /// rows with [`Cache::write`]. `token_ids` is `None` when the ids are
    /// unknown (the blocks then never become shareable).
    ///
    /// A block this fills is registered for prefix sharing when the sequence
    /// has sharing on, its ids are known and the block before it is
    /// registered. When the sequence's last block is partly filled and
    /// shared with another sequence (after [`Cache::paged_fork`] or a shared
    /// prompt), it is first copied to a new block (copy-on-write) and the
    /// call waits for the copy: the sequence's earlier tokens of that block
    /// move to new cells (see [`Cache::paged_cells`]), and no other sequence
    /// sees a change. [`Recording::paged_append`] records the copy instead.
    ///
    /// Fails with [`Error::InvalidArgument`] when `token_ids` and
    /// `positions` differ in length (before calling the library), for a
    /// sequence out of range, or a negative id or position;
    /// [`Error::CacheFull`]; [`Error::Unsupported`] when the layout is not
    /// paged; and the device errors of [`Cache::store`].
    pub fn paged_append(
        &mut self,
        seq: i32,
        token_ids: Option<&[i32]>,
        positions: &[i32],
    ) -> Result<Vec<u32>> {
        append_raw(self, ptr::null_mut(), seq, token_ids, positions)
    }

    /// Makes the empty sequence `dst` a copy of `src`: the same block table
    /// (every block shared), tokens and salt; no data moves
    /// (`kvrt_cache_paged_fork`). The first append to either copies the
    /// shared partly filled last block.
    ///
    /// Fails with [`Error::InvalidArgument`] for sequences out of range,
    /// `src == dst` or a non-empty `dst`; [`Error::Unsupported`] when the
    /// layout is not paged.
    pub fn paged_fork(&mut self, src: i32, dst: i32) -> Result<()> {
        // SAFETY: Unsafe on the cache (&mut).
        check(unsafe { sys::kvrt_cache_paged_fork(self.as_raw(), src, dst) })
    }

    /// Turns prefix sharing of `seq` on or off (on by default; a removed
    /// sequence keeps its setting) (`kvrt_cache_paged_set_sharing`). Off,
    /// [`Cache::paged_admit`] maps no registered blocks into the sequence
    /// and the blocks it fills are not registered, so no other sequence can
    /// map its contents (blocks registered before stay registered). Forks
    /// share blocks whatever the setting.
    ///
    /// Fails with [`Error::InvalidArgument`] for a sequence out of range;
    /// [`Error::Unsupported`] when the layout is not paged.
    pub fn paged_set_sharing(&mut self, seq: i32, enabled: bool) -> Result<()> {
        // SAFETY: Unsafe on the cache (&mut).
        check(unsafe { sys::kvrt_cache_paged_set_sharing(self.as_raw(), seq, u32::from(enabled)) })
    }

    /// Unregisters every block (`kvrt_cache_paged_clear_registry`): cached
    /// blocks become free and no later [`Cache::paged_admit`] maps what was
    /// stored before; blocks in use stay as they are.
    ///
    /// Fails with [`Error::Unsupported`] when the layout is not paged.
    pub fn paged_clear_registry(&mut self) -> Result<()> {
        // SAFETY: Unsafe on the cache (&mut).
        check(unsafe { sys::kvrt_cache_paged_clear_registry(self.as_raw()) })
    }

    /// The number of tokens of `seq` (`kvrt_cache_paged_get_cells` asking
    /// for no cells).
    ///
    /// Fails with [`Error::InvalidArgument`] for a sequence out of range;
    /// [`Error::Unsupported`] when the layout is not paged.
    pub fn paged_len(&self, seq: i32) -> Result<u32> {
        let mut n = 0u32;
        // SAFETY: Unsafe on the cache (not Sync); no cells are written
        // (max_cells 0, NULL out_cells).
        check(unsafe { sys::kvrt_cache_paged_get_cells(self.as_raw(), seq, 0, 0, ptr::null_mut(), &mut n) })?;
        Ok(n)
    }

    /// The cell of every token of `seq`, in append order
    /// (`kvrt_cache_paged_get_cells`). A copy-on-write moves a sequence's
    /// tokens to other cells, so cells returned earlier by
    /// [`Cache::paged_admit`] or [`Cache::paged_append`] hold only until the
    /// sequence's next append or shift; this gives the current ones.
    ///
    /// Fails with [`Error::InvalidArgument`] for a sequence out of range;
    /// [`Error::Unsupported`] when the layout is not paged.
    pub fn paged_cells(&self, seq: i32) -> Result<Vec<u32>> {
        let n = self.paged_len(seq)?;
        let mut cells = vec![0u32; n as usize];
        if n == 0 {
            return Ok(cells);
        }
        let mut len = 0u32;
        // SAFETY: Unsafe on the cache (not Sync); `cells` holds n entries,
        // the most the call writes.
        check(unsafe {
            sys::kvrt_cache_paged_get_cells(self.as_raw(), seq, 0, n, cells.as_mut_ptr(), &mut len)
        })?;
        cells.truncate(len.min(n) as usize);
        Ok(cells)
    }

    /// The block counts (`kvrt_cache_paged_get_stats`).
    ///
    /// Fails with [`Error::Unsupported`] when the layout is not paged.
    pub fn paged_stats(&self) -> Result<PagedStats> {
        let mut s = sys::KVRT_PAGED_STATS_INIT;
        // SAFETY: Unsafe on the cache (not Sync); `s` is typed and valid.
        check(unsafe { sys::kvrt_cache_paged_get_stats(self.as_raw(), &mut s) })?;
        Ok(PagedStats {
            block_size: s.block_size,
            n_blocks: s.n_blocks,
            free_blocks: s.free_blocks,
            cached_blocks: s.cached_blocks,
            used_blocks: s.used_blocks,
            registered_blocks: s.registered_blocks,
            shared_blocks: s.shared_blocks,
        })
    }
}

impl<'r> Recording<'r> {
    /// Records [`Cache::paged_append`] into this stream: the copy of a
    /// shared, partly filled last block (if any) is recorded rather than
    /// waited for, and the sequence is extended at once. If the recording is
    /// dropped or its submission fails, the sequence is cut back to its
    /// previous length or, when the call copied its shared last block, to
    /// the start of that block; the blocks it filled are unregistered.
    ///
    /// Fails as [`Cache::paged_append`] does, and with
    /// [`Error::InvalidState`] when the stream is not recording.
    pub fn paged_append(
        &mut self,
        cache: &'r Cache,
        seq: i32,
        token_ids: Option<&[i32]>,
        positions: &[i32],
    ) -> Result<Vec<u32>> {
        append_raw(cache, self.raw(), seq, token_ids, positions)
    }
}
