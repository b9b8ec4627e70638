//! `--store URL`: every runtime command takes it; a malformed URL, an unreachable etcd and a
//! store of another format each get one line; a controller and agents run on etcd as separate
//! processes. The etcd tests start their own etcd (ports 23100-23199) and skip, saying why,
//! when etcd is not installed.

use std::time::Duration;

use rustix::process::Signal;
use setpoint_runtime::process::signal_group;
use setpoint_runtime::store::url::VERSION_KEY;
use setpoint_runtime::store::Txn;
use setpoint_runtime::testing::{EtcdCluster, EtcdClusterConfig};
use setpoint_runtime::{SqliteStore, Store};

use super::harness::{assert_one_line, Rig, Start};

/// Runs `args`, expects exit `code` and one line on stderr containing every needle.
fn one_line(r: &Rig, args: &[&str], code: i32, needles: &[&str]) {
    assert_one_line(&r.run(args), code, needles, &format!("{args:?}"));
}

/// Every runtime command, with what it needs besides `--store`.
fn runtime_commands(file: &str) -> Vec<Vec<&str>> {
    vec![
        vec!["up"],
        vec!["controller"],
        vec!["agent", "--node", "n1"],
        vec!["apply", "-f", file],
        vec!["get"],
        vec!["status"],
        vec!["delete", "w"],
        vec!["kill", "w", "1"],
        vec!["measure"],
        vec!["experiment", "lesson", "--real"],
    ]
}

#[test]
fn a_malformed_store_url_is_refused_by_every_runtime_command_with_exit_2() {
    let r = Rig::new();
    for cmd in runtime_commands("w.toml") {
        for url in ["etcd://", "etcd://h1", "sqlite:", "zk://h:1"] {
            let mut args = cmd.clone();
            args.extend(["--store", url]);
            one_line(
                &r,
                &args,
                2,
                &[url, "is not a store URL", "accepted sqlite:DIR, etcd://"],
            );
        }
    }
    assert!(!r.data_dir().exists(), "nothing was created");
}

#[test]
fn an_unreachable_etcd_fails_one_shot_commands_with_exit_1_naming_the_endpoint() {
    let r = Rig::new();
    let file = r.write(
        "w.toml",
        "[[workload]]\nname = \"w\"\ncommand = [\"sleep\", \"9\"]\ncopies = 1\n",
    );
    // Nothing listens on port 1 of loopback: the connection is refused at once.
    for cmd in [
        vec!["apply", "-f", &file],
        vec!["get"],
        vec!["status"],
        vec!["delete", "w"],
        vec!["measure"],
    ] {
        let mut args = cmd.clone();
        args.extend(["--store", "etcd://127.0.0.1:1"]);
        one_line(&r, &args, 1, &["etcd at 127.0.0.1:1", "refused"]);
    }
}

#[test]
fn a_store_of_another_format_is_refused_with_one_line_and_left_as_it_is() {
    let r = Rig::new();
    let file = r.write(
        "w.toml",
        "[[workload]]\nname = \"w\"\ncommand = [\"sleep\", \"9\"]\ncopies = 1\n",
    );
    r.ok(&["apply", "-f", &file]);
    let store = SqliteStore::open(&r.data_dir()).unwrap();
    let other = r#"{"format":99,"setpoint":"9.9.9"}"#;
    let rev = store.commit(&Txn::new().put(VERSION_KEY, other)).unwrap();
    for args in [vec!["get"], vec!["apply", "-f", &file]] {
        one_line(
            &r,
            &args,
            2,
            &["format 99", "9.9.9", "reads format 1", "sqlite:"],
        );
    }
    assert_eq!(store.revision().unwrap(), rev, "nothing was written");
}

#[test]
fn a_controller_and_two_agents_on_etcd_keep_three_copies_as_separate_processes() {
    let Some(etcd) = EtcdCluster::start_or_skip("cli::store::on_etcd", 1) else {
        return;
    };
    let mut d = Rig::on_store(&etcd.url());
    let file = d.write(
        "w.toml",
        "[[workload]]\nname = \"w\"\ncommand = [\"sleep\", \"120\"]\ncopies = 3\n\
         controller = \"intent\"\nperiod = \"200ms\"\nstartup = \"100ms\"\ngrace = \"500ms\"\n",
    );
    d.start("n1", &["agent", "--node", "n1", "--report-every", "50ms"]);
    d.start("n2", &["agent", "--node", "n2", "--report-every", "50ms"]);
    d.start("controller", &["controller", "--lease-ttl", "1s"]);
    d.ok(&["apply", "-f", &file]);
    d.until("3 copies live and on the ledger", |d| {
        let g = d.get("w");
        d.marked().len() == 3 && g["live"] == 3 && g["on_ledger"] == 3
    });
    let status = d.status();
    assert!(status["leader"]["holder"].is_string(), "{status}");
    assert_eq!(status["nodes"].as_array().unwrap().len(), 2, "{status}");

    // A copy that dies is replaced, and nothing is started twice.
    let victim = d.marked()[0].clone();
    signal_group(victim.pid, Signal::KILL).unwrap();
    d.until("the dead copy is replaced", |d| {
        let c = d.marked();
        c.len() == 3 && c.iter().all(|m| m.pid != victim.pid) && d.get("w")["on_ledger"] == 3
    });
    let mut names: Vec<String> = d.marked().into_iter().map(|m| m.copy).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 3, "one process per identity: {names:?}");
}

#[test]
fn a_daemon_waits_for_etcd_logging_once_and_leads_when_it_answers() {
    let Some(mut etcd) = EtcdCluster::start_or_skip("cli::store::daemon_waits", 1) else {
        return;
    };
    etcd.kill(0);
    let mut d = Rig::on_store(&etcd.url());
    d.start("controller", &["controller", "--lease-ttl", "1s"]);
    // Each attempt lasts the store's deadline (3 s); then the backoff.
    std::thread::sleep(Duration::from_millis(4_500));
    let waiting = d.log("controller");
    assert_eq!(
        waiting.matches("retrying with backoff").count(),
        1,
        "one line while it waits: {waiting}"
    );
    assert!(waiting.contains(&etcd.endpoints()[0]), "{waiting}");
    assert!(d.runs("controller"), "it still runs");
    etcd.restart(0).unwrap();
    etcd.wait_for_leader(Duration::from_secs(20)).unwrap();
    d.until("the controller leads", |d| {
        d.log("controller").contains("became the leader")
    });
    assert!(d.log("controller").contains("answers"));
}

/// Issue 22, item 1: an agent restarted while its store cannot be reached (here the only etcd
/// member is down: quorum lost) stops the copies its earlier life left running by the fence's
/// deadlines from that life's last successful renewal, which it wrote down in its lease file
/// (3/4 of the node lease after it), as the earlier life would have; at the latest from its own
/// start. Before, it waited to open the store before its machine started, and its copies
/// ran unwatched past their node lease for as long as the outage lasted (8 copies through a 14 s
/// outage with a 10 s lease), free to be started on another node. Once the store answers, it
/// claims its node and the workload is whole again, each name once.
#[test]
fn an_agent_restarted_while_its_store_is_down_fences_its_earlier_copies_before_their_lease_ends() {
    let Some(mut etcd) = EtcdCluster::start_or_skip("cli::store::restarted_cut_off", 1) else {
        return;
    };
    // The agent dies; its copies run on. Then the store goes, and the agent comes back.
    let (mut d, agent) = copies_left_by_a_dead_agent_with_the_store_down(&mut etcd, 3, "4s");
    // What the dead agent wrote down: when it sent its last renewal that succeeded.
    let lease_file = d.data_dir_of("n1").join("nodes/n1.lease");
    let renewed: u64 = std::fs::read_to_string(&lease_file)
        .unwrap_or_else(|e| panic!("{}: {e}", lease_file.display()))
        .trim()
        .parse()
        .unwrap();
    let wall = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    // The restart comes 1.5 s after that renewal: counted from the restart, the fence would
    // land after the store can end the lease.
    std::thread::sleep(Duration::from_millis(
        (renewed + 1_500).saturating_sub(wall()),
    ));
    let restarted = wall();
    assert!(
        restarted >= renewed + 1_500 && restarted - renewed < 3_000,
        "renewed {renewed}, restarted {restarted}"
    );
    d.start("n1-again", &agent);
    let took = d.until_within("the earlier copies stopped", Duration::from_secs(10), |d| {
        d.marked().is_empty()
    });
    let stopped = wall();
    let log = d.log("n1-again");
    assert!(log.contains("the agent runs meanwhile"), "{log}");
    assert!(log.contains("an earlier agent's may end soon"), "{log}");
    // 3/4 of the 4 s lease from the dead agent's last renewal, before the store can end that
    // lease (4 s after it), not 3/4 of it from the restart (up to a second later).
    assert!(
        stopped >= renewed + 2_900 && stopped < renewed + 4_000,
        "stopped {} ms after the last renewal, {} ms after the restart (polled in {took:?}):\n{log}",
        stopped - renewed,
        stopped - restarted
    );
    etcd.restart(0).unwrap();
    etcd.wait_for_leader(Duration::from_secs(20)).unwrap();
    d.until("the workload whole again, each name once", |d| {
        let p = d.processes();
        p.len() == 3 && p.values().all(|pids| pids.len() == 1) && d.get("w")["live"] == 3
    });
    assert!(
        d.log("n1-again").contains("answers"),
        "{}",
        d.log("n1-again")
    );
}

/// A controller and agent `n1` (node lease `node_timeout`) on `etcd` keep `copies` `named` copies
/// of `sleep 300`; then the agent is SIGKILLed and the only etcd member killed, so its copies run
/// on with no agent and no store. Returns the rig and the agent's arguments, to start it again.
fn copies_left_by_a_dead_agent_with_the_store_down(
    etcd: &mut EtcdCluster,
    copies: usize,
    node_timeout: &'static str,
) -> (Rig, [&'static str; 7]) {
    let mut d = Rig::on_store(&etcd.url()).deadline(Duration::from_secs(60));
    let file = d.write(
        "w.toml",
        &format!(
            "[[workload]]\nname = \"w\"\ncommand = [\"sleep\", \"300\"]\ncopies = {copies}\n\
             controller = \"named\"\nperiod = \"500ms\"\nstartup = \"100ms\"\ngrace = \"500ms\"\n"
        ),
    );
    let agent = [
        "agent",
        "--node",
        "n1",
        "--report-every",
        "200ms",
        "--node-timeout",
        node_timeout,
    ];
    d.start("n1", &agent);
    d.start("controller", &["controller", "--lease-ttl", "1s"]);
    d.ok(&["apply", "-f", &file]);
    d.until(&format!("{copies} copies live"), |d| {
        d.marked().len() == copies && d.get("w")["live"] == copies
    });
    d.signal("n1", Signal::KILL);
    etcd.kill(0);
    assert_eq!(d.marked().len(), copies, "the copies outlive their agent");
    (d, agent)
}

/// Chaos finding 18 on the real runtime: an agent restarted while its store is down and told
/// to stop (SIGTERM, as `systemctl stop` does) before it could claim its node stops what its
/// earlier life left running before it exits, so a stop leaves no copy without an agent:
/// SIGTERM at once, SIGKILL 10 s later to what ignores it. Before, it said "stopped" at once
/// and both copies ran on with no agent (seen by hand with the build before the fix). With
/// nothing left running, the same stop is immediate.
#[test]
fn an_agent_stopped_before_it_could_claim_its_node_leaves_no_copy_running() {
    let Some(mut etcd) = EtcdCluster::start_or_skip("cli::store::stopped_before_claim", 1) else {
        return;
    };
    // A long node lease: the first-claim fence (3/4 of it) comes long after the stop.
    let (mut d, agent) = copies_left_by_a_dead_agent_with_the_store_down(&mut etcd, 2, "60s");
    // Starts agent `name`, waits until it tries to claim its node (with `left` copies still
    // running), stops it as systemd does and waits for it to exit cleanly: how long the stop
    // took, and its log.
    let stop_before_claim = |d: &mut Rig, name: &str, left: usize| {
        d.start(name, &agent);
        d.until(&format!("{name} trying to claim its node"), |d| {
            d.log(name).contains("cannot claim the node yet")
        });
        assert_eq!(d.marked().len(), left, "the copies outlive their agent");
        let asked = std::time::Instant::now();
        d.send(name, Signal::TERM);
        let status = d.wait_exit_within(name, Duration::from_secs(20), Duration::from_millis(50));
        let took = asked.elapsed();
        let log = d.log(name);
        assert!(status.success(), "{status:?}\n{log}");
        assert!(
            log.contains("shutting down before its state was read"),
            "{log}"
        );
        (took, log)
    };
    let (took, log) = stop_before_claim(&mut d, "n1-again", 2);
    assert!(
        !log.contains("fenced"),
        "the fence did it, not the stop:\n{log}"
    );
    // `sleep` ends at SIGTERM: gone when the agent is, which waited out the grace.
    assert!(
        d.marked().is_empty(),
        "left running by the stopped agent: {:?}\n{log}",
        d.marked()
    );
    assert!(took >= Duration::from_secs(10), "stopped in {took:?}");
    // Started again and stopped the same way with nothing left running: the driver signalled
    // none, so the agent stops at once instead of waiting out the 10 s grace.
    let (took, log) = stop_before_claim(&mut d, "n1-third", 0);
    assert!(took < Duration::from_secs(5), "stopped in {took:?}\n{log}");
    etcd.restart(0).unwrap();
}

/// Issue 22, item 6: a store outage stops only what must stop. The only etcd member is down
/// past the agent's fence (3/4 of a 4 s node lease): the `named` copies are fenced, the
/// `intent` ones with `stop_when_cut_off = "1s"` stop after their wait, and the plain `intent`
/// ones run on, the same processes, through the outage and after it: etcd resets its leases
/// when it comes back, the agent keeps its lease alive instead of giving it up, and the node is
/// never lost. Before, every copy was fenced at 3 s and the rejoin gave the lease up, so every
/// copy was replaced.
#[test]
fn a_store_outage_fences_named_copies_and_keeps_the_others_running() {
    let Some(mut etcd) = EtcdCluster::start_or_skip("cli::store::outage_keeps_counted", 1) else {
        return;
    };
    let mut d = Rig::on_store(&etcd.url()).deadline(Duration::from_secs(60));
    let file = d.write(
        "w.toml",
        "[[workload]]\nname = \"nm\"\ncommand = [\"sleep\", \"300\"]\ncopies = 2\n\
         controller = \"named\"\nperiod = \"500ms\"\nstartup = \"100ms\"\ngrace = \"500ms\"\n\
         [[workload]]\nname = \"it\"\ncommand = [\"sleep\", \"300\"]\ncopies = 2\n\
         controller = \"intent\"\nperiod = \"500ms\"\nstartup = \"100ms\"\ngrace = \"500ms\"\n\
         [[workload]]\nname = \"st\"\ncommand = [\"sleep\", \"300\"]\ncopies = 2\n\
         controller = \"intent\"\nperiod = \"500ms\"\nstartup = \"100ms\"\ngrace = \"500ms\"\n\
         stop_when_cut_off = \"1s\"\n",
    );
    let agent = [
        "agent",
        "--node",
        "n1",
        "--report-every",
        "200ms",
        "--node-timeout",
        "4s",
    ];
    d.start("n1", &agent);
    d.start("controller", &["controller", "--lease-ttl", "1s"]);
    d.ok(&["apply", "-f", &file]);
    let live = |d: &Rig, w: &str| d.get(w)["live"] == 2;
    d.until("6 copies live", |d| {
        d.marked().len() == 6 && ["nm", "it", "st"].iter().all(|w| live(d, w))
    });
    // What each does when cut off, before it happens: `get` says so.
    assert_eq!(d.get("nm")["cut_off"], "fence");
    assert_eq!(d.get("it")["cut_off"], "keep");
    assert_eq!(d.get("st")["cut_off"], "stop");
    assert_eq!(d.get("st")["stop_when_cut_off_ms"], 1000);
    let table = d.ok(&["get"]);
    for (w, shown) in [("nm", "fence"), ("it", "keep"), ("st", "stop 1s")] {
        assert!(
            table
                .lines()
                .any(|l| l.starts_with(&format!("{w} ")) && l.contains(shown)),
            "{w}: {shown}\n{table}"
        );
    }
    let of = |d: &Rig, w: &str| -> Vec<u32> {
        d.processes()
            .into_iter()
            .filter(|(c, _)| c.starts_with(&format!("{w}-")))
            .flat_map(|(_, pids)| pids)
            .collect()
    };
    let intent = of(&d, "it");
    assert_eq!(intent.len(), 2);
    etcd.kill(0);
    d.until_within(
        "the named and timed copies stopped",
        Duration::from_secs(10),
        |d| of(d, "nm").is_empty() && of(d, "st").is_empty(),
    );
    // Past the fence's SIGKILL too: the intent copies still run.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(of(&d, "it"), intent, "{}", d.log("n1"));
    let log = d.log("n1");
    assert!(log.contains("2 kept running while cut off"), "{log}");
    assert!(log.contains("stop_when_cut_off has passed"), "{log}");
    // The agent dies and is restarted inside the outage, as systemd's `Restart=always` does:
    // it cannot claim its node, and its first claim's fence stops what it cannot prove is
    // kept while cut off. The intent copies are proven by the state file: they run on.
    d.signal("n1", Signal::KILL);
    d.spawn(Start::new("n1", &agent).append());
    d.until_within(
        "the restarted agent's fence",
        Duration::from_secs(15),
        |d| {
            d.log("n1")
                .contains("SIGKILL to any copy an earlier agent here left running")
        },
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(of(&d, "it"), intent, "{}", d.log("n1"));
    etcd.restart(0).unwrap();
    etcd.wait_for_leader(Duration::from_secs(20)).unwrap();
    d.until("the workloads whole again, each name once", |d| {
        let p = d.processes();
        p.len() == 6
            && p.values().all(|pids| pids.len() == 1)
            && ["nm", "it", "st"].iter().all(|w| live(d, w))
    });
    assert_eq!(of(&d, "it"), intent, "never restarted:\n{}", d.log("n1"));
    // The restarted agent took the old node lease over and adopted the copies it spared.
    let log = d.log("n1");
    assert!(
        log.contains("taken over from the previous agent here"),
        "{log}"
    );
    assert!(
        log.contains("adopted it-0") && log.contains("adopted it-1"),
        "{log}"
    );
}

/// Issue 22, item 4: one etcd member of three hung (SIGSTOP: its sockets accept, nothing
/// answers), quorum intact, costs nothing. Before the fix the leading controller lost its lease
/// in 6 of 7 tries and agents fenced copies: calls to the frozen member waited out the whole 3 s
/// deadline. Here each *follower* member is frozen in turn, for longer than the agents' fence
/// time (3/4 of the default 10 s node lease) and the default 5 s leader lease: every call must
/// move on to another member, and nothing may be fenced, deposed or restarted.
///
/// The etcd leader member is left alone here: etcd 3.4.23 (Debian's) has a bug of its own there
/// (etcd issue #15247, fixed by etcd pull request #16822): a leader member frozen for longer than
/// a lease's TTL revokes that lease when it resumes, however well the clients kept it alive
/// through the new leader, and no client can prevent it. That is
/// [`a_hung_etcd_leader_member_revokes_leases_on_resume_etcd_bug_15247`].
#[test]
fn a_hung_etcd_follower_member_costs_no_lease_and_fences_nothing() {
    hung_member_costs_nothing("cli::store::a_hung_etcd_follower", false);
}

/// The same with the etcd *leader* member frozen: ignored, because on etcd 3.4.23 it fails by
/// etcd's bug #15247 (a frozen leader member revokes, when it resumes, every lease whose TTL ran
/// out in its stale view: the controller's 5 s leader lease nearly always, an agent's 10 s node
/// lease when its last renewal the frozen leader saw was over 2 s old), not by setpoint's doing.
/// `scripts/etcd-frozen-leader.sh` shows the bug with etcd alone. Run it on a fixed etcd with
/// `cargo test -p setpoint-cli --test cli -- --ignored a_hung_etcd_leader`.
#[test]
#[ignore = "etcd 3.4.23 bug #15247: a frozen leader member revokes leases when it resumes (scripts/etcd-frozen-leader.sh)"]
fn a_hung_etcd_leader_member_revokes_leases_on_resume_etcd_bug_15247() {
    hung_member_costs_nothing("cli::store::a_hung_etcd_leader", true);
}

/// Four `named` copies on two agents and a controller on three etcd members, all with their
/// stock settings (etcd's timing included); each follower (or, with `leader`, the leader) frozen in turn for 8 s. Nothing
/// may be fenced, deposed or restarted.
fn hung_member_costs_nothing(name: &str, leader: bool) {
    // etcd's own timing (heartbeat 100 ms, election 1 s), not the faster one of the other
    // tests: how long the others take to elect a leader is part of what a stall costs.
    let stock = setpoint_runtime::testing::EtcdClusterConfig::stock_timing(3);
    let Some(etcd) = EtcdCluster::start_or_skip_with(name, &stock) else {
        return;
    };
    let mut d = Rig::on_store(&etcd.url());
    let file = d.write(
        "w.toml",
        "[[workload]]\nname = \"w\"\ncommand = [\"sleep\", \"300\"]\ncopies = 4\n\
         controller = \"named\"\nperiod = \"500ms\"\nstartup = \"100ms\"\ngrace = \"500ms\"\n",
    );
    for n in ["n1", "n2"] {
        d.start(n, &["agent", "--node", n, "--report-every", "200ms"]);
    }
    d.start("controller", &["controller"]);
    d.ok(&["apply", "-f", &file]);
    d.until("4 copies live", |d| {
        d.marked().len() == 4 && d.get("w")["live"] == 4
    });
    let before: Vec<u32> = d.marked().iter().map(|m| m.pid).collect();
    // Each follower once (found again before each freeze: a resumed member may start an
    // election), or the leader once.
    let mut frozen: Vec<usize> = Vec::new();
    for _ in 0..if leader { 1 } else { 2 } {
        let lead = etcd.leader().expect("the etcd cluster has a leader");
        let followers: Vec<usize> = (0..3).filter(|m| *m != lead).collect();
        let member = match leader {
            true => lead,
            false => *followers
                .iter()
                .find(|m| !frozen.contains(m))
                .unwrap_or(&followers[0]),
        };
        frozen.push(member);
        let pid = etcd.pid(member).unwrap();
        let p = rustix::process::Pid::from_raw(pid as i32).unwrap();
        rustix::process::kill_process(p, Signal::STOP).unwrap();
        std::thread::sleep(Duration::from_secs(8));
        rustix::process::kill_process(p, Signal::CONT).unwrap();
        std::thread::sleep(Duration::from_secs(1));
    }
    let logs = d.logs();
    for bad in ["fenced", "lost the leader lease", "lease ended"] {
        assert!(
            !logs.contains(bad),
            "a hung member cost something ({bad}):\n{logs}"
        );
    }
    assert_eq!(
        d.log("controller").matches("became the leader").count(),
        1,
        "{}",
        d.log("controller")
    );
    let after: Vec<u32> = d.marked().iter().map(|m| m.pid).collect();
    assert_eq!(before, after, "every copy kept its process:\n{logs}");
    assert_eq!(d.get("w")["live"], 4);
}

/// The workloads file of the etcd tests: `copies` copies of a long `sleep`.
fn sleepers(r: &Rig, copies: u64) -> String {
    r.write(
        "w.toml",
        &format!(
            "[[workload]]\nname = \"w\"\ncommand = [\"sleep\", \"120\"]\ncopies = {copies}\n\
             controller = \"intent\"\nperiod = \"200ms\"\nstartup = \"100ms\"\ngrace = \"500ms\"\n"
        ),
    )
}

#[test]
fn two_clusters_under_two_prefixes_of_one_etcd_never_see_each_other() {
    let Some(etcd) = EtcdCluster::start_or_skip("cli::store::two_prefixes", 1) else {
        return;
    };
    // The same workload and node names in both: only the prefix keeps them apart.
    let mut a = Rig::on_store(&format!("{}/team-a", etcd.url()));
    let mut b = Rig::on_store(&format!("{}/team-b", etcd.url()));
    for (r, copies) in [(&mut a, 2), (&mut b, 3)] {
        let file = sleepers(r, copies);
        r.start("n1", &["agent", "--node", "n1", "--report-every", "50ms"]);
        r.start("controller", &["controller", "--lease-ttl", "1s"]);
        r.ok(&["apply", "-f", &file]);
    }
    for (r, copies) in [(&a, 2), (&b, 3)] {
        r.until("each cluster's copies live and on the ledger", |r| {
            let g = r.get("w");
            r.marked().len() == copies && g["live"] == copies && g["on_ledger"] == copies
        });
        let s = r.status();
        assert_eq!(s["nodes"].as_array().unwrap().len(), 1, "{s}");
        assert_eq!(s["workloads"], 1, "{s}");
    }
    // A kill in one reaches only its own copies.
    let pids = |r: &Rig| -> Vec<u32> {
        let mut p: Vec<u32> = r.marked().into_iter().map(|m| m.pid).collect();
        p.sort_unstable();
        p
    };
    let (a_before, b_before) = (pids(&a), pids(&b));
    a.ok(&["kill", "w", "1"]);
    a.until("team-a's killed copy is replaced", |r| {
        let now = pids(r);
        now.len() == 2 && now != a_before && r.get("w")["on_ledger"] == 2
    });
    assert_eq!(pids(&b), b_before, "team-b's copies are untouched");
    // A delete in one leaves the other's workload, copies and all.
    a.ok(&["delete", "w"]);
    a.until("team-a's copies stop", |r| r.marked().is_empty());
    one_line(&a, &["get", "w"], 2, &["w"]);
    assert_eq!(b.get("w")["live"], 3);
    assert_eq!(pids(&b), b_before);
    // At the root of the etcd, every key is under one prefix or the other.
    let raw = etcd.store();
    let outside: Vec<String> = raw
        .read(&["/"])
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.key)
        .filter(|k| !k.starts_with("/team-a/") && !k.starts_with("/team-b/"))
        .collect();
    assert!(
        outside.is_empty(),
        "keys outside both prefixes: {outside:?}"
    );
}

#[test]
fn a_controller_and_an_agent_run_through_client_tls_and_auth() {
    if let Some(why) = setpoint_runtime::testing::etcd_missing() {
        eprintln!("cli::store::secure: skipped: {why}");
        return;
    }
    let etcd = EtcdCluster::start(&EtcdClusterConfig::secure_loopback(1))
        .unwrap_or_else(|e| panic!("cannot start etcd: {e}"));
    let url = etcd.url();
    assert!(url.starts_with("etcd+https://root@"), "{url}");
    let mut d = Rig::on_store(&url).store_extra(etcd.store_args());
    let file = sleepers(&d, 2);
    d.start("n1", &["agent", "--node", "n1", "--report-every", "50ms"]);
    d.start("controller", &["controller", "--lease-ttl", "1s"]);
    d.ok(&["apply", "-f", &file]);
    d.until("2 copies live and on the ledger over TLS", |d| {
        let g = d.get("w");
        d.marked().len() == 2 && g["live"] == 2 && g["on_ledger"] == 2
    });
    let password = std::fs::read_to_string(etcd.files().password_file.unwrap()).unwrap();
    let password = password.trim();
    assert!(!d.logs().contains(password), "the password is never logged");
    let get = d.ok(&["get"]);
    assert!(!get.contains(password));
    // The same URL without its files: one line each, exit 2, saying what is missing.
    let bare = Rig::on_store(&url);
    one_line(&bare, &["get"], 2, &["needs --etcd-ca FILE"]);
    let no_password =
        Rig::on_store(&url).store_extra(etcd.store_args().into_iter().take(6).collect());
    let out = no_password
        .command(&["get"])
        .env_remove("SETPOINT_ETCD_PASSWORD")
        .output()
        .unwrap();
    assert_one_line(
        &out,
        2,
        &[
            "etcd user 'root' needs a password",
            "SETPOINT_ETCD_PASSWORD",
        ],
        "get without a password",
    );
    // The password from the environment works as the file does.
    let out = no_password
        .command(&["get", "w", "--format", "json"])
        .env("SETPOINT_ETCD_PASSWORD", password)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn etcd_urls_and_files_that_do_not_fit_get_one_line_and_exit_2() {
    let r = Rig::new();
    for (args, needle) in [
        (
            vec!["--store", "etcd://root:pw@h:1"],
            "a password in the URL",
        ),
        (
            vec!["--store", "etcd://h:1/a b"],
            "key prefix '/a b' is not",
        ),
        (vec!["--store", "https://h:1"], "unknown scheme"),
        (vec!["--store", "etcd+https://h:1"], "needs --etcd-ca FILE"),
        (
            vec!["--store", "etcd://h:1", "--etcd-ca", "ca.pem"],
            "use etcd+https://h:1",
        ),
        (
            vec![
                "--store",
                "etcd+https://h:1",
                "--etcd-ca",
                "ca.pem",
                "--etcd-cert",
                "c.pem",
            ],
            "--etcd-cert and --etcd-key go together",
        ),
        (
            vec!["--store", "etcd://h:1", "--etcd-password-file", "pw"],
            "needs a user in the URL",
        ),
        (vec!["--etcd-ca", "ca.pem"], "apply to an etcd store"),
    ] {
        let mut full = vec!["get"];
        full.extend(args.iter().copied());
        one_line(&r, &full, 2, &[needle]);
    }
    let out = r.run(&["get", "--store", "etcd://root:hunter2@h:1"]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("hunter2"));
}

/// The CPU time (user and system) process `pid` has used, in clock ticks (1/100 s).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the command name in parentheses: the state is field 3, utime 14 and stime 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// Chaos finding 20, on a real etcd: an etcd whose database reached its quota (the `NOSPACE`
/// alarm) refuses every write at once, while lease renewals (keep-alives, not writes) go on, so
/// no agent fences. A copy that dies then must be written to the live record and the event
/// log, and both writes are refused. The agent tried each again at its next step, and every
/// refusal is a step: 417 ticks of CPU in 10 s (42 % of a core, each a round trip to etcd) on
/// the build before the fix, by hand, for as long as the alarm lasted; 11 after it. etcd's
/// settings are stock but for a small quota (2 GiB would take minutes to fill).
#[test]
fn an_agent_on_a_full_etcd_retries_its_refused_writes_on_a_timer_and_get_says_it_is_full() {
    let cfg = EtcdClusterConfig {
        quota_bytes: Some(8 * 1024 * 1024),
        ..EtcdClusterConfig::stock_timing(1)
    };
    let Some(etcd) = EtcdCluster::start_or_skip_with("cli::store::full_etcd_no_storm", &cfg) else {
        return;
    };
    let mut d = Rig::on_store(&etcd.url()).deadline(Duration::from_secs(60));
    let agent = d.start("n1", &["agent", "--node", "n1"]);
    d.start("controller", &["controller"]);
    d.apply(&super::harness::sleeping(
        "web", 3, "intent", 300, "1s", "0s", "1s",
    ));
    d.until("3 copies live", |d| {
        d.try_get("web").is_some_and(|g| g["live"] == 3)
    });
    // Fill etcd until it refuses (bounded: 8 MiB of quota takes a few dozen values of 0.5 MB,
    // history included).
    let s = etcd.store();
    let value = "x".repeat(500_000);
    let full = (0..200).any(|i| {
        s.commit(&Txn::new().put(format!("/fill/{}", i % 4), value.clone()))
            .is_err()
    });
    assert!(
        full,
        "an 8 MiB quota refuses writes within 200 values of 0.5 MB"
    );
    // `get` and `status` say that the store refuses writes, and that what they show may be
    // stale: no agent can report while it does.
    let get = d.json(&["get", "--format", "json"]);
    let said = get["problems"]["store"].as_str().unwrap_or_default();
    assert!(
        said.contains("is full") && said.contains("alarm disarm") && said.contains("stale"),
        "{get}"
    );
    let status = d.ok(&["status"]);
    assert!(status.contains("problem store: etcd at "), "{status}");
    let victim = d.marked().first().expect("a copy runs").pid;
    let before = cpu_ticks(agent);
    let _ = signal_group(victim, Signal::KILL);
    std::thread::sleep(Duration::from_secs(5));
    let used = cpu_ticks(agent) - before;
    assert!(
        d.log("n1").contains("cannot write the live record"),
        "the agent met the full etcd with a live record to write\n{}",
        d.logs()
    );
    assert!(
        used <= 50,
        "the agent used {used} ticks of CPU in 5 s against a full etcd (at most 50, 10 % of a \
         core): it retries as fast as etcd refuses\n{}",
        d.logs()
    );
}
