//! A store that opens itself when it first answers ([`Reopening`]), so that an agent runs its
//! machine, and its self-fence, while its store cannot be reached.
//!
//! An agent restarted while cut off from its store (a partition, an etcd cluster without
//! quorum, a member list that is all down) used to wait in [`StoreUrl::open_retrying`] before
//! its machine started. Copies its earlier life started went on running, watched by nobody:
//! their node lease ended, the controller started their names elsewhere, and a `named` copy ran
//! on two nodes (issue 22, item 1: `names-2` for 5 s after `node forget`, 22.5 s past the
//! lease). The machine already knows what to do when its first claim gets no answer: it
//! retries, and stops what an earlier agent here left running by the fence's deadlines from its
//! own start ([`crate::agent`]). It only needs requests that fail instead of a driver that never
//! starts. This wrapper gives it that: every call first opens the store if it is not open yet
//! (at most one attempt at a time, then waits of 100 ms doubling to 5 s between attempts, as
//! `open_retrying` waits), and fails with [`StoreError::Unavailable`] until it is.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::url::{OpenMode, StoreUrl};
use super::{wall_ms, Entry, LeaseId, Read, Revision, Store, StoreError, Txn, Watcher};
use crate::rt::log;

/// The first wait after a failed attempt to open; it doubles up to [`MAX_WAIT`].
const FIRST_WAIT: Duration = Duration::from_millis(100);
/// The longest wait between two attempts to open.
const MAX_WAIT: Duration = Duration::from_secs(5);

/// A store opened on first use and kept open: see the [module docs](self).
pub struct Reopening {
    /// Where the store is.
    url: StoreUrl,
    /// Who opens it, for the log line when it answers.
    who: String,
    /// Whether the store, once open, pushes changes: known from its kind before it opens.
    watches: bool,
    /// The store once open, and when the next attempt may go out.
    state: Mutex<Opening>,
}

/// Where opening stands.
struct Opening {
    /// The store, once it opened.
    store: Option<Arc<dyn Store>>,
    /// An attempt is under way on another thread.
    busy: bool,
    /// No attempt before this.
    next_try: Instant,
    /// The wait after the next failed attempt.
    wait: Duration,
    /// Why the last attempt failed.
    why: String,
}

impl Reopening {
    /// A store at `url` that has not answered yet (`why`: the first attempt's error); the next
    /// attempt goes out after the first wait.
    pub fn new(url: StoreUrl, who: &str, why: String) -> Self {
        Self {
            watches: matches!(url, StoreUrl::Etcd(_)),
            url,
            who: who.to_owned(),
            state: Mutex::new(Opening {
                store: None,
                busy: false,
                next_try: Instant::now() + FIRST_WAIT,
                wait: FIRST_WAIT * 2,
                why,
            }),
        }
    }

    /// Whether the store has opened.
    pub fn is_open(&self) -> bool {
        self.lock().store.is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Opening> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The open store, opening it if an attempt is due; else why it is not open.
    fn inner(&self) -> Result<Arc<dyn Store>, StoreError> {
        {
            let mut s = self.lock();
            if let Some(store) = &s.store {
                return Ok(Arc::clone(store));
            }
            if s.busy || Instant::now() < s.next_try {
                return Err(StoreError::Unavailable(s.why.clone()));
            }
            s.busy = true;
        }
        // Outside the lock: opening an etcd store can take its connect deadline, and the
        // calls meanwhile fail at once rather than queue behind it.
        let opened = self.url.open(OpenMode::Create);
        let mut s = self.lock();
        s.busy = false;
        match opened {
            Ok(store) => {
                log(&self.who, format!("the store {} answers", self.url));
                s.store = Some(Arc::clone(&store));
                Ok(store)
            }
            Err(e) => {
                s.why = e.to_string();
                s.next_try = Instant::now() + s.wait;
                s.wait = (s.wait * 2).min(MAX_WAIT);
                Err(StoreError::Unavailable(s.why.clone()))
            }
        }
    }
}

impl Store for Reopening {
    fn read(&self, prefixes: &[&str]) -> Result<Read, StoreError> {
        self.inner()?.read(prefixes)
    }

    fn read_until(&self, prefixes: &[&str], deadline: Instant) -> Result<Read, StoreError> {
        self.inner()?.read_until(prefixes, deadline)
    }

    fn commit(&self, txn: &Txn) -> Result<Revision, StoreError> {
        self.inner()?.commit(txn)
    }

    fn alarm(&self) -> Result<Option<String>, StoreError> {
        self.inner()?.alarm()
    }

    fn revision(&self) -> Result<Revision, StoreError> {
        self.inner()?.revision()
    }

    fn grant(&self, ttl: Duration) -> Result<LeaseId, StoreError> {
        self.inner()?.grant(ttl)
    }

    fn keep_alive(&self, lease: LeaseId) -> Result<(), StoreError> {
        self.inner()?.keep_alive(lease)
    }

    fn revoke(&self, lease: LeaseId) -> Result<(), StoreError> {
        self.inner()?.revoke(lease)
    }

    fn compact_history(&self, before: Revision) -> Result<(), StoreError> {
        self.inner()?.compact_history(before)
    }

    /// The open store's clock, or the host's wall clock before it opens (every store's clock
    /// is the wall clock of the host it runs on).
    fn now_ms(&self) -> u64 {
        match &self.lock().store {
            Some(s) => s.now_ms(),
            None => wall_ms(),
        }
    }

    fn watches(&self) -> bool {
        self.watches
    }

    fn watch(
        &self,
        prefixes: &[&str],
        after: Revision,
    ) -> Option<Result<Box<dyn Watcher>, StoreError>> {
        match self.inner() {
            Ok(s) => s.watch(prefixes, after),
            Err(e) => Some(Err(e)),
        }
    }

    fn get(&self, key: &str) -> Result<Option<Entry>, StoreError> {
        self.inner()?.get(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_fail_as_unavailable_until_the_store_can_be_opened_then_reach_it() {
        let dir = tempfile::tempdir().unwrap();
        // A file where the data directory should be: SQLite cannot open a store there.
        let blocked = dir.path().join("data");
        std::fs::write(&blocked, "not a directory").unwrap();
        let url = StoreUrl::Sqlite(blocked.clone());
        let first = url.open(OpenMode::Create).err().unwrap().to_string();
        let store = Reopening::new(url, "test", first.clone());
        assert!(!store.watches());
        let e = store.read(&["/"]).unwrap_err();
        assert!(
            matches!(&e, StoreError::Unavailable(w) if *w == first),
            "{e:?}"
        );
        assert!(!store.is_open());
        // Tries again only after its wait, and keeps failing while the cause stays.
        std::thread::sleep(FIRST_WAIT + Duration::from_millis(20));
        assert!(matches!(store.revision(), Err(StoreError::Unavailable(_))));
        // The cause removed: the next attempt due opens it, and it stays open.
        std::fs::remove_file(&blocked).unwrap();
        let t = Instant::now();
        let rev = loop {
            match store.revision() {
                Ok(r) => break r,
                Err(_) if t.elapsed() < Duration::from_secs(5) => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(e) => panic!("never opened: {e}"),
            }
        };
        assert!(store.is_open());
        let next = store.commit(&Txn::new().put("/a", "1")).unwrap();
        assert!(next > rev);
        assert_eq!(store.get("/a").unwrap().unwrap().value, "1");
    }

    #[test]
    fn an_etcd_store_watches_before_it_opens_and_a_watch_fails_as_unavailable() {
        let url: StoreUrl = "etcd://127.0.0.1:1".parse().unwrap();
        let store = Reopening::new(url, "test", "no answer".into());
        assert!(store.watches());
        match store.watch(&["/"], 0) {
            Some(Err(StoreError::Unavailable(w))) => assert_eq!(w, "no answer"),
            other => panic!("{:?}", other.map(|r| r.map(|_| ()))),
        }
        let before = wall_ms();
        assert!(store.now_ms() >= before);
    }
}
