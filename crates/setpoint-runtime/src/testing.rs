//! Test support: real etcd clusters on loopback (or inside network namespaces), started and
//! ended by the test that needs them.
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
//! Ports come from [`EtcdClusterConfig::ports`] (by default 23100–23199), two per member
//! (client, peer); a port is taken only if it can be bound on 127.0.0.1 at the time and no
//! other cluster of this process holds it.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::store::etcd::{EtcdOptions, EtcdStore};
use crate::store::Store;

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
        }
    }
}

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
        if let Some(why) = etcd_missing() {
            eprintln!("{test}: skipped: {why}");
            return None;
        }
        match Self::start(&EtcdClusterConfig::loopback(members)) {
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
        };
        for i in 0..cluster.members.len() {
            cluster.spawn(i)?;
        }
        cluster.wait_ready(Duration::from_secs(20))?;
        Ok(cluster)
    }

    fn spawn(&mut self, i: usize) -> Result<(), String> {
        let m = &self.members[i];
        let data = self.dir.join(&m.name);
        let log = std::fs::File::create(self.dir.join(format!("{}.log", m.name)))
            .map_err(|e| format!("creating the log of {}: {e}", m.name))?;
        let client = format!("http://{}:{}", m.host, m.client_port);
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
            .arg("--max-txn-ops")
            .arg("65536")
            .arg("--max-request-bytes")
            .arg("33554432")
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
            match EtcdStore::connect(
                &self.endpoints(),
                EtcdOptions {
                    timeout: Duration::from_millis(500),
                },
            )
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

    /// The cluster as a store URL: `etcd://h1:p1,h2:p2,...`.
    pub fn url(&self) -> String {
        format!("etcd://{}", self.endpoints().join(","))
    }

    /// A store on this cluster with a 2-second deadline.
    pub fn store(&self) -> EtcdStore {
        self.store_with(EtcdOptions {
            timeout: Duration::from_secs(2),
        })
    }

    /// A store on this cluster.
    pub fn store_with(&self, opts: EtcdOptions) -> EtcdStore {
        EtcdStore::connect(&self.endpoints(), opts).expect("the test cluster answers")
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
