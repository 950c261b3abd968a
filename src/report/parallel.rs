//! Work a report spreads over the CPUs it may use: reading runs ([`super::collection`]) and the
//! estimates' exact intervals ([`super::estimates`]).

/// Threads for a report's parallel work: the CPUs this process may use (`sched_getaffinity`, as
/// [`std::thread::available_parallelism`] reads it), at most 8.
pub fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).min(8)
}

/// `items` mapped by `f`, in order, the items split into [`threads`] contiguous parts, each
/// mapped on a thread of its own (the first on the calling thread).
///
/// # Panics
/// When `f` panics on a thread.
pub fn map<T: Sync, U: Send>(items: &[T], f: impl Fn(&T) -> U + Sync) -> Vec<U> {
    let per_thread = items.len().div_ceil(threads()).max(1);
    let mut parts = items.chunks(per_thread);
    let Some(first) = parts.next() else {
        return Vec::new();
    };
    let f = &f;
    std::thread::scope(|scope| {
        let others: Vec<_> = parts
            .map(|part| scope.spawn(move || part.iter().map(f).collect::<Vec<U>>()))
            .collect();
        let mut out: Vec<U> = first.iter().map(f).collect();
        for handle in others {
            out.extend(handle.join().expect("a report thread panicked"));
        }
        out
    })
}
