//! Real etcd clusters for tests, on loopback or inside network namespaces: see
//! [`EtcdCluster`].

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::store::etcd::{EtcdAccess, EtcdOptions, EtcdStore};
use crate::store::{EtcdFiles, Store, StoreUrl};

/// Ports handed out to clusters of this process and not yet given back.
static TAKEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// How to start a cluster.
#[derive(Clone, Debug)]
pub struct EtcdClusterConfig {
    /// How many members.
    pub members: usize,
    /// The ports to choose from.
    pub ports: Range<u16>,
    /// Each member's IP address (it listens there); default 127.0.0.1 for all.
    pub hosts: Vec<String>,
    /// A command prefix per member, such as `["ip", "netns", "exec", "ns1"]`; empty for none.
    /// The prefix must `exec` etcd, so that the child's pid is etcd's.
    pub wrap: Vec<Vec<String>>,
    /// etcd's heartbeat interval and election timeout, in milliseconds.
    pub heartbeat_ms: u64,
    /// See `heartbeat_ms`. The minimum lease TTL is 1.5 election timeouts, rounded up to seconds.
    pub election_ms: u64,
    /// Client TLS (client certificates required) and auth (user `root`), as deployed; plain
    /// HTTP without auth if `false`.
    pub secure: bool,
    /// etcd's backend quota (`--quota-backend-bytes`); `None` leaves etcd's default (2 GiB).
    /// A small one shows what a full etcd does, as a full disk shows SQLite's.
    pub quota_bytes: Option<u64>,
}

impl EtcdClusterConfig {
    /// `members` members on loopback, ports 23100–23199, heartbeat 50 ms, election 500 ms
    /// (so leases of 1 s are honoured, and a loaded machine does not trigger elections).
    pub fn loopback(members: usize) -> Self {
        Self {
            members,
            ports: 23100..23200,
            hosts: vec!["127.0.0.1".into(); members],
            wrap: vec![Vec::new(); members],
            heartbeat_ms: 50,
            election_ms: 500,
            secure: false,
            quota_bytes: None,
        }
    }

    /// As [`EtcdClusterConfig::loopback`], with etcd's own timing (heartbeat 100 ms, election
    /// 1 s, its defaults): for tests of what a member's stall costs, where the time the others
    /// take to elect a new leader is part of what is measured.
    pub fn stock_timing(members: usize) -> Self {
        Self {
            heartbeat_ms: 100,
            election_ms: 1_000,
            ..Self::loopback(members)
        }
    }

    /// As [`EtcdClusterConfig::loopback`], with client TLS and auth on.
    pub fn secure_loopback(members: usize) -> Self {
        Self {
            secure: true,
            ..Self::loopback(members)
        }
    }
}

/// The password of the secure clusters' `root` user (in the file [`EtcdCluster::files`] names).
const ROOT_PASSWORD: &str = "setpoint-test-root";

/// One member of a test cluster.
#[derive(Debug)]
struct Member {
    name: String,
    host: String,
    client_port: u16,
    peer_port: u16,
    wrap: Vec<String>,
    child: Option<Child>,
}

/// A running etcd cluster; every member is killed by pid (and its data removed) on drop.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<Member>,
    dir: PathBuf,
    initial_cluster: String,
    token: String,
    cfg: EtcdClusterConfig,
    /// Whether auth has been turned on (after the first start of a secure cluster).
    auth_on: bool,
}

/// Why etcd cannot be used here, if it cannot: it must be on `PATH`.
pub fn etcd_missing() -> Option<String> {
    match Command::new("etcd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(s) if s.success() => None,
        Ok(s) => Some(format!("`etcd --version` failed ({s})")),
        Err(e) => Some(format!(
            "etcd is not on PATH ({e}); install Debian's etcd-server to run this test"
        )),
    }
}

fn take_ports(range: &Range<u16>, n: usize) -> Result<Vec<u16>, String> {
    let mut taken = TAKEN.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = Vec::new();
    // Start at a place that depends on the process, so that two test processes running at once
    // rarely try the same ports first.
    let len = range.end.saturating_sub(range.start).max(1);
    let offset = (std::process::id() % u32::from(len)) as u16;
    for i in 0..len {
        let p = range.start + (offset + i) % len;
        if taken.contains(&p) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", p)).is_ok() {
            out.push(p);
            if out.len() == n {
                taken.extend(out.iter().copied());
                return Ok(out);
            }
        }
    }
    Err(format!(
        "no {n} free ports in {}..{} for etcd",
        range.start, range.end
    ))
}

impl EtcdCluster {
    /// Starts a loopback cluster of `members`, or prints why `test` skips and returns `None`
    /// when etcd is not installed. A cluster that fails to start is a test failure (panic).
    pub fn start_or_skip(test: &str, members: usize) -> Option<Self> {
        Self::start_or_skip_with(test, &EtcdClusterConfig::loopback(members))
    }

    /// [`EtcdCluster::start_or_skip`] with `cfg`.
    pub fn start_or_skip_with(test: &str, cfg: &EtcdClusterConfig) -> Option<Self> {
        if let Some(why) = etcd_missing() {
            eprintln!("{test}: skipped: {why}");
            return None;
        }
        match Self::start(cfg) {
            Ok(c) => Some(c),
            Err(e) => panic!("{test}: cannot start etcd: {e}"),
        }
    }

    /// Starts a cluster and waits until it has a leader (at most 20 s).
    pub fn start(cfg: &EtcdClusterConfig) -> Result<Self, String> {
        let ports = take_ports(&cfg.ports, cfg.members * 2)?;
        let dir =
            std::env::temp_dir().join(format!("setpoint-etcd-{}-{}", std::process::id(), ports[0]));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let members: Vec<Member> = (0..cfg.members)
            .map(|i| Member {
                name: format!("m{i}"),
                host: cfg
                    .hosts
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| "127.0.0.1".into()),
                client_port: ports[2 * i],
                peer_port: ports[2 * i + 1],
                wrap: cfg.wrap.get(i).cloned().unwrap_or_default(),
                child: None,
            })
            .collect();
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}=http://{}:{}", m.name, m.host, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Self {
            members,
            token: format!("setpoint-{}-{}", std::process::id(), ports[0]),
            dir,
            initial_cluster,
            cfg: cfg.clone(),
            auth_on: false,
        };
        if cfg.secure {
            let hosts: Vec<String> = cluster.members.iter().map(|m| m.host.clone()).collect();
            make_certificates(&cluster.dir, &hosts)?;
            std::fs::write(cluster.dir.join("password"), format!("{ROOT_PASSWORD}\n"))
                .map_err(|e| format!("writing the password file: {e}"))?;
        }
        for i in 0..cluster.members.len() {
            cluster.spawn(i)?;
        }
        cluster.wait_ready(Duration::from_secs(20))?;
        if cfg.secure {
            cluster.enable_auth()?;
            cluster.auth_on = true;
            cluster.wait_ready(Duration::from_secs(20))?;
        }
        Ok(cluster)
    }

    /// Adds user `root` with the root role and turns auth on, as `etcdctl user add root` and
    /// `etcdctl auth enable` do.
    fn enable_auth(&self) -> Result<(), String> {
        let store = self
            .connect(Duration::from_secs(5))
            .map_err(|e| e.to_string())?;
        let mut client = store.client();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async move {
            client.user_add("root", ROOT_PASSWORD, None).await?;
            client.role_add("root").await?;
            client.user_grant_role("root", "root").await?;
            client.auth_enable().await?;
            Ok::<_, etcd_client::Error>(())
        })
        .map_err(|e| format!("turning etcd's auth on: {e}"))
    }

    /// The files a client of a secure cluster needs: the CA, a client certificate and key, and
    /// the root user's password file; none for a plain one.
    pub fn files(&self) -> EtcdFiles {
        if !self.cfg.secure {
            return EtcdFiles::default();
        }
        EtcdFiles {
            ca: Some(self.dir.join("ca.pem")),
            cert: Some(self.dir.join("client.pem")),
            key: Some(self.dir.join("client.key")),
            password_file: Some(self.dir.join("password")),
        }
    }

    /// The arguments that give a `setpoint` command [`EtcdCluster::files`] (`--etcd-ca …`).
    pub fn store_args(&self) -> Vec<String> {
        let f = self.files();
        let mut out = Vec::new();
        for (flag, path) in [
            ("--etcd-ca", f.ca),
            ("--etcd-cert", f.cert),
            ("--etcd-key", f.key),
            ("--etcd-password-file", f.password_file),
        ] {
            if let Some(p) = path {
                out.push(flag.to_owned());
                out.push(p.display().to_string());
            }
        }
        out
    }

    /// The cluster as a store URL with its files, for [`StoreUrl::open`].
    pub fn store_url(&self) -> StoreUrl {
        let url: StoreUrl = self.url().parse().expect("the test cluster's URL parses");
        url.with_etcd_files(self.files())
            .expect("the files fit the URL")
    }

    /// How a client reaches the cluster now (TLS and, once auth is on, `root`).
    fn access(&self) -> EtcdAccess {
        if !self.cfg.secure {
            return EtcdAccess::default();
        }
        let url = match self.store_url() {
            StoreUrl::Etcd(mut e) => {
                if !self.auth_on {
                    e.user = None;
                    e.files.password_file = None;
                }
                e
            }
            _ => unreachable!("an etcd URL"),
        };
        url.access(|_| None)
            .expect("the test cluster's files are readable")
    }

    /// The endpoints as a client dials them (`https://` for a secure cluster).
    fn dial(&self) -> Vec<String> {
        let scheme = if self.cfg.secure { "https" } else { "http" };
        self.endpoints()
            .iter()
            .map(|e| format!("{scheme}://{e}"))
            .collect()
    }

    fn connect(&self, timeout: Duration) -> Result<EtcdStore, crate::store::StoreError> {
        EtcdStore::connect_with(&self.dial(), EtcdOptions { timeout }, &self.access())
    }

    fn spawn(&mut self, i: usize) -> Result<(), String> {
        let m = &self.members[i];
        let data = self.dir.join(&m.name);
        let log = std::fs::File::create(self.dir.join(format!("{}.log", m.name)))
            .map_err(|e| format!("creating the log of {}: {e}", m.name))?;
        let scheme = if self.cfg.secure { "https" } else { "http" };
        let client = format!("{scheme}://{}:{}", m.host, m.client_port);
        let peer = format!("http://{}:{}", m.host, m.peer_port);
        let (program, prefix) = match m.wrap.split_first() {
            Some((p, rest)) => (p.clone(), rest.to_vec()),
            None => ("etcd".to_owned(), Vec::new()),
        };
        let mut cmd = Command::new(program);
        cmd.args(prefix);
        if !m.wrap.is_empty() {
            cmd.arg("etcd");
        }
        cmd.arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(&data)
            .arg("--listen-client-urls")
            .arg(&client)
            .arg("--advertise-client-urls")
            .arg(&client)
            .arg("--listen-peer-urls")
            .arg(&peer)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer)
            .arg("--initial-cluster")
            .arg(&self.initial_cluster)
            .arg("--initial-cluster-token")
            .arg(&self.token)
            .arg("--initial-cluster-state")
            .arg("new")
            .arg("--heartbeat-interval")
            .arg(self.cfg.heartbeat_ms.to_string())
            .arg("--election-timeout")
            .arg(self.cfg.election_ms.to_string())
            .args(if self.cfg.secure {
                let f = |n: &str| self.dir.join(n).display().to_string();
                vec![
                    "--cert-file".to_owned(),
                    f("server.pem"),
                    "--key-file".to_owned(),
                    f("server.key"),
                    "--trusted-ca-file".to_owned(),
                    f("ca.pem"),
                    "--client-cert-auth".to_owned(),
                ]
            } else {
                Vec::new()
            })
            .args(
                self.cfg
                    .quota_bytes
                    .map(|q| vec!["--quota-backend-bytes".to_owned(), q.to_string()])
                    .unwrap_or_default(),
            )
            .arg("--logger")
            .arg("zap")
            .arg("--log-level")
            .arg("warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        let child = cmd
            .spawn()
            .map_err(|e| format!("starting etcd member {}: {e}", m.name))?;
        self.members[i].child = Some(child);
        Ok(())
    }

    fn wait_ready(&mut self, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        let mut last = String::new();
        while Instant::now() < deadline {
            for m in &mut self.members {
                if let Some(c) = &mut m.child {
                    if let Ok(Some(status)) = c.try_wait() {
                        m.child = None;
                        return Err(format!(
                            "etcd member {} exited ({status}); see {}",
                            m.name,
                            self.dir.join(format!("{}.log", m.name)).display()
                        ));
                    }
                }
            }
            match self
                .connect(Duration::from_millis(500))
                .and_then(|s| s.revision())
            {
                Ok(_) => return Ok(()),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!(
            "etcd did not become ready within {within:?}: {last}"
        ))
    }

    /// The members' client endpoints, `host:port`.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("{}:{}", m.host, m.client_port))
            .collect()
    }

    /// The cluster as a store URL: `etcd://h1:p1,h2:p2,...`, or for a secure cluster
    /// `etcd+https://root@h1:p1,...` (which needs [`EtcdCluster::store_args`] beside it).
    pub fn url(&self) -> String {
        if self.cfg.secure {
            format!("etcd+https://root@{}", self.endpoints().join(","))
        } else {
            format!("etcd://{}", self.endpoints().join(","))
        }
    }

    /// A store on this cluster with a 2-second deadline.
    pub fn store(&self) -> EtcdStore {
        self.store_with(EtcdOptions {
            timeout: Duration::from_secs(2),
        })
    }

    /// A store on this cluster, or why it cannot be had now.
    pub fn try_store_with(&self, opts: EtcdOptions) -> Result<EtcdStore, crate::store::StoreError> {
        EtcdStore::connect_with(&self.dial(), opts, &self.access())
    }

    /// A store on this cluster.
    pub fn store_with(&self, opts: EtcdOptions) -> EtcdStore {
        EtcdStore::connect_with(&self.dial(), opts, &self.access())
            .expect("the test cluster answers")
    }

    /// Member `i`'s process id, while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].child.as_ref().map(Child::id)
    }

    /// Kills member `i` with SIGKILL (by pid) and waits for it.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts member `i` again on its data (after [`EtcdCluster::kill`]).
    pub fn restart(&mut self, i: usize) -> Result<(), String> {
        if self.members[i].child.is_none() {
            self.spawn(i)?;
        }
        Ok(())
    }

    /// Which member leads the cluster now, by index: the member whose own status (etcd's
    /// `Status` call) names itself the leader. `None` if none does within a second each, or
    /// for a secure cluster (whose status would need its certificates).
    pub fn leader(&self) -> Option<usize> {
        if self.cfg.secure {
            return None;
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        let within = Duration::from_secs(1);
        rt.block_on(async {
            for (i, ep) in self.endpoints().iter().enumerate() {
                let connect = etcd_client::Client::connect([format!("http://{ep}")], None);
                let Ok(Ok(mut c)) = tokio::time::timeout(within, connect).await else {
                    continue;
                };
                if let Ok(Ok(s)) = tokio::time::timeout(within, c.status()).await {
                    if s.header().map(|h| h.member_id()) == Some(s.leader()) {
                        return Some(i);
                    }
                }
            }
            None
        })
    }

    /// Waits until the cluster answers with a leader again.
    pub fn wait_for_leader(&mut self, within: Duration) -> Result<(), String> {
        self.wait_ready(within)
    }

    /// Where the members keep their data and logs (`m{i}.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
        let mut taken = TAKEN.lock().unwrap_or_else(|p| p.into_inner());
        for m in &self.members {
            taken.remove(&m.client_port);
            taken.remove(&m.peer_port);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Makes, in `dir`, a CA (`ca.pem`), a server certificate for `hosts` and loopback
/// (`server.pem`, `server.key`) and a client certificate (`client.pem`, `client.key`), with
/// the `openssl` command, valid for two days.
fn make_certificates(dir: &Path, hosts: &[String]) -> Result<(), String> {
    let run = |args: &[&str]| -> Result<(), String> {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running openssl (is it installed?): {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "openssl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    };
    let key = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    run(&[
        &["req", "-x509"][..],
        &key,
        &[
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=setpoint-test-ca",
        ],
    ]
    .concat())?;
    let mut sans: Vec<String> = vec!["IP:127.0.0.1".into(), "DNS:localhost".into()];
    for h in hosts {
        let san = if h.parse::<std::net::IpAddr>().is_ok() {
            format!("IP:{h}")
        } else {
            format!("DNS:{h}")
        };
        if !sans.contains(&san) {
            sans.push(san);
        }
    }
    for (name, usage, extra) in [
        (
            "server",
            "serverAuth,clientAuth",
            format!("subjectAltName={}\n", sans.join(",")),
        ),
        ("client", "clientAuth", String::new()),
    ] {
        let ext = format!(
            "{extra}basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n\
             extendedKeyUsage={usage}\n"
        );
        std::fs::write(dir.join(format!("{name}.ext")), ext).map_err(|e| e.to_string())?;
        let (k, csr, pem, extfile, subj) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
            format!("{name}.ext"),
            format!("/CN=setpoint-test-{name}"),
        );
        run(&[
            &["req"][..],
            &key,
            &["-keyout", &k, "-out", &csr, "-subj", &subj],
        ]
        .concat())?;
        run(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            &extfile,
        ])?;
    }
    Ok(())
}
