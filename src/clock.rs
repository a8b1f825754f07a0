//! A clock for the per-request path where milliseconds late is fine: timeouts of seconds, the
//! expiry of a cached head.

/// Milliseconds of the monotonic clock as of its last tick (a few milliseconds late at most).
/// It reads no time counter: callgrind counts 60 instructions a reading, where `Instant::now`
/// takes 100 and `elapsed` 175.
pub fn coarse_millis() -> u64 {
    // The kernel's coarse monotonic clock, through libc. Not `now()`, which also stores the
    // reading where every thread would write it.
    coarsetime::Duration::from_ticks(coarsetime::Instant::now_without_cache_update().as_ticks()).as_millis()
}

#[cfg(test)]
mod tests {
    #[test]
    fn coarse_millis_follows_the_monotonic_clock() {
        let (a, started) = (super::coarse_millis(), std::time::Instant::now());
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (b, slept) = (super::coarse_millis(), started.elapsed().as_millis() as u64);
        // Within a tick (up to 10 ms at HZ=100) of what std's clock says.
        assert!(b >= a && (b - a).abs_diff(slept) <= 12, "{a} {b} {slept}");
    }
}
