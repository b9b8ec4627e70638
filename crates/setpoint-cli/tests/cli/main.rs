//! The one integration-test binary of the CLI crate: every test here runs the real `setpoint`
//! binary. Each module is one area.
//!
//! # Layout
//! - [`harness`]: the one real-process harness: the runtime's parts as child processes, one
//!   bounded wait, one-shot commands and their JSON, the copies found by their mark.
//! - [`calibrate`]: `setpoint calibrate` on the shipped samples, `empirical:FILE` in `run`,
//!   `sweep` and `advise`, the calibration picture, refused measurements.
//! - [`chaos`]: `setpoint chaos` as a command (bad models, flags, replays, thread counts,
//!   records, the event budget) and `plot timeline` of a replay file.
//! - [`copy_view`]: `get copies`, `events`, `describe` and `--watch` on a running cluster
//!   (issue 23.1).
//! - [`crash_loop`]: every uncommanded exit backs off and shows crash-looping; a commanded kill
//!   is replaced at once; a returning node costs no healthy copy (issue 22, items 3 and 5).
//! - [`commandline`]: missing-argument messages, completions, the manual page and help.
//! - [`hardening`]: a store that cannot be lost silently, an agent that trusts nothing it is
//!   handed, and `apply` refusing what can never run (issue 14).
//! - [`hostile`]: values written straight into the store beside a healthy workload, on etcd and
//!   SQLite: each harms only its own key (issue 25, part 6).
//! - [`heatmap_models`]: `plot heatmap --delay-model`, rows of models against the sweep.
//! - [`jitter_real`]: `experiment lesson --real --delay-model`: drawn report delays on real processes.
//! - [`lab_cmd`]: the binary as a command (status, stdout, one-line refusals) for issue 12's later modules.
//! - [`long_work`]: chaos --runs over its budget, no progress without a terminal, a chaos
//!   search stopped by a signal printing what it has (issue 25).
//! - [`lesson`]: golden lesson outputs, formats, exit codes and messages, plots and reports.
//! - [`logs_remote`]: `logs COPY --store …` from a host without the files, on SQLite and etcd.
//! - [`metrics`]: `/metrics` of a real cluster scraped, its report lag calibrated from the live
//!   URL and predicted with; JSON logs; refused `--metrics-addr` (issue 26).
//! - [`limits`]: the audit's corpus of inputs over the limits of docs/limits.md.
//! - [`pictures`]: `-o` formats (SVG, PNG, HTML, stdout) and the shapes in the pictures.
//! - [`schema_rules`]: docs/output.md held on every data command's JSON, CSV and table.
//! - [`scenarios`]: scenario files, seeds, Monte Carlo, flags over files.
//! - [`sweep`]: `setpoint sweep` rows, summaries and determinism.
//! - [`sweep_file`]: `sweep FILE.toml`, the grid flags over the file.
//! - [`shards`]: shard trailers, and `merge` refusing a missing, cut-off or foreign shard.
//! - [`runtime`]: the runtime as a cluster of real processes on a SQLite store.
//! - [`readme`]: every command of README.md run as written, its shown output compared.
//! - [`reality`]: model against reality, `measure`, and the failpoint matrix.
//! - [`ops_cmds`]: `kill` past the running copies or of a missing workload, `apply -f -`,
//!   `apply --store memory:`, a refused second `up` (issue 23).
//! - [`cluster`]: node leases, lost nodes, fencing, one agent per node name.
//! - [`fence`]: an agent stopped past its node lease: its `named` copies held, never run
//!   twice; `node forget` refusing bad input.
//! - [`netns`]: agents and etcd members on separate hosts (network namespaces): partitions,
//!   quorum loss, a paused leader.
//! - [`store`]: `--store URL` on every runtime command; the runtime on etcd.
//! - [`output`]: the one output schema, pinned by snapshots.
//! - [`full_disk`]: the SQLite store on a 2 MiB filesystem and a full disk: the log stays
//!   small, leases survive, writes resume once space is freed (issue 25 part 4; root only).
//! - [`formats`]: `--format csv` of `experiment`, `measure`, `get` and `status`.
//! - [`distributed`]: sharded sweeps merged back, as a Kubernetes Indexed Job and a Slurm array.
//! - [`trust`]: crash-loop backoff, clean shutdown through a closed pipe, idle reasons, refused
//!   settings (issue 11).
//! - [`update`]: the lab's `update` event against the runtime's rolling update: surge and the
//!   order and times of replacements; bad update settings in a scenario file.

mod calibrate;
mod chaos;
mod chaos_agree;
mod cluster;
mod commandline;
mod copy_view;
mod crash_loop;
mod distributed;
mod fence;
mod formats;
mod full_disk;
mod hardening;
mod harness;
mod heatmap_models;
mod hostile;
mod jitter_real;
mod lab_cmd;
mod lesson;
mod limits;
mod logs_remote;
mod long_work;
mod metrics;
mod netns;
mod ops_cmds;
mod output;
mod pictures;
mod pipeline;
mod readme;
mod reality;
mod runtime;
mod scale;
mod scenarios;
mod schema_rules;
mod shards;
mod store;
mod sweep;
mod sweep_file;
mod trust;
mod update;
