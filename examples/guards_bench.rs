//! Times the guards' judgement of one agent step for ci/bench-guards.sh, side by side with
//! `git status` on the same repository:
//! `guards_bench REPO STATE_DIR RUN_DIR ROUNDS PATH...` prepares the baseline of REPO's HEAD (t0)
//! under STATE_DIR, creates a workspace in RUN_DIR, copies each PATH as REPO's working tree has it
//! (the agent's change, which the script made there) into the workspace's upper layer, computes
//! the once-per-run facts of t0 (A0, H0, the interpreter's module names), then alternates ROUNDS
//! times: the snapshot of the workspace, the metric-integrity and tampering guards on it, the
//! awareness guard on it (timed on its own as well), and `git status --porcelain` in REPO. Prints one JSON object with the medians (ms). A guard that
//! objects is an error: the changes the script makes are honest ones.

use loopexec::analysis::surface::SurfaceSpec;
use loopexec::analysis::{Limits, RuleSet};
use loopexec::engine::analysis_guards::{
    self, AnalysisBaseline, AwarenessGuard, MetricIntegrityGuard, TamperingGuard, TreeFiles,
};
use loopexec::engine::guards::{AgentStep, Guard};
use loopexec::safefs::SafeDir;
use loopexec::workspace::{Baseline, BaselineOptions, Workspace};
use std::path::PathBuf;
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(repo), Some(state), Some(run), Some(rounds)) = (
        args.first(),
        args.get(1),
        args.get(2),
        args.get(3).and_then(|r| r.parse::<usize>().ok()),
    ) else {
        eprintln!("usage: guards_bench REPO STATE_DIR RUN_DIR ROUNDS PATH...");
        std::process::exit(2);
    };
    let changed = &args[4..];
    let repo = PathBuf::from(repo);
    let owner = nix::unistd::geteuid().is_root().then_some((60200, 60200));
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1000.0;
    let result = (|| -> Result<String, Box<dyn std::error::Error>> {
        let baseline = Baseline::prepare(
            &repo,
            &SafeDir::open(std::path::Path::new(state))?,
            &BaselineOptions {
                base_commit: None,
                include_uncommitted: false,
                owner,
            },
        )?;
        let ws = Workspace::create(
            baseline,
            &SafeDir::open(std::path::Path::new(run))?,
            owner,
            None,
        )?;
        // What the agent wrote belongs to the zone's uid, as the agent's own writes would.
        let upper = ws.upper_dir().to_path_buf();
        let give = |p: &std::path::Path| -> std::io::Result<()> {
            owner.map_or(Ok(()), |(u, g)| {
                std::os::unix::fs::chown(p, Some(u), Some(g))
            })
        };
        for path in changed {
            let mut dir = upper.clone();
            let components: Vec<&str> = path.split('/').collect();
            for c in &components[..components.len() - 1] {
                dir.push(c);
                if !dir.exists() {
                    std::fs::create_dir(&dir)?;
                    give(&dir)?;
                }
            }
            let to = upper.join(path);
            std::fs::copy(repo.join(path), &to)?;
            give(&to)?;
        }
        let files = TreeFiles {
            t0_dir: ws.baseline().files_dir.clone(),
            upper: ws.upper_dir().to_path_buf(),
        };
        let t0 = ws.baseline().manifest()?;
        let limits = Limits::default();
        let spec = SurfaceSpec::new(&[])?;
        let start = Instant::now();
        let facts = AnalysisBaseline::of_t0(&files, t0, &spec, limits)?;
        let python_modules = analysis_guards::has_python(t0)
            .then(|| analysis_guards::python_module_names(&files.t0_dir))
            .transpose()?;
        let t0_facts_ms = ms(start);
        let assertions = facts.assertions;
        let mut guards: Vec<Box<dyn Guard>> = vec![
            Box::new(MetricIntegrityGuard::new(
                files.clone(),
                facts,
                spec,
                limits,
                Ok(python_modules),
            )),
            Box::new(TamperingGuard::new(files.clone(), RuleSet::all(), limits)),
        ];
        let mut awareness = AwarenessGuard::new(files, Default::default(), limits);
        let workspace_limits = sandbox::policy::WorkspaceLimits::default();
        let (mut snapshot_ms, mut guards_ms, mut awareness_ms, mut git_ms) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut changes = 0;
        for _ in 0..rounds {
            let start = Instant::now();
            let snapshot = ws.snapshot(&workspace_limits)?;
            snapshot_ms.push(ms(start));
            changes = snapshot.changes(t0).len();
            let step = AgentStep {
                iteration: 1,
                exec: None,
                workspace: Some((&snapshot, t0)),
            };
            let start = Instant::now();
            let objections: Vec<_> = guards
                .iter_mut()
                .filter_map(|g| g.after_agent(&step))
                .collect();
            let integrity_and_tampering = ms(start);
            let start = Instant::now();
            let observed = awareness.after_agent(&step);
            let awareness_now = ms(start);
            awareness_ms.push(awareness_now);
            guards_ms.push(integrity_and_tampering + awareness_now);
            if let Some(o) = observed {
                return Err(format!(
                    "the awareness guard found observations in the honest change: {o:?}"
                )
                .into());
            }
            if !objections.is_empty() {
                return Err(
                    format!("a guard objected to the honest change: {objections:?}").into(),
                );
            }
            let start = Instant::now();
            let status = std::process::Command::new("git")
                .arg("-C")
                .arg(&repo)
                .args(["status", "--porcelain"])
                .stdout(std::process::Stdio::null())
                .status()?;
            git_ms.push(ms(start));
            if !status.success() {
                return Err(format!("git status: {status}").into());
            }
        }
        Ok(serde_json::json!({
            "entries": t0.len(),
            "changes": changes,
            "assertions_t0": assertions,
            "t0_facts_ms": t0_facts_ms,
            "snapshot_ms": median(snapshot_ms),
            "guards_ms": median(guards_ms),
            "awareness_ms": median(awareness_ms),
            "git_status_ms": median(git_ms),
        })
        .to_string())
    })();
    match result {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("guards_bench: {e}");
            std::process::exit(1);
        }
    }
}
