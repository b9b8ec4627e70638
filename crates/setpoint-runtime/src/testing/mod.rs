//! Test support, shared by every crate's tests: real etcd clusters on loopback (or inside
//! network namespaces), the copies an agent marks, and one bounded wait.
//!
//! Not part of setpoint's interface; public so that every crate's tests can share it.
//!
//! ```no_run
//! use setpoint_runtime::testing::EtcdCluster;
//! let Some(etcd) = EtcdCluster::start_or_skip("my_test", 1) else { return };
//! let store = etcd.store();
//! // ... the cluster's processes are killed, by pid, when `etcd` is dropped.
//! ```
//!
//! # Layout
//! - [`EtcdCluster`] (`etcd.rs`): etcd members started and ended by the test. Ports come from
//!   [`EtcdClusterConfig::ports`] (by default 23100–23199), two per member (client, peer); a
//!   port is taken only if it can be bound on 127.0.0.1 at the time and no other cluster of
//!   this process holds it. With [`EtcdClusterConfig::secure`] the members speak client TLS
//!   (certificates made with `openssl` for the test, client certificates required) and auth is
//!   on (user `root`, its password in a file), as a deployed etcd is.
//! - [`Marks`] (`marks.rs`): the copy processes that agents started, found by their mark (for orphan
//!   checks), and killed by pid when the guard is dropped.
//! - [`Wait`] and [`wait_until`]: the one bounded wait, in polls and in time, that says what it
//!   waited for when it gives up.
//! - `FailingCommits` (`failing.rs`, this crate's unit tests only): a memory store whose
//!   commits fail by a test's rule (`refusing`: over a number of operations, as etcd's
//!   `--max-txn-ops` does).

mod etcd;
#[cfg(test)]
mod failing;
mod marks;

pub use etcd::*;
#[cfg(test)]
pub(crate) use failing::{refusing, FailingCommits};
pub use marks::*;

use std::time::{Duration, Instant};

/// Why a [`Wait`] gave up: what it waited for, after how many polls and how long.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timeout {
    /// What was waited for, in words.
    pub what: String,
    /// How many polls failed.
    pub polls: u32,
    /// How long it waited.
    pub waited: Duration,
    /// The bound in time.
    pub within: Duration,
}

impl std::fmt::Display for Timeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "timed out waiting for: {} ({} polls in {:?}; bound {:?})",
            self.what, self.polls, self.waited, self.within
        )
    }
}

/// The one bounded wait of the tests: a condition is polled every `every` until it holds, at
/// most `within` in time and at most a count of polls (by default as many as fit in `within`,
/// rounded up, plus one), whichever ends first. It owns no condition and no sleep, so that a thread and an
/// async task can both drive it: call [`Wait::again`] after each poll that failed and pause
/// for what it returns.
#[derive(Clone, Debug)]
pub struct Wait {
    what: String,
    started: Instant,
    within: Duration,
    every: Duration,
    polls: u32,
    max_polls: u32,
}

impl Wait {
    /// A wait for `what` (said on timeout), starting now.
    pub fn new(what: impl Into<String>, within: Duration, every: Duration) -> Self {
        let every = every.max(Duration::from_millis(1));
        // Rounded up, so that the count never ends a wait before its time does.
        let fit = within.as_nanos().div_ceil(every.as_nanos()) + 1;
        Self {
            what: what.into(),
            started: Instant::now(),
            within,
            every,
            polls: 0,
            max_polls: u32::try_from(fit).unwrap_or(u32::MAX),
        }
    }

    /// Bounds the polls to `n` (at least 1) as well as the time.
    pub fn max_polls(mut self, n: u32) -> Self {
        self.max_polls = n.max(1);
        self
    }

    /// How long it has waited so far.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Whether the time bound has passed.
    pub fn expired(&self) -> bool {
        self.elapsed() >= self.within
    }

    /// Counts one failed poll: the pause before the next, or why there is no next.
    pub fn again(&mut self) -> Result<Duration, Timeout> {
        self.polls += 1;
        if self.polls >= self.max_polls || self.expired() {
            return Err(Timeout {
                what: self.what.clone(),
                polls: self.polls,
                waited: self.elapsed(),
                within: self.within,
            });
        }
        Ok(self.every)
    }
}

/// Polls `want` on this thread until it holds and returns how long that took; on timeout,
/// panics with what it waited for and `context()` (the state and logs worth seeing).
pub fn wait_until(
    mut wait: Wait,
    mut want: impl FnMut() -> bool,
    context: impl FnOnce() -> String,
) -> Duration {
    loop {
        if want() {
            return wait.elapsed();
        }
        match wait.again() {
            Ok(pause) => std::thread::sleep(pause),
            Err(t) => panic!("{t}\n{}", context()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_gives_up_after_its_count_of_polls_and_says_what_it_waited_for() {
        let mut w = Wait::new("the moon", Duration::from_secs(60), Duration::ZERO).max_polls(3);
        assert!(w.again().is_ok());
        assert!(w.again().is_ok());
        let t = w.again().unwrap_err();
        assert_eq!(t.polls, 3);
        assert!(
            t.to_string()
                .contains("timed out waiting for: the moon (3 polls"),
            "{t}"
        );
    }

    #[test]
    fn a_wait_gives_up_after_its_time_and_returns_at_once_when_the_condition_holds() {
        let mut w = Wait::new(
            "never",
            Duration::from_millis(30),
            Duration::from_millis(10),
        );
        let started = Instant::now();
        let t = loop {
            match w.again() {
                Ok(p) => std::thread::sleep(p),
                Err(t) => break t,
            }
        };
        assert!(started.elapsed() >= Duration::from_millis(30), "{t}");
        assert!(t.polls <= 4, "{t}");
        let mut n = 0;
        let took = wait_until(
            Wait::new(
                "three polls",
                Duration::from_secs(5),
                Duration::from_millis(1),
            ),
            || {
                n += 1;
                n == 3
            },
            String::new,
        );
        assert_eq!(n, 3);
        assert!(took < Duration::from_secs(5));
    }

    #[test]
    #[should_panic(expected = "timed out waiting for: nothing")]
    fn wait_until_panics_with_the_context_on_timeout() {
        wait_until(
            Wait::new(
                "nothing",
                Duration::from_millis(20),
                Duration::from_millis(5),
            ),
            || false,
            || "the logs".into(),
        );
    }

    #[test]
    fn a_node_mark_is_canonical_without_creating_the_state_directory() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("data").join("nodes");
        let mark = node_mark(&state, "a");
        assert!(!state.exists());
        let canonical = dir.path().canonicalize().unwrap();
        assert_eq!(mark, canonical.join("data/nodes/a").display().to_string());
        std::fs::create_dir_all(&state).unwrap();
        assert_eq!(node_mark(&state, "a"), mark);
    }
}
