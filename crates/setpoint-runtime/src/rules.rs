//! The rules every name, command and environment of a declaration obeys. `apply` checks them
//! before anything is written, and the agent checks them again on every assignment it reads
//! from the store and every record it reads from its state file, before a name reaches a path
//! or a command reaches `exec`: the store is a trust boundary (a networked store more so), and
//! a forged entry must be refused, not run.
//!
//! The limits and why:
//! - names: 1 to 40 characters of `a-z`, `0-9` and `-`, starting with a letter and not ending
//!   with `-` ([`check_name`]): they become file names (`logs/{copy}.log`) and key segments, so
//!   `/`, `.` and `..` can never appear;
//! - a copy's identity is exactly `{workload}-{n}` ([`check_assignment`]);
//! - commands: no NUL byte (`exec` cannot pass one; the argument would be cut short), no
//!   argument over [`MAX_ARG_STRLEN`] bytes (Linux refuses longer strings with `E2BIG`), and the
//!   whole argument list and environment within [`exec_limit`], the system's `ARG_MAX`;
//! - environment names: `[A-Za-z_][A-Za-z0-9_]*`, none starting with `SETPOINT_` (setpoint's own
//!   variables are set by the agent and cannot be overridden), values without NUL.

pub use crate::model::CopyEnv;
use crate::model::{copy_name, Assignment};

/// The longest workload or node name; copy identities add `-` and a number to it.
pub const MAX_NAME: usize = 40;
/// The longest single argument or environment string Linux's `exec` accepts, with its NUL
/// (`MAX_ARG_STRLEN`, 32 pages).
pub const MAX_ARG_STRLEN: usize = 32 * 4096;
/// The prefix of the environment variables the agent sets itself.
pub const RESERVED_ENV_PREFIX: &str = "SETPOINT_";
/// Room kept in the exec limit for setpoint's own variables and passed-through values, which
/// `apply` cannot see: 8 KiB.
pub const ENV_RESERVE: usize = 8 * 1024;

/// Checks a workload or node name: 1 to 40 characters of `a-z`, `0-9` and `-`, starting with a
/// letter and not ending with `-`.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "'{}' is not a valid name: accepted 1 to {MAX_NAME} characters of a-z, 0-9 and '-', starting with a letter and not ending with '-'",
            name.escape_debug()
        ))
    }
}

/// The system's limit on the bytes of `exec`'s arguments and environment together: what
/// `sysconf(_SC_ARG_MAX)` returns on Linux (glibc): a quarter of the stack limit, at least
/// 128 KiB, and at most 6 MiB, the kernel's own cap (three quarters of its 8 MiB stack
/// reference).
pub fn exec_limit() -> usize {
    const LEGACY: usize = 128 * 1024;
    const KERNEL_CAP: usize = 6 * 1024 * 1024;
    let stack = rustix::process::getrlimit(rustix::process::Resource::Stack).current;
    let quarter = stack.map_or(KERNEL_CAP, |s| usize::try_from(s / 4).unwrap_or(KERNEL_CAP));
    quarter.clamp(LEGACY, KERNEL_CAP)
}

/// What `exec` counts for a list of strings: each string with its NUL, and a pointer.
fn exec_bytes<'a>(strings: impl Iterator<Item = &'a str>) -> usize {
    strings
        .map(|s| s.len() + 1 + std::mem::size_of::<usize>())
        .sum()
}

/// Checks a program and its arguments: not empty, no NUL byte, no argument over
/// [`MAX_ARG_STRLEN`], and within the exec limit together with `env`.
pub fn check_command(argv: &[String], env: &CopyEnv) -> Result<(), String> {
    if argv.first().is_none_or(|p| p.trim().is_empty()) {
        return Err("it is empty: give a program and its arguments".into());
    }
    if let Some(i) = argv.iter().position(|a| a.contains('\0')) {
        return Err(format!(
            "argument {i} holds a NUL byte, which no program can receive: remove it"
        ));
    }
    if let Some(i) = argv.iter().position(|a| a.len() + 1 > MAX_ARG_STRLEN) {
        return Err(format!(
            "argument {i} is {} bytes: accepted at most {} bytes per argument (the system's exec limit)",
            argv[i].len(),
            MAX_ARG_STRLEN - 1
        ));
    }
    // Each variable is one `NAME=value` string.
    let env_bytes: usize = env
        .vars
        .iter()
        .map(|(k, v)| k.len() + 1 + v.len() + 1 + std::mem::size_of::<usize>())
        .sum();
    let total = exec_bytes(argv.iter().map(String::as_str)) + env_bytes + ENV_RESERVE;
    let limit = exec_limit();
    if total > limit {
        return Err(format!(
            "the arguments and environment need {total} bytes: accepted at most {limit} (the system's exec limit, ARG_MAX, with {ENV_RESERVE} kept for setpoint's variables)"
        ));
    }
    Ok(())
}

/// Checks one environment variable name.
pub fn check_env_name(name: &str) -> Result<(), String> {
    let ok = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ok {
        return Err(format!(
            "'{}' is not a valid variable name: accepted letters, digits and '_', not starting with a digit",
            name.escape_debug()
        ));
    }
    if name.starts_with(RESERVED_ENV_PREFIX) {
        return Err(format!(
            "'{name}' starts with {RESERVED_ENV_PREFIX}, which is setpoint's own: choose another name"
        ));
    }
    Ok(())
}

/// Checks a declared environment: names by [`check_env_name`], values without NUL.
pub fn check_env(env: &CopyEnv) -> Result<(), String> {
    for (k, v) in &env.vars {
        check_env_name(k)?;
        if v.contains('\0') {
            return Err(format!(
                "the value of {k} holds a NUL byte, which no program can receive: remove it"
            ));
        }
    }
    for k in &env.passthrough {
        check_env_name(k)?;
    }
    Ok(())
}

/// Checks an assignment read from the store or a state file by the rules `apply` uses, and
/// that it is for `node`. A forged or damaged entry fails with the reason.
pub fn check_assignment(a: &Assignment, node: &str) -> Result<(), String> {
    check_name(&a.workload).map_err(|e| format!("workload: {e}"))?;
    if a.copy != copy_name(&a.workload, a.n) {
        return Err(format!(
            "copy '{}' is not named {{workload}}-{{n}} ('{}')",
            a.copy.escape_debug(),
            copy_name(&a.workload, a.n)
        ));
    }
    if a.node != node {
        return Err(format!(
            "it is for node '{}', not this node '{node}'",
            a.node.escape_debug()
        ));
    }
    check_env(&a.env).map_err(|e| format!("env: {e}"))?;
    check_command(&a.command, &a.env).map_err(|e| format!("command: {e}"))?;
    if let Some(r) = &a.readiness {
        check_command(r, &a.env).map_err(|e| format!("readiness: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn commands_with_nul_bytes_or_over_the_exec_limit_are_refused() {
        let env = CopyEnv::default();
        assert!(check_command(&argv(&["sleep", "1"]), &env).is_ok());
        assert!(check_command(&argv(&["sl\0eep"]), &env)
            .unwrap_err()
            .contains("NUL"));
        assert!(check_command(&[], &env).unwrap_err().contains("empty"));
        let long = "x".repeat(MAX_ARG_STRLEN);
        assert!(check_command(&argv(&["echo", &long]), &env)
            .unwrap_err()
            .contains("per argument"));
        let fits = "x".repeat(MAX_ARG_STRLEN - 1);
        let many: Vec<String> =
            std::iter::repeat_n(fits, exec_limit() / MAX_ARG_STRLEN + 1).collect();
        assert!(check_command(&many, &env).unwrap_err().contains("ARG_MAX"));
    }

    #[test]
    fn the_exec_limit_is_a_quarter_of_the_stack_within_the_kernels_bounds() {
        let l = exec_limit();
        assert!((128 * 1024..=6 * 1024 * 1024).contains(&l), "{l}");
    }

    #[test]
    fn environment_names_are_checked_and_setpoints_own_are_reserved() {
        let mut env = CopyEnv::default();
        env.vars.insert("GREETING".into(), "hi".into());
        assert!(check_env(&env).is_ok());
        env.passthrough.push("SETPOINT_COPY".into());
        assert!(check_env(&env).unwrap_err().contains("setpoint's own"));
        env.passthrough = vec!["A=B".into()];
        assert!(check_env(&env).is_err());
        env.passthrough.clear();
        env.vars.insert("X".into(), "a\0b".into());
        assert!(check_env(&env).unwrap_err().contains("NUL"));
    }

    #[test]
    fn a_forged_assignment_is_refused_with_its_reason() {
        let good = Assignment {
            copy: "w-1".into(),
            workload: "w".into(),
            owner_uid: 1,
            n: 1,
            node: "a".into(),
            command: argv(&["sleep", "1"]),
            startup_ms: 0,
            readiness: None,
            grace_ms: 0,
            created_ms: 0,
            env: CopyEnv::default(),
            generation: 0,
            cut_off: Default::default(),
            heartbeat: false,
        };
        assert!(check_assignment(&good, "a").is_ok());
        for (a, why) in [
            (
                Assignment {
                    copy: "../../../escaped".into(),
                    ..good.clone()
                },
                "not named",
            ),
            (
                Assignment {
                    workload: "../x".into(),
                    ..good.clone()
                },
                "not a valid name",
            ),
            (
                Assignment {
                    command: argv(&["sh", "-c", "a\0b"]),
                    ..good.clone()
                },
                "NUL",
            ),
            (good.clone(), "not this node"),
        ] {
            let node = if why == "not this node" { "b" } else { "a" };
            assert!(
                check_assignment(&a, node).unwrap_err().contains(why),
                "{why}"
            );
        }
    }
}
