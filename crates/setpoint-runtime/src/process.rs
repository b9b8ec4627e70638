//! Real processes: spawning a copy in its own process group, signalling groups, and telling a
//! live process from a dead one or from a later process that reuses its pid (Linux `/proc`).

use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use rustix::process::{kill_process_group, Pid, Signal};

use crate::rules::CopyEnv;
use crate::sandbox;
pub use crate::sandbox::ENV_NONCE;

/// The environment variable that tells a copy its identity, e.g. `collector-3`.
pub const ENV_COPY: &str = "SETPOINT_COPY";
/// The environment variable naming the copy's workload.
pub const ENV_WORKLOAD: &str = "SETPOINT_WORKLOAD";
/// The environment variable naming the copy's node.
pub const ENV_NODE: &str = "SETPOINT_NODE";
/// The environment variable marking which agent started the copy: its state file's path. An
/// agent that restarts finds copies it left behind by this mark, even those it had no time to
/// record.
pub const ENV_AGENT: &str = "SETPOINT_AGENT";

/// What `/proc/PID/stat` says about a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// The state letter: `R`, `S`, `Z` (zombie), …
    pub state: char,
    /// The process group.
    pub pgid: u32,
    /// Start time in clock ticks since boot.
    pub start_ticks: u64,
}

/// Reads `/proc/PID/stat`; `None` if there is no such process.
pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: the fields after it start
    // after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(ProcStat {
        state: fields.first()?.chars().next()?,
        pgid: fields.get(2)?.parse().ok()?,
        start_ticks: fields.get(19)?.parse().ok()?,
    })
}

/// Whether `pid` is still the process that started at `start_ticks` and has not ended (a zombie
/// has ended).
pub fn is_alive(pid: u32, start_ticks: u64) -> bool {
    proc_stat(pid).is_some_and(|s| s.start_ticks == start_ticks && !matches!(s.state, 'Z' | 'X'))
}

/// Sends `signal` to every process of group `pgid`. A group that no longer exists is not an
/// error.
pub fn signal_group(pgid: u32, signal: Signal) -> io::Result<()> {
    let Some(pid) = i32::try_from(pgid).ok().and_then(Pid::from_raw) else {
        return Ok(());
    };
    match kill_process_group(pid, signal) {
        Ok(()) => Ok(()),
        Err(e) if e == rustix::io::Errno::SRCH => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Sends SIGKILL to group `pgid` only if its leader is still the process that started at
/// `start_ticks`, so a reused pid is never hit. Returns whether the signal was sent.
pub fn kill_verified(pgid: u32, start_ticks: u64) -> io::Result<bool> {
    if !is_alive(pgid, start_ticks) {
        return Ok(false);
    }
    signal_group(pgid, Signal::KILL)?;
    Ok(true)
}

/// Everything needed to start one copy.
#[derive(Clone, Debug)]
pub struct Launch<'a> {
    /// Program and arguments.
    pub command: &'a [String],
    /// The copy's identity.
    pub copy: &'a str,
    /// Its workload.
    pub workload: &'a str,
    /// Its node.
    pub node: &'a str,
    /// The agent's mark (see [`ENV_AGENT`]).
    pub agent_mark: &'a str,
    /// The copy's secret nonce (see [`ENV_NONCE`]), already recorded in the state file.
    pub nonce: &'a str,
    /// The copy's declared environment; nothing else of the agent's is passed.
    pub env: &'a CopyEnv,
    /// Its log: standard output and error go to this log's FIFO, which
    /// [`crate::copy_output::follow_pipe`] reads into it.
    pub log: &'a Path,
}

/// Starts a copy as the leader of a new process group, with a clean environment (its declared
/// variables and its identity, see [`crate::sandbox`]), stdin closed and no descriptor but
/// stdin, stdout and stderr; stdout and stderr are the log's FIFO ([`crate::copy_output`]),
/// which the caller then follows. Returns the child and its start time. A program that is not found
/// or not executable fails with [`io::ErrorKind::NotFound`] and the reason in words.
pub fn spawn_copy(l: &Launch<'_>) -> io::Result<(Child, u64)> {
    let (program, args) = l
        .command
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty command"))?;
    let path = sandbox::resolve_program(program)
        .map_err(|why| io::Error::new(io::ErrorKind::NotFound, why))?;
    let out = crate::copy_output::make_pipe(l.log)?;
    let err = out.try_clone()?;
    let env = sandbox::copy_environment(
        l.env,
        &[
            (ENV_COPY, l.copy),
            (ENV_WORKLOAD, l.workload),
            (ENV_NODE, l.node),
            (ENV_AGENT, l.agent_mark),
            (ENV_NONCE, l.nonce),
        ],
    );
    sandbox::close_inherited_fds();
    let child = Command::new(path)
        .arg0(program)
        .args(args)
        .env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()?;
    // Until it is reaped, the child's pid cannot be reused, so this reads the right process.
    let start_ticks = proc_stat(child.id()).map_or(0, |s| s.start_ticks);
    Ok((child, start_ticks))
}

/// Runs a readiness command for a copy, in its own process group, output discarded, with the
/// copy's declared environment and its identity only.
pub fn spawn_check(command: &[String], copy: &str, env: &CopyEnv) -> io::Result<Child> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty command"))?;
    let path = sandbox::resolve_program(program)
        .map_err(|why| io::Error::new(io::ErrorKind::NotFound, why))?;
    sandbox::close_inherited_fds();
    Command::new(path)
        .arg0(program)
        .args(args)
        .env_clear()
        .envs(sandbox::copy_environment(env, &[(ENV_COPY, copy)]))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
}

/// A process group leader found in `/proc` carrying an agent's mark.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Marked {
    /// Its pid, which is its process group.
    pub pid: u32,
    /// Its start time.
    pub start_ticks: u64,
    /// The identity in its `SETPOINT_COPY`.
    pub copy: String,
    /// The nonce in its `SETPOINT_NONCE`, if any: only the agent's own copies hold one it
    /// recorded.
    pub nonce: Option<String>,
    /// The user it runs as.
    pub uid: u32,
}

/// Finds the live process group leaders whose environment carries `SETPOINT_AGENT=mark`.
/// Processes of other users, which cannot be read, are skipped.
pub fn find_marked(mark: &str) -> Vec<Marked> {
    let want = format!("{ENV_AGENT}={mark}");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(env) = std::fs::read(PathBuf::from("/proc").join(pid.to_string()).join("environ"))
        else {
            continue;
        };
        let vars: Vec<&[u8]> = env.split(|&b| b == 0).collect();
        if !vars.contains(&want.as_bytes()) {
            continue;
        }
        let var = |name: &str| {
            vars.iter().find_map(|v| {
                std::str::from_utf8(v)
                    .ok()?
                    .strip_prefix(name)?
                    .strip_prefix('=')
                    .map(str::to_owned)
            })
        };
        match (var(ENV_COPY), proc_stat(pid), sandbox::process_uid(pid)) {
            (Some(copy), Some(s), Some(uid)) if s.pgid == pid && !matches!(s.state, 'Z' | 'X') => {
                found.push(Marked {
                    pid,
                    start_ticks: s.start_ticks,
                    copy,
                    nonce: var(ENV_NONCE),
                    uid,
                })
            }
            _ => {}
        }
    }
    found.sort_by_key(|m| m.pid);
    found
}

/// Describes how a child ended: `exit status 0`, `signal 9`.
pub fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "ended".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spawned_copy_leads_its_own_group_knows_its_identity_and_dies_with_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let cmd = [
            "sh".to_owned(),
            "-c".into(),
            "echo $SETPOINT_COPY; exec sleep 30".into(),
        ];
        let log = dir.path().join("c.log");
        let mark = format!("test-{}", std::process::id());
        let (mut child, start) = spawn_copy(&Launch {
            command: &cmd,
            copy: "w-7",
            workload: "w",
            node: "n",
            agent_mark: &mark,
            nonce: "n0nce",
            env: &CopyEnv::default(),
            log: &log,
        })
        .unwrap();
        let output =
            crate::copy_output::follow_pipe(&log, crate::copy_output::LogLimits::default())
                .unwrap();
        let pid = child.id();
        assert_eq!(proc_stat(pid).unwrap().pgid, pid);
        assert!(is_alive(pid, start));
        assert!(
            !is_alive(pid, start + 1),
            "another start time is another process"
        );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::fs::read_to_string(&log).unwrap_or_default() != "w-7\n" {
            assert!(std::time::Instant::now() < deadline);
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // The shell may still be in its `exec` (its environ unreadable for that moment), so
        // wait until the process is found at all, then check what is found.
        while find_marked(&mark).is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "never found by its mark"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(
            find_marked(&mark),
            [Marked {
                pid,
                start_ticks: start,
                copy: "w-7".into(),
                nonce: Some("n0nce".into()),
                uid: sandbox::own_uid(),
            }]
        );
        assert!(kill_verified(pid, start).unwrap());
        assert_eq!(describe_exit(child.wait().unwrap()), "signal 9");
        assert!(!is_alive(pid, start));
        assert!(find_marked(&mark).is_empty());
        output.join().unwrap();
    }
}
