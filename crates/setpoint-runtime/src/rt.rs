//! Small pieces the async drivers share: a shutdown signal, store calls on blocking threads,
//! and log lines (on top of `tracing`: [`crate::logging`]).

use std::sync::Arc;

use tokio::sync::watch;

use crate::store::Store;

/// The sending half of a [`Shutdown`]: firing it (or dropping it) asks every holder of the
/// receiving half to stop.
#[derive(Debug)]
pub struct ShutdownTrigger(watch::Sender<bool>);

/// A shutdown signal that many tasks can wait for.
#[derive(Clone, Debug)]
pub struct Shutdown(watch::Receiver<bool>);

/// A new trigger and the signal it fires.
pub fn shutdown_pair() -> (ShutdownTrigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (ShutdownTrigger(tx), Shutdown(rx))
}

impl ShutdownTrigger {
    /// Asks every holder of the signal to stop.
    pub fn fire(&self) {
        self.0.send_replace(true);
    }
}

impl Shutdown {
    /// Waits until shutdown is asked for (or the trigger is gone).
    pub async fn wait(&mut self) {
        while !*self.0.borrow_and_update() {
            if self.0.changed().await.is_err() {
                return;
            }
        }
    }

    /// Whether shutdown was asked for.
    pub fn is_set(&self) -> bool {
        *self.0.borrow() || self.0.has_changed().is_err()
    }
}

/// Runs a store call on a blocking thread, so that a store that waits (SQLite's lock, a
/// network) never stalls the async workers.
pub async fn blocking<T, F>(store: &Arc<dyn Store>, f: F) -> T
where
    T: Send + 'static,
    F: FnOnce(&dyn Store) -> T + Send + 'static,
{
    let store = Arc::clone(store);
    match tokio::task::spawn_blocking(move || f(&*store)).await {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// A file every log line is also appended to (`setpoint up` keeps `{data-dir}/up.log`).
static LOG_FILE: std::sync::OnceLock<std::sync::Mutex<std::fs::File>> = std::sync::OnceLock::new();

/// Also appends every log line of this process to `path`, from now on. Only the first call
/// takes effect.
pub fn log_to_file(path: &std::path::Path) -> std::io::Result<()> {
    // The log sits in the data directory, which holds the store: both are the owner's only.
    if let Some(dir) = path.parent() {
        crate::store::identity::create_private_dir(dir)?;
    }
    let file = crate::store::identity::open_private_append(path)?;
    let _ = LOG_FILE.set(std::sync::Mutex::new(file));
    Ok(())
}

/// Writes one log line at level info: wall-clock time, who, what. Through `tracing` when a
/// subscriber is installed ([`crate::logging::init`]: levels, filters, JSON), else straight to
/// stderr (and to the log file, if one was set with [`log_to_file`]).
pub fn log(who: &str, what: impl std::fmt::Display) {
    log_at(tracing::Level::INFO, who, &Fields::default(), what);
}

/// [`log`] at level warn: something failed or is refused, and the daemon carries on.
pub fn warn(who: &str, what: impl std::fmt::Display) {
    log_at(tracing::Level::WARN, who, &Fields::default(), what);
}

/// [`log`] at level debug: detail an operator asks for with `--log-level debug`.
pub fn debug(who: &str, what: impl std::fmt::Display) {
    log_at(tracing::Level::DEBUG, who, &Fields::default(), what);
}

/// The structured fields of a log line, where they are known. `node` (from `agent NODE`),
/// `workload` (from `loop WORKLOAD`) and `holder` (from `controller HOLDER`) are also taken
/// from `who` when not given.
#[derive(Clone, Copy, Debug, Default)]
pub struct Fields<'a> {
    /// The workload the line is about.
    pub workload: Option<&'a str>,
    /// The copy the line is about (`web-3`).
    pub copy: Option<&'a str>,
    /// The node the line is about.
    pub node: Option<&'a str>,
    /// The leader's fencing token (the revision of `/leader` when it was taken).
    pub fence: Option<u64>,
}

/// Writes one log line at `level` with `fields`. Without a subscriber every level is written, as
/// [`log`] always did: only [`crate::logging::init`] filters.
pub fn log_at(level: tracing::Level, who: &str, fields: &Fields<'_>, what: impl std::fmt::Display) {
    if !tracing::dispatcher::has_been_set() {
        let level = (level != tracing::Level::INFO).then(|| level.as_str());
        say(&crate::logging::text_line(
            crate::store::wall_ms(),
            level,
            who,
            &what.to_string(),
            &[],
        ));
        return;
    }
    let derived = crate::logging::from_who(who);
    let workload = fields.workload.or(derived.workload);
    let node = fields.node.or(derived.node);
    let holder = derived.holder;
    let copy = fields.copy;
    let fence = fields.fence;
    macro_rules! at {
        ($lvl:expr) => {
            tracing::event!(
                target: "setpoint",
                $lvl,
                who,
                workload,
                copy,
                node,
                holder,
                fence,
                "{what}"
            )
        };
    }
    match level {
        tracing::Level::ERROR => at!(tracing::Level::ERROR),
        tracing::Level::WARN => at!(tracing::Level::WARN),
        tracing::Level::INFO => at!(tracing::Level::INFO),
        tracing::Level::DEBUG => at!(tracing::Level::DEBUG),
        _ => at!(tracing::Level::TRACE),
    }
}

/// Writes `line` to stderr and the log file. It never panics and never blocks shutdown: a closed
/// pipe (`setpoint up 2>&1 | tee log` after Ctrl-C killed `tee`) only loses the line on stderr,
/// where `eprintln!` would panic the task that logs and skip its cleanup.
pub fn say(line: &str) {
    use std::io::Write;
    if let Some(f) = LOG_FILE.get() {
        if let Ok(mut f) = f.lock() {
            let _ = writeln!(f, "{line}");
        }
    }
    if !QUIET.load(std::sync::atomic::Ordering::Relaxed) {
        let _ = writeln!(std::io::stderr().lock(), "{line}");
    }
}

/// Whether [`say`] leaves stderr alone (the log file, if any, still gets every line).
static QUIET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// From now on, log lines go only to the log file (if one is set), not to stderr: for a command
/// that runs the runtime's parts inside it (`experiment lesson --real`) and prints its own
/// result, where hundreds of the parts' lines would bury it.
pub fn quiet_stderr(quiet: bool) {
    QUIET.store(quiet, std::sync::atomic::Ordering::Relaxed);
}
