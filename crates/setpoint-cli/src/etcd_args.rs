//! The flags that reach an etcd as deployed, beside `--store etcd+https://USER@…/PREFIX`: its
//! CA, a client certificate and key, and the user's password file. Every command that takes
//! `--store` takes them (`docs/runtime.md`, "The runtime on etcd").

use std::path::PathBuf;

use clap::Args;
use setpoint_runtime::store::{EtcdFiles, StoreUrl};

use crate::BadInput;

/// Parses `--store`: its error is the URL's own message, without clap's echo of the value (a
/// password typed into the URL by mistake is never repeated).
#[derive(Clone, Copy, Debug)]
pub struct StoreUrlParser;

impl clap::builder::TypedValueParser for StoreUrlParser {
    type Value = StoreUrl;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<StoreUrl, clap::Error> {
        let text = value.to_string_lossy();
        text.parse::<StoreUrl>().map_err(|e| {
            let flag = arg.map_or("--store".to_owned(), |a| format!("--{}", a.get_id()));
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("invalid value for {flag}: {e}\n"),
            )
            .with_cmd(cmd)
        })
    }
}

/// `--etcd-ca`, `--etcd-cert`, `--etcd-key`, `--etcd-password-file`.
#[derive(Clone, Debug, Default, Args)]
pub struct EtcdArgs {
    /// With --store etcd+https://…: the CA certificate (PEM) that signed etcd's server
    /// certificate.
    #[arg(long, value_name = "FILE")]
    pub etcd_ca: Option<PathBuf>,
    /// With --store etcd+https://…: this client's certificate (PEM), for an etcd that asks for
    /// one (--client-cert-auth); with --etcd-key.
    #[arg(long, value_name = "FILE")]
    pub etcd_cert: Option<PathBuf>,
    /// The key (PEM) of --etcd-cert.
    #[arg(long, value_name = "FILE")]
    pub etcd_key: Option<PathBuf>,
    /// With --store etcd://USER@…: a file whose first line is USER's password [default: the
    /// environment variable SETPOINT_ETCD_PASSWORD]. The password is never printed.
    #[arg(long, value_name = "FILE")]
    pub etcd_password_file: Option<PathBuf>,
}

impl EtcdArgs {
    /// `url` with these files; a bad input (exit 2) when they do not fit it.
    pub fn apply(&self, url: StoreUrl) -> anyhow::Result<StoreUrl> {
        let files = EtcdFiles {
            ca: self.etcd_ca.clone(),
            cert: self.etcd_cert.clone(),
            key: self.etcd_key.clone(),
            password_file: self.etcd_password_file.clone(),
        };
        let url = url
            .with_etcd_files(files)
            .map_err(|e| BadInput(e.to_string()))?;
        if let StoreUrl::Etcd(e) = &url {
            e.check().map_err(|e| BadInput(e.to_string()))?;
        }
        Ok(url)
    }
}
