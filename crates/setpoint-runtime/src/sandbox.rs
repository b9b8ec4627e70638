//! What a copy is given, and how the agent tells its own processes from anyone else's.
//!
//! - **A clean environment.** A copy gets only the variables its workload declares (`env`),
//!   those it names for passing through from the agent (`env_passthrough`), and setpoint's own
//!   (`SETPOINT_COPY`, `SETPOINT_WORKLOAD`, `SETPOINT_NODE`, `SETPOINT_AGENT`,
//!   `SETPOINT_NONCE`). A secret in the agent's environment never reaches a copy unless named.
//! - **Only stdin, stdout and stderr.** Every other descriptor the agent holds, including ones
//!   it inherited without close-on-exec, is marked close-on-exec before a copy starts.
//! - **The program is checked first.** A program that is not found on the agent's `PATH`, or
//!   not executable, is the copy's failure reason, in words, rather than an `exec` error code.
//! - **Proof of ownership.** Each copy gets a secret nonce, recorded in the agent's state file
//!   (mode 0600) before the process starts and passed in its environment. A process is the
//!   agent's own only if it is alive with the recorded start time, runs as the agent's user, and
//!   its `/proc/PID/environ` holds that nonce. Anyone can set `SETPOINT_AGENT` and
//!   `SETPOINT_COPY`; nobody else knows the nonce.

use std::ffi::OsString;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::rules::CopyEnv;

/// The environment variable holding a copy's secret nonce.
pub const ENV_NONCE: &str = "SETPOINT_NONCE";

/// The `PATH` searched when the agent has none (glibc's default).
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// A fresh secret nonce for one copy: 128 random bits, as hex.
pub fn new_nonce() -> String {
    crate::store::identity::random_hex(16)
}

/// The whole environment of a copy: its declared variables, the passed-through ones the agent
/// has, then setpoint's own `own` (which declarations cannot override: [`crate::rules`]
/// reserves their prefix).
pub fn copy_environment(env: &CopyEnv, own: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
    let mut out: Vec<(OsString, OsString)> =
        env.vars.iter().map(|(k, v)| (k.into(), v.into())).collect();
    for name in &env.passthrough {
        if let Some(v) = std::env::var_os(name) {
            out.push((name.into(), v));
        }
    }
    out.extend(own.iter().map(|(k, v)| (k.into(), v.into())));
    out
}

/// Finds the program a copy runs as `exec` would: a name with a `/` is a path; any other name is
/// looked up on the agent's `PATH`. Fails, in words, if it is not there or not executable.
pub fn resolve_program(program: &str) -> Result<PathBuf, String> {
    if program.contains('/') {
        let p = PathBuf::from(program);
        return executable(&p).map(|()| p);
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into());
    let mut last = None;
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(program);
        match executable(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(e) if candidate.exists() => last = Some(e),
            Err(_) => {}
        }
    }
    Err(last.unwrap_or_else(|| {
        format!(
            "program '{program}' not found on the agent's PATH ({})",
            path.to_string_lossy()
        )
    }))
}

fn executable(p: &Path) -> Result<(), String> {
    let shown = p.display();
    let m = std::fs::metadata(p).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("program '{shown}' not found on the agent"),
        _ => format!("program '{shown}': {e}"),
    })?;
    if !m.is_file() {
        return Err(format!("program '{shown}' is not a file"));
    }
    if m.permissions().mode() & 0o111 == 0 {
        return Err(format!(
            "program '{shown}' is not executable (mode {:o})",
            m.permissions().mode() & 0o7777
        ));
    }
    Ok(())
}

/// Marks every descriptor above stderr close-on-exec, so that a copy started next gets only
/// stdin, stdout and stderr, whatever the agent inherited or a library opened.
pub fn close_inherited_fds() {
    close_fds::set_fds_cloexec_threadsafe(3, &[]);
}

/// The user a process runs as (the owner of `/proc/PID`), if it exists.
pub fn process_uid(pid: u32) -> Option<u32> {
    std::fs::metadata(format!("/proc/{pid}"))
        .ok()
        .map(|m| m.uid())
}

/// The user this agent runs as.
pub fn own_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The value of `name` in the environment `pid` started with, if readable.
pub fn environ_var(pid: u32, name: &str) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|&b| b == 0).find_map(|v| {
        std::str::from_utf8(v)
            .ok()?
            .strip_prefix(name)?
            .strip_prefix('=')
            .map(str::to_owned)
    })
}

/// Whether `pid` is this agent's copy: alive since `start_ticks`, run by this agent's user, and
/// holding `nonce` in its environment. An empty nonce proves nothing.
pub fn proves_own(pid: u32, start_ticks: u64, nonce: &str) -> bool {
    !nonce.is_empty()
        && crate::process::is_alive(pid, start_ticks)
        && process_uid(pid) == Some(own_uid())
        && environ_var(pid, ENV_NONCE).as_deref() == Some(nonce)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_found_on_path_and_a_missing_or_unexecutable_one_is_named() {
        assert!(resolve_program("sh").unwrap().is_absolute());
        let e = resolve_program("no-such-program-setpoint").unwrap_err();
        assert!(e.contains("not found on the agent's PATH"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("script");
        std::fs::write(&f, "#!/bin/sh\n").unwrap();
        let e = resolve_program(f.to_str().unwrap()).unwrap_err();
        assert!(e.contains("not executable (mode 644)"), "{e}");
        let e = resolve_program("/no/such/file").unwrap_err();
        assert!(e.contains("not found on the agent"), "{e}");
    }

    #[test]
    fn a_copy_environment_holds_only_what_is_declared_passed_through_and_setpoints_own() {
        let mut env = CopyEnv::default();
        env.vars.insert("GREETING".into(), "hi".into());
        env.passthrough = vec!["PATH".into(), "SETPOINT_TEST_SURELY_UNSET".into()];
        let got = copy_environment(&env, &[("SETPOINT_COPY", "w-1")]);
        let names: Vec<_> = got
            .iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["GREETING", "PATH", "SETPOINT_COPY"]);
    }

    #[test]
    fn only_the_holder_of_the_nonce_is_proven_own() {
        let nonce = new_nonce();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env(ENV_NONCE, &nonce)
            .spawn()
            .unwrap();
        let pid = child.id();
        let start = crate::process::proc_stat(pid).unwrap().start_ticks;
        // `spawn` may return before the kernel has set up the new program's environment (the
        // descriptors that tell the parent close before the environment is laid out).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while environ_var(pid, ENV_NONCE).is_none() {
            assert!(std::time::Instant::now() < deadline, "no environment");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(proves_own(pid, start, &nonce));
        assert!(!proves_own(pid, start, &new_nonce()), "another nonce");
        assert!(!proves_own(pid, start + 1, &nonce), "another start time");
        assert!(!proves_own(pid, start, ""), "no nonce");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!proves_own(pid, start, &nonce), "dead");
    }
}
