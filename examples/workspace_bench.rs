//! Times the creation of a workspace for ci/bench-workspace.sh:
//! `workspace_bench REPO STATE_DIR RUN_DIR` prepares the baseline of REPO's HEAD under STATE_DIR
//! (cold when absent, warm when cached), creates the run's overlay directories in RUN_DIR, takes
//! two snapshots of the untouched workspace (the first loads the
//! baseline manifest), and prints one JSON object with the timings (ms) and
//! the overlay layers. When run as root, the layers are owned by the zone uid 60200.

use loopexec::safefs::SafeDir;
use loopexec::workspace::{Baseline, BaselineOptions, Workspace};
use std::path::PathBuf;
use std::time::Instant;

fn main() {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [repo, state, run] = args.as_slice() else {
        eprintln!("usage: workspace_bench REPO STATE_DIR RUN_DIR");
        std::process::exit(2);
    };
    let owner = nix::unistd::geteuid().is_root().then_some((60200, 60200));
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1000.0;
    let result = (|| -> Result<String, Box<dyn std::error::Error>> {
        let state = SafeDir::open(state)?;
        let run = SafeDir::open(run)?;
        let t0 = Instant::now();
        let baseline = Baseline::prepare(
            repo,
            &state,
            &BaselineOptions {
                base_commit: None,
                include_uncommitted: false,
                owner,
            },
        )?;
        let baseline_ms = ms(t0);
        let reused = baseline.reused;
        let t1 = Instant::now();
        let ws = Workspace::create(baseline, &run, owner, None)?;
        let workspace_ms = ms(t1);
        let total_ms = ms(t0);
        let limits = sandbox::policy::WorkspaceLimits::default();
        let t2 = Instant::now();
        let snap = ws.snapshot(&limits)?;
        let snapshot_ms = ms(t2);
        let t3 = Instant::now();
        let again = ws.snapshot(&limits)?;
        let snapshot_again_ms = ms(t3);
        assert_eq!(again.tree_id, snap.tree_id);
        let o = ws.agent_overlay(std::path::Path::new("/ws"));
        Ok(serde_json::json!({
            "reused": reused,
            "baseline_ms": baseline_ms,
            "workspace_ms": workspace_ms,
            "total_ms": total_ms,
            "snapshot_ms": snapshot_ms,
            "snapshot_again_ms": snapshot_again_ms,
            "entries": snap.manifest.len(),
            "tree": snap.tree_id.to_hex(),
            "lower": o.lowers[0],
            "upper": o.upper,
            "work": o.work,
        })
        .to_string())
    })();
    match result {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("workspace_bench: {e}");
            std::process::exit(1);
        }
    }
}
