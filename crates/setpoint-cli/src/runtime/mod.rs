//! The runtime's commands: `controller`, `agent`, `up`, `apply`, `get` (and `get copies`),
//! `describe`, `events`, `delete`, `kill`, `status`, `logs` and `node forget`. The clap types
//! live here (`describe`'s, `events`' and `--watch`'s in [`crate::inspect`]); the work is done
//! by setpoint-runtime.
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::runtime_table::{get_table, plural, status_table};
use setpoint_runtime::ops;
use setpoint_runtime::remote;
use setpoint_runtime::{
    format_duration, run_agent, run_controller, shutdown_pair, AgentConfig, OpenMode, StoreUrl,
};

mod args;
pub use args::*;

/// How long `kill` waits for the agents to carry its requests out.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// Runs one runtime command; returns what to print on stdout.
pub fn execute(cmd: RuntimeCommand) -> anyhow::Result<String> {
    match cmd {
        RuntimeCommand::Controller(a) => {
            let mut cfg = a.flags.config()?;
            let url = a.store.url()?;
            let observing = a.observe.start()?;
            cfg.metrics = observing.sink();
            serve(|shutdown| async move {
                let who = format!("controller {}", cfg.holder);
                observing.spawn(&who, shutdown.clone());
                let opened = url.open_retrying(OpenMode::Create, &who, shutdown.clone());
                if let Some(store) = opened.await? {
                    run_controller(store, cfg, shutdown).await?;
                }
                Ok(())
            })?;
            Ok(String::new())
        }
        RuntimeCommand::Agent(a) => {
            a.flags.check()?;
            if let Some(nodes) = a.simulate_nodes {
                return simulated_nodes(&a, nodes);
            }
            if let Some(first) = a.simulate_first {
                anyhow::bail!(BadInput(format!(
                    "--simulate-first {first} numbers simulated nodes: accepted only with \
                     --simulate-nodes N"
                )));
            }
            let node = a.node.as_deref().unwrap_or_default();
            let mut cfg = a.flags.config(node, &a.store.state_dir());
            cfg.started_ms = Some(setpoint_runtime::store::wall_ms());
            let url = a.store.url()?;
            let observing = a.observe.start()?;
            cfg.metrics = observing.sink();
            serve(|shutdown| async move {
                let who = format!("agent {}", cfg.node);
                observing.spawn(&who, shutdown.clone());
                // The agent runs, and fences, even while its store cannot be reached: copies
                // an earlier agent here started may be running (store/reopening.rs).
                let store = url.open_or_later(&who).await?;
                run_agent(store, cfg, shutdown).await?;
                Ok(())
            })?;
            Ok(String::new())
        }
        RuntimeCommand::Up(a) => up(&a),
        RuntimeCommand::Apply(a) => {
            if matches!(a.store.url()?, StoreUrl::Memory) && !a.dry_run {
                anyhow::bail!(BadInput(
                    "--store memory: keeps nothing past this command, so nothing would run what \
                     apply declares: accepted sqlite:DIR or etcd://HOST:PORT (or --dry-run)"
                        .into()
                ));
            }
            let text = if a.file.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin().lock())
                    .context("reading the workloads from standard input")
            } else {
                std::fs::read_to_string(&a.file)
                    .with_context(|| format!("reading {}", a.file.display()))
            }
            .map_err(|e| BadInput(format!("{e:#}")))?;
            let specs = setpoint_runtime::parse_workloads(&text)
                .with_context(|| format!("{} was not applied", a.file.display()))?;
            if a.dry_run {
                let mut text = String::new();
                for (name, change) in ops::apply_preview(&*a.store.open_read_only()?, &specs)? {
                    match change {
                        None => writeln!(text, "workload {name}: would be created")?,
                        Some(c) if c.is_empty() => writeln!(text, "workload {name}: unchanged")?,
                        Some(c) => writeln!(text, "workload {name}: {}", c.join("; "))?,
                    }
                }
                return Ok(text);
            }
            let out = ops::apply(&*a.store.open()?, &specs)?;
            let mut text = String::new();
            for (verb, names) in [
                ("created", &out.created),
                ("updated", &out.updated),
                ("unchanged", &out.unchanged),
            ] {
                for n in names {
                    writeln!(text, "workload {n} {verb}")?;
                }
            }
            Ok(text)
        }
        RuntimeCommand::Get(a) => {
            let store = a.store.open_read_only()?;
            if a.workload.as_deref() == Some("copies") {
                let of = a.copies_of.as_deref();
                return crate::inspect::watch(&a.watch, || {
                    crate::inspect::copies_view(&*store, of, a.format)
                });
            }
            if let Some(extra) = &a.copies_of {
                anyhow::bail!(BadInput(format!(
                    "unexpected '{extra}' after the workload: accepted 'get [WORKLOAD]' or \
                     'get copies [WORKLOAD]'"
                )));
            }
            crate::inspect::watch(&a.watch, || {
                let all = ops::get(&*store, a.workload.as_deref())?;
                let problems = ops::problems(&*store)?;
                let text = match a.format {
                    Format::Json => crate::output::json_with_schema(
                        &serde_json::json!({ "workloads": all, "problems": problems }),
                    )?,
                    Format::Table => get_table(&all) + &problem_lines(&problems),
                    Format::Csv => crate::records::csv(
                        &crate::records::get_records(&all),
                        crate::records::GET_KEYS,
                    ),
                };
                Ok((serde_json::to_value(&all)?, text))
            })
        }
        RuntimeCommand::Describe(a) => crate::inspect::describe(&a, &*a.store.open_read_only()?),
        RuntimeCommand::Events(a) => crate::inspect::events(&a, &*a.store.open_read_only()?),
        RuntimeCommand::Delete(a) => {
            ops::delete(&*a.store.open_existing()?, &a.workload)?;
            Ok(format!("workload {} deleted\n", a.workload))
        }
        RuntimeCommand::Kill(a) => {
            let store = a.store.open_existing()?;
            ops::require_declared(&*store, &a.workload)?;
            let (workload, count) = (a.workload.clone(), a.count);
            let outcomes = (|| {
                let batch = remote::request_kills(&*store, &workload, count, KILL_WAIT * 2)?;
                remote::await_kills(&*store, &batch, KILL_WAIT)
            })()
            .context("killing copies")?;
            if outcomes.is_empty() {
                anyhow::bail!("no live node reports a running copy of '{}'", a.workload);
            }
            if (outcomes.len() as u64) < a.count {
                // Asked for more than run: say so, as the killed lines alone would not.
                eprintln!(
                    "note: only {} of '{}' {} running: asked to kill {}, killing {}",
                    plural(outcomes.len() as u64, "copy", "copies"),
                    a.workload,
                    if outcomes.len() == 1 { "was" } else { "were" },
                    a.count,
                    outcomes.len()
                );
            }
            let mut out = String::new();
            let mut unanswered = Vec::new();
            for (copy, outcome) in &outcomes {
                match outcome {
                    // One word per line to script against, as before the kill went remote.
                    Some(o) if o.starts_with("killed ") => writeln!(out, "killed {copy}")?,
                    Some(o) => writeln!(out, "not killed {copy}: {o}")?,
                    None => unanswered.push(copy.as_str()),
                }
            }
            if !unanswered.is_empty() {
                print!("{out}");
                anyhow::bail!(
                    "no agent carried out the kill of {} within {}: is its node cut off?",
                    unanswered.join(", "),
                    format_duration(KILL_WAIT)
                );
            }
            Ok(out)
        }
        RuntimeCommand::Logs(a) => logs(&a),
        RuntimeCommand::Node(NodeCommand::Forget(a)) => {
            let store = a.store.open_existing()?;
            let (rec, released) = setpoint_runtime::model::node::forget(&*store, &a.node)?;
            Ok(format!(
                "node {} forgotten at revision {}: {} released; their named \
                 copies start again on live nodes\n",
                rec.node,
                rec.revision,
                plural(released as u64, "assignment", "assignments")
            ))
        }
        RuntimeCommand::Status(a) => {
            let store = a.store.open_read_only()?;
            crate::inspect::watch(&a.watch, || {
                let s = ops::status(&*store)?;
                let text = match a.format {
                    Format::Json => crate::output::json_with_schema(&s)?,
                    Format::Table => status_table(&s) + &problem_lines(&s.problems),
                    Format::Csv => crate::records::csv(
                        &crate::records::status_records(&s),
                        crate::records::STATUS_KEYS,
                    ),
                };
                Ok((serde_json::to_value(&s)?, text))
            })
        }
    }
}

/// One line per stored record left out as a problem: `problem {key}: {reason}`.
fn problem_lines(problems: &std::collections::BTreeMap<String, String>) -> String {
    problems
        .iter()
        .map(|(k, r)| format!("problem {k}: {r}\n"))
        .collect()
}

fn logs(a: &LogsArgs) -> anyhow::Result<String> {
    use setpoint_runtime::logs as copy_logs;
    use std::io::Write as _;
    let state = a.store.state_dir();
    if !copy_logs::valid_copy_name(&a.copy) {
        anyhow::bail!(BadInput(format!(
            "'{}' is not a copy name: accepted a copy as 'setpoint get copies' lists it, e.g. web-3",
            a.copy
        )));
    }
    let local = copy_logs::log_path(&state, &a.copy);
    let held = local.exists() || setpoint_runtime::retention::rotated(&local).exists();
    if a.through_store || !held {
        return logs_through_store(a);
    }
    let Some(text) = copy_logs::read(&state, &a.copy, a.tail)? else {
        anyhow::bail!(BadInput(format!(
            "no log of copy '{}' in {}: accepted a copy of this data directory, as 'setpoint get copies' lists it (a log is removed a retention period after its copy ended)",
            a.copy,
            state.join("logs").display()
        )));
    };
    if !a.follow {
        return Ok(String::from_utf8_lossy(&text).into_owned());
    }
    let mut out = std::io::stdout().lock();
    out.write_all(&text).and_then(|()| out.flush())?;
    let mut f = copy_logs::Follower::new(&state, &a.copy);
    // Until the copy has ended, as its agent's state file says, and everything is printed.
    loop {
        let running = setpoint_runtime::agent::read_all_node_states(&state)
            .iter()
            .flat_map(|s| &s.copies)
            .any(|r| {
                r.assignment.copy == a.copy && r.phase != setpoint_runtime::model::Phase::Exited
            });
        let more = f.poll()?;
        out.write_all(&more).and_then(|()| out.flush())?;
        if !running && more.is_empty() {
            return Ok(String::new());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `logs` through the store: the agent of the copy's node reads its log for us
/// (setpoint_runtime::log_requests), a chunk at a time.
fn logs_through_store(a: &LogsArgs) -> anyhow::Result<String> {
    use setpoint_runtime::log_requests::{LogReadError, LogReader, FOLLOW_POLL};
    use std::io::Write as _;
    let store = a.store.open_existing()?;
    let bad = |e: LogReadError| -> anyhow::Error {
        match e {
            LogReadError::NoCopy(_)
            | LogReadError::NoAgent { .. }
            | LogReadError::Refused { .. } => BadInput(e.to_string()).into(),
            e => e.into(),
        }
    };
    let mut reader = LogReader::open(store.as_ref(), &a.copy, a.answer_timeout).map_err(bad)?;
    let mut out = std::io::stdout().lock();
    let mut from = 0;
    let mut tail = a.tail.map(|t| t as u64);
    let mut first = true;
    loop {
        let answer = reader.fetch(from, tail.take()).map_err(bad)?;
        if answer.missing && first {
            anyhow::bail!(BadInput(format!(
                "no log of copy '{}' on node {}: accepted a copy as 'setpoint get copies' lists it (a log is removed a retention period after its copy ended)",
                a.copy,
                reader.node()
            )));
        }
        first = false;
        let bytes = answer.bytes().ok_or_else(|| {
            anyhow::anyhow!("the agent of node {} sent damaged hex", reader.node())
        })?;
        out.write_all(&bytes).and_then(|()| out.flush())?;
        from = answer.next();
        let caught_up = from >= answer.len;
        if caught_up && (!a.follow || !answer.running) {
            return Ok(String::new());
        }
        if caught_up {
            std::thread::sleep(FOLLOW_POLL);
        }
    }
}

/// `setpoint agent --simulate-nodes N`: N simulated agents in this process.
fn simulated_nodes(a: &AgentArgs, nodes: u32) -> anyhow::Result<String> {
    if !a.flags.simulate_copies {
        anyhow::bail!(BadInput(
            "--simulate-nodes runs simulated copies only: add --simulate-copies (real processes \
             need one agent per node)"
                .into()
        ));
    }
    let first = a.simulate_first.unwrap_or(1);
    let last = first.saturating_add(nodes - 1);
    if last > setpoint_runtime::agent::MAX_SIMULATED_NODES {
        anyhow::bail!(BadInput(format!(
            "--simulate-first {first} --simulate-nodes {nodes}: the last node would be number \
             {last}; accepted numbers 1 to {}",
            setpoint_runtime::agent::MAX_SIMULATED_NODES
        )));
    }
    let mut cfg = a.flags.config("sim", &a.store.state_dir());
    cfg.started_ms = Some(setpoint_runtime::store::wall_ms());
    let url = a.store.url()?;
    let observing = a.observe.start()?;
    cfg.metrics = observing.sink();
    serve(|shutdown| async move {
        let who = format!(
            "agents {}…{}",
            setpoint_runtime::agent::simulated_node_name(first, last),
            setpoint_runtime::agent::simulated_node_name(last, last)
        );
        observing.spawn(&who, shutdown.clone());
        setpoint_runtime::agent::run_simulated_nodes(&url, cfg, first, nodes, shutdown).await?;
        Ok(())
    })?;
    Ok(String::new())
}

fn up(a: &UpArgs) -> anyhow::Result<String> {
    let mut ccfg = a.controller.config()?;
    a.agent.check()?;
    let url = a.store.url()?;
    let state_dir = a.store.state_dir();
    let mut agents: Vec<AgentConfig> = (1..=a.nodes)
        .map(|i| a.agent.config(&format!("node-{i}"), &state_dir))
        .collect();
    // A second `up` on a data directory whose nodes run is refused by its agents' locks; ask
    // the locks first, so that the refused one writes nothing into the running one's up.log.
    if state_dir.is_dir() {
        for cfg in &agents {
            setpoint_runtime::model::node::DirLock::acquire(&state_dir, &cfg.node)
                .map_err(|e| BadInput(e.to_string()))?;
        }
    }
    let observing = a.observe.start()?;
    // One endpoint for the whole cluster: the agents' series are labelled by node.
    ccfg.metrics = observing.sink();
    for cfg in &mut agents {
        cfg.metrics = observing.sink();
    }
    let up_log = a.store.data_dir.join("up.log");
    setpoint_runtime::rt::log_to_file(&up_log)
        .with_context(|| format!("opening {}", up_log.display()))?;
    setpoint_runtime::rt::say(&format!(
        "setpoint up: a controller and {} on {url}; Ctrl-C stops everything; log in {}",
        plural(a.nodes.into(), "agent", "agents"),
        up_log.display()
    ));
    serve(|shutdown| async move {
        observing.spawn("setpoint up", shutdown.clone());
        let Some(store) = url
            .open_retrying(OpenMode::Create, "setpoint up", shutdown.clone())
            .await?
        else {
            return Ok(());
        };
        // The parts stop on the user's signal, and also when one of them fails (a refused node
        // name, a lost store), so that `up` never runs on with a part missing.
        let (stop_all, parts) = setpoint_runtime::shutdown_pair();
        let stop_all = Arc::new(stop_all);
        {
            let (stop_all, mut outer) = (Arc::clone(&stop_all), shutdown.clone());
            tokio::spawn(async move {
                outer.wait().await;
                stop_all.fire();
            });
        }
        let shutdown = parts;
        let mut tasks = tokio::task::JoinSet::new();
        for cfg in agents {
            let (store, shutdown) = (Arc::clone(&store), shutdown.clone());
            tasks.spawn(async move {
                run_agent(store, cfg, shutdown)
                    .await
                    .map_err(anyhow::Error::from)
            });
        }
        tasks.spawn(async move {
            run_controller(store, ccfg, shutdown)
                .await
                .map_err(anyhow::Error::from)
        });
        // Every part ends by itself (a lost store stops each of them): wait for all, so that no
        // agent is cut off before it has stopped its copies, then report the first failure.
        let mut first = None;
        while let Some(done) = tasks.join_next().await {
            if let Err(e) = done.map_err(anyhow::Error::from).and_then(|r| r) {
                // A lost store stops every part by itself, each saying so; any other failure
                // (a refused node name) stops the others here.
                let lost = e.chain().any(|c| {
                    c.downcast_ref::<setpoint_runtime::StoreError>()
                        .is_some_and(|s| s.is_lost())
                        || c.downcast_ref::<setpoint_runtime::AgentError>().is_some_and(|a| {
                            matches!(a, setpoint_runtime::AgentError::Store(s) if s.is_lost())
                        })
                });
                if !lost {
                    stop_all.fire();
                }
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    })?;
    Ok(String::new())
}

/// Runs `body` on a tokio runtime until it ends; SIGINT (Ctrl-C), SIGTERM or SIGHUP fires its
/// shutdown signal and waits for it to finish cleanly. Nothing on this path writes with
/// `eprintln!`, so a closed stderr cannot cut the cleanup short.
fn serve<F, Fut>(body: F) -> anyhow::Result<()>
where
    F: FnOnce(setpoint_runtime::Shutdown) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let (trigger, shutdown) = shutdown_pair();
        let mut work = tokio::spawn(body(shutdown));
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
        let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
        let mut hup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
        let why = tokio::select! {
            done = &mut work => return done.context("the runtime task failed")?,
            _ = int.recv() => "SIGINT",
            _ = term.recv() => "SIGTERM",
            _ = hup.recv() => "SIGHUP",
        };
        setpoint_runtime::rt::say(&format!("setpoint: {why}: shutting down"));
        trigger.fire();
        work.await.context("the runtime task failed")?
    })
}
