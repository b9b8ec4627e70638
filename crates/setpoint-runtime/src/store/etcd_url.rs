//! An etcd cluster as deployed, named by one URL plus the files it needs:
//! `etcd[+https]://[USER@]HOST:PORT[,HOST:PORT...][/PREFIX]`.
//!
//! - `etcd://` speaks plain HTTP; `etcd+https://` speaks TLS, checking etcd's certificate
//!   against the CA given with `--etcd-ca FILE` (required: etcd's certificates are signed by a
//!   cluster's own CA, not a public one), and presenting a client certificate if
//!   `--etcd-cert FILE --etcd-key FILE` are given (etcd's `--client-cert-auth`).
//! - `USER@` logs in as an etcd user. The password is never part of the URL, which shows in
//!   `ps`, in shell histories and in logs: it is read from `--etcd-password-file FILE` (its
//!   first line) or else from the environment variable `SETPOINT_ETCD_PASSWORD`, and is never
//!   printed, logged or shown in an error.
//! - `/PREFIX` puts every key setpoint writes under that prefix (`/team-a/workloads/…`), so
//!   that several clusters share one etcd without seeing each other ([`super::Namespaced`]);
//!   an etcd role that grants only that prefix is enough to run one.

use std::fmt;
use std::path::{Path, PathBuf};

use super::etcd::{EtcdAccess, EtcdTls};

/// The environment variable a password is read from when no `--etcd-password-file` is given.
pub const PASSWORD_ENV: &str = "SETPOINT_ETCD_PASSWORD";

/// An etcd cluster as a store URL names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdUrl {
    /// The client endpoints, `host:port`.
    pub endpoints: Vec<String>,
    /// `etcd+https://`: speak TLS.
    pub https: bool,
    /// The etcd user to log in as, if any.
    pub user: Option<String>,
    /// The prefix every key lives under, such as `/team-a` (no trailing `/`); `None`: keys at
    /// the root.
    pub prefix: Option<String>,
    /// The files the URL itself does not carry (certificates, the password file).
    pub files: EtcdFiles,
}

/// The files an etcd URL needs beside it, from `--etcd-ca`, `--etcd-cert`, `--etcd-key` and
/// `--etcd-password-file`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EtcdFiles {
    /// The CA that signed etcd's server certificate (PEM).
    pub ca: Option<PathBuf>,
    /// This client's certificate (PEM), for an etcd that asks for one.
    pub cert: Option<PathBuf>,
    /// The key of `cert` (PEM).
    pub key: Option<PathBuf>,
    /// A file whose first line is the user's password.
    pub password_file: Option<PathBuf>,
}

impl EtcdFiles {
    /// Whether no file is given.
    pub fn is_empty(&self) -> bool {
        *self == EtcdFiles::default()
    }
}

/// `url` with the password of a `USER:PASSWORD@` replaced by `***`, for error messages: a
/// password typed into a URL by mistake is refused, never repeated.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, hosts)) if userinfo.contains(':') => {
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{hosts}{path}")
        }
        _ => url.to_owned(),
    }
}

/// Parses what follows `etcd://` or `etcd+https://`; `Err` says what is wrong.
pub(super) fn parse(rest: &str, https: bool) -> Result<EtcdUrl, String> {
    let (authority, path) = match rest.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (rest, None),
    };
    let (user, hosts) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let user = user
        .map(|u| {
            if u.contains(':') {
                return Err(format!(
                    "a password in the URL would show in `ps` and in logs: give the user \
                     alone ({}@…) and the password in --etcd-password-file FILE or \
                     {PASSWORD_ENV}",
                    u.split(':').next().unwrap_or_default()
                ));
            }
            if u.is_empty()
                || !u
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
            {
                return Err(format!(
                    "user '{u}' is not letters, digits, '.', '-' and '_'"
                ));
            }
            Ok(u.to_owned())
        })
        .transpose()?;
    if hosts.is_empty() {
        return Err("no endpoint".into());
    }
    let endpoints = hosts
        .split(',')
        .map(endpoint)
        .collect::<Result<Vec<_>, _>>()?;
    let prefix = path.map(prefix).transpose()?.flatten();
    Ok(EtcdUrl {
        endpoints,
        https,
        user,
        prefix,
        files: EtcdFiles::default(),
    })
}

fn endpoint(e: &str) -> Result<String, String> {
    let (host, port) = e
        .rsplit_once(':')
        .ok_or_else(|| format!("endpoint '{e}' has no :PORT"))?;
    if host.is_empty()
        || !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '[' | ']' | ':'))
    {
        return Err(format!("endpoint '{e}' has no valid host"));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(format!("{host}:{p}")),
        _ => Err(format!("endpoint '{e}' has port '{port}', not 1-65535")),
    }
}

/// The key prefix of a URL's path: `a/b/` is `/a/b`; an empty path is none.
fn prefix(path: &str) -> Result<Option<String>, String> {
    let trimmed = path.strip_suffix('/').unwrap_or(path);
    if trimmed.is_empty() {
        return Ok(None);
    }
    for segment in trimmed.split('/') {
        let ok = !segment.is_empty()
            && segment != "."
            && segment != ".."
            && segment
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
        if !ok {
            return Err(format!(
                "key prefix '/{path}' is not segments of letters, digits, '.', '-' and '_' \
                 separated by '/'"
            ));
        }
    }
    Ok(Some(format!("/{trimmed}")))
}

impl fmt::Display for EtcdUrl {
    /// The URL as given (normalised), without the files: nothing secret is in it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.https {
            "etcd+https://"
        } else {
            "etcd://"
        })?;
        if let Some(u) = &self.user {
            write!(f, "{u}@")?;
        }
        f.write_str(&self.endpoints.join(","))?;
        if let Some(p) = &self.prefix {
            f.write_str(p)?;
        }
        Ok(())
    }
}

/// What is wrong with an etcd URL and its files together, or with a file: the user must change
/// the command.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AccessError(pub String);

impl EtcdUrl {
    /// Checks that the URL and its files go together: TLS files with `etcd+https://` only, a
    /// CA for every `etcd+https://`, a certificate with its key, a password file with a user.
    pub fn check(&self) -> Result<(), AccessError> {
        let f = &self.files;
        let bad = |m: String| Err(AccessError(m));
        if !self.https && (f.ca.is_some() || f.cert.is_some() || f.key.is_some()) {
            return bad(format!(
                "--etcd-ca, --etcd-cert and --etcd-key speak TLS: use etcd+https://{} instead \
                 of etcd://",
                self.to_string().trim_start_matches("etcd://")
            ));
        }
        if self.https && f.ca.is_none() {
            return bad(format!(
                "{self} needs --etcd-ca FILE: the CA certificate (PEM) that signed etcd's \
                 server certificate"
            ));
        }
        if f.cert.is_some() != f.key.is_some() {
            return bad("--etcd-cert and --etcd-key go together: give both or neither".into());
        }
        if f.password_file.is_some() && self.user.is_none() {
            return bad(format!(
                "--etcd-password-file needs a user in the URL: etcd://USER@{}",
                self.endpoints.join(",")
            ));
        }
        Ok(())
    }

    /// The client endpoints with their scheme, as the client dials them.
    pub fn dial(&self) -> Vec<String> {
        let scheme = if self.https { "https" } else { "http" };
        self.endpoints
            .iter()
            .map(|e| format!("{scheme}://{e}"))
            .collect()
    }

    /// Reads the files and the password: what the client needs to connect. `env` reads an
    /// environment variable (the process's in production, a map in tests).
    pub fn access(&self, env: impl Fn(&str) -> Option<String>) -> Result<EtcdAccess, AccessError> {
        self.check()?;
        let f = &self.files;
        let tls = match &f.ca {
            Some(ca) => Some(EtcdTls {
                ca: read(ca, "--etcd-ca")?,
                identity: match (&f.cert, &f.key) {
                    (Some(c), Some(k)) => Some((read(c, "--etcd-cert")?, read(k, "--etcd-key")?)),
                    _ => None,
                },
            }),
            None => None,
        };
        let user = match &self.user {
            None => None,
            Some(u) => {
                let password = match &f.password_file {
                    Some(p) => first_line(&read(p, "--etcd-password-file")?),
                    None => env(PASSWORD_ENV).ok_or_else(|| {
                        AccessError(format!(
                            "etcd user '{u}' needs a password: --etcd-password-file FILE, or \
                             the environment variable {PASSWORD_ENV}"
                        ))
                    })?,
                };
                Some((u.clone(), password))
            }
        };
        Ok(EtcdAccess {
            tls,
            user,
            probe_prefix: self.prefix.clone().unwrap_or_default(),
        })
    }
}

fn read(path: &Path, flag: &str) -> Result<Vec<u8>, AccessError> {
    std::fs::read(path).map_err(|e| AccessError(format!("{flag} {}: {e}", path.display())))
}

/// The first line of a password file, without its line ending.
fn first_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.lines().next().unwrap_or_default().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> EtcdUrl {
        let (rest, https) = match text.strip_prefix("etcd+https://") {
            Some(r) => (r, true),
            None => (text.strip_prefix("etcd://").unwrap(), false),
        };
        parse(rest, https).unwrap()
    }

    #[test]
    fn users_tls_and_prefixes_parse_and_print_back() {
        let u = url("etcd+https://admin@h1:2379,10.0.0.2:2380/team-a/prod");
        assert!(u.https);
        assert_eq!(u.user.as_deref(), Some("admin"));
        assert_eq!(u.prefix.as_deref(), Some("/team-a/prod"));
        assert_eq!(u.endpoints, ["h1:2379", "10.0.0.2:2380"]);
        assert_eq!(u.dial(), ["https://h1:2379", "https://10.0.0.2:2380"]);
        assert_eq!(
            u.to_string(),
            "etcd+https://admin@h1:2379,10.0.0.2:2380/team-a/prod"
        );
        // A trailing slash, or a bare one, changes nothing.
        assert_eq!(url("etcd://h:1/a/").prefix.as_deref(), Some("/a"));
        assert_eq!(url("etcd://h:1/").prefix, None);
        assert_eq!(url("etcd://h:1/").to_string(), "etcd://h:1");
    }

    #[test]
    fn a_password_typed_into_a_url_is_refused_and_never_repeated() {
        assert_eq!(redact("etcd://root:hunter2@h:1/p"), "etcd://root:***@h:1/p");
        assert_eq!(redact("etcd://root@h:1"), "etcd://root@h:1");
        assert_eq!(redact("sqlite:dir"), "sqlite:dir");
        let e = "etcd+https://root:hunter2@h:1"
            .parse::<crate::store::StoreUrl>()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a password in the URL") && !e.contains("hunter2"),
            "{e}"
        );
    }

    #[test]
    fn the_files_must_fit_the_url() {
        let with = |text: &str, files: EtcdFiles| {
            let mut u = url(text);
            u.files = files;
            u.check().map_err(|e| e.0)
        };
        let ca = || Some(PathBuf::from("ca.pem"));
        assert!(with("etcd://h:1", EtcdFiles::default()).is_ok());
        let e = with("etcd+https://h:1", EtcdFiles::default()).unwrap_err();
        assert!(e.contains("needs --etcd-ca"), "{e}");
        let e = with(
            "etcd://h:1",
            EtcdFiles {
                ca: ca(),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(e.contains("use etcd+https://h:1"), "{e}");
        let e = with(
            "etcd+https://h:1",
            EtcdFiles {
                ca: ca(),
                cert: Some("c.pem".into()),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(e.contains("go together"), "{e}");
        let e = with(
            "etcd://h:1",
            EtcdFiles {
                password_file: Some("pw".into()),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(e.contains("etcd://USER@h:1"), "{e}");
    }

    #[test]
    fn the_password_comes_from_its_file_or_the_environment_and_never_shows() {
        let dir = tempfile::tempdir().unwrap();
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "s3cret\n").unwrap();
        let mut u = url("etcd://root@h:1");
        let none = |_: &str| None;
        let e = u.access(none).unwrap_err().0;
        assert!(
            e.contains(PASSWORD_ENV) && e.contains("--etcd-password-file"),
            "{e}"
        );
        let env = |k: &str| (k == PASSWORD_ENV).then(|| "from-env".to_owned());
        assert_eq!(u.access(env).unwrap().user.unwrap().1, "from-env");
        u.files.password_file = Some(pw);
        let access = u.access(env).unwrap();
        assert_eq!(access.user.as_ref().unwrap().1, "s3cret", "the file wins");
        assert!(!format!("{access:?}").contains("s3cret"));
        assert!(!u.to_string().contains("s3cret"));
        u.files.password_file = Some(dir.path().join("missing"));
        let e = u.access(env).unwrap_err().0;
        assert!(
            e.starts_with("--etcd-password-file ") && e.contains("missing"),
            "{e}"
        );
    }
}
