//! The examples under examples/ (issue 23, item 6) run as their READMEs say: each copied into a
//! fresh git repository and run with its own loop.toml in the native sandbox (the default
//! isolation), converging with a shrinking failing set read from its runner's own evidence.
mod common;
use common::*;
use std::path::{Path, PathBuf};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name)
}

/// Copies the tree at `from` into `to`, leaving out build output (`target/`).
fn copy_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type().unwrap().is_dir() {
            if entry.file_name() == "target" {
                continue;
            }
            std::fs::create_dir_all(&dst).unwrap();
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// The example copied into a fresh directory and committed as t0, as its README says.
fn checkout(name: &str) -> tempfile::TempDir {
    let dir = workdir();
    copy_tree(&example(name), dir.path());
    commit_t0(dir.path());
    dir
}

/// The failing-set size of each iteration's check, in order.
fn failing_counts(dir: &Path, run_id: &str) -> Vec<u64> {
    events(dir, run_id)
        .iter()
        .filter(|e| e["type"] == "check_result")
        .map(|e| e["failing_count"].as_u64().unwrap())
        .collect()
}

/// Asserts the run halted `success_condition_met` (exit 10) after `iterations`, sandboxed.
fn assert_succeeded_sandboxed(r: &Ran, iterations: u64) {
    assert_eq!(r.code, 10, "{r:?}");
    let v = r.json();
    assert_eq!(
        (v["halt_reason"].as_str(), v["iteration"].as_u64()),
        (Some("success_condition_met"), Some(iterations)),
        "{v}"
    );
    assert_eq!(v["run"]["isolation"], "native", "the loop runs sandboxed");
}

/// Runs the example's loop with its own loop.toml and asserts it converged sandboxed in three
/// iterations with `counts` failing, its last check reading `collected` tests.
fn assert_converges(dir: &Path, counts: [u64; 3], collected: u64) {
    let r = loopexec(dir, &["run", "--json", "--run-id", "example"]);
    assert_succeeded_sandboxed(&r, 3);
    assert_eq!(failing_counts(dir, "example"), counts);
    let ev = events(dir, "example");
    let last = ev
        .iter()
        .rev()
        .find(|e| e["type"] == "check_result")
        .unwrap();
    assert_eq!(last["collected_count"], collected, "{last}");
}

/// A Debian package's program the example's check runs, or a failure naming it (ci/setup.sh
/// installs it as root).
fn require(program: &str, package: &str) {
    assert!(
        Path::new(program).exists(),
        "{program} is missing: install Debian's {package} (ci/setup.sh does as root)"
    );
}

#[test]
fn the_rust_crate_example_converges_in_three_iterations_with_debians_cargo_offline() {
    require("/usr/bin/cargo", "cargo");
    let dir = checkout("rust-crate");
    // libtest's seven unit tests, read from cargo's output.
    assert_converges(dir.path(), [2, 1, 0], 7);
}

#[test]
fn the_python_pytest_example_converges_in_three_iterations_from_its_junit_report() {
    require("/usr/lib/python3/dist-packages/pytest", "python3-pytest");
    let dir = checkout("python-pytest");
    // The JUnit report's seven test cases.
    assert_converges(dir.path(), [3, 1, 0], 7);
}

#[test]
fn the_node_test_example_converges_in_three_iterations_from_its_tap_report() {
    require("/usr/bin/node", "nodejs");
    let dir = checkout("node-test");
    // The TAP stream's seven test points.
    assert_converges(dir.path(), [3, 1, 0], 7);
}

// ---- examples/agents: the loop files for real agent CLIs, run against stubs of the same name ----

/// One agent CLI's configuration under examples/agents and what its stub proves.
struct AgentCli {
    /// Its directory under examples/agents.
    dir: &'static str,
    /// The stub's file name under tests/fixtures/agent_stubs (the CLI's command name).
    stub: &'static str,
    /// The fixture under tests/fixtures/agent_output the stub prints (or logs).
    output: &'static str,
    /// The key file the loop file's mint hook reads.
    key_file: &'static str,
    /// The variable the credential reaches the agent zone in.
    env: &'static str,
    /// The meter's source name and the run's money for one call of the fixture.
    source: &'static str,
    usd_micros: u64,
    basis: &'static str,
}

/// The agent's loop file and policy on examples/fizzbuzz's project, committed as t0 (the way its
/// README says to copy them into a repository).
fn agent_checkout(cli: &AgentCli) -> tempfile::TempDir {
    let dir = workdir();
    for file in ["fizzbuzz.sh", "check.sh", "expected.txt", "TASK.md"] {
        std::fs::copy(example("fizzbuzz").join(file), dir.path().join(file)).unwrap();
    }
    for file in ["loop.toml", "agent-policy.toml"] {
        std::fs::copy(
            example("agents").join(cli.dir).join(file),
            dir.path().join(file),
        )
        .unwrap();
    }
    commit_t0(dir.path());
    dir
}

/// A directory the zone can read holding the stub (with its library and fixture) and the key
/// it expects; and the example's agent policy with that directory bound read-only and first on
/// PATH, written beside them.
fn stub_bin(cli: &AgentCli, key: &str) -> (tempfile::TempDir, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let bin = tempfile::tempdir().unwrap();
    let stubs = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agent_stubs");
    for file in [cli.stub, "stub-lib.sh"] {
        std::fs::copy(stubs.join(file), bin.path().join(file)).unwrap();
    }
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/agent_output")
            .join(cli.output),
        bin.path().join(cli.output),
    )
    .unwrap();
    std::fs::write(bin.path().join("expected-key"), key).unwrap();
    std::fs::set_permissions(bin.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let text =
        std::fs::read_to_string(example("agents").join(cli.dir).join("agent-policy.toml")).unwrap();
    let mut policy: toml::Table = text.parse().unwrap();
    let stub_dir = path_str(bin.path());
    let read_only = policy["filesystem"]["read_only"]
        .as_array()
        .unwrap()
        .clone();
    policy["filesystem"].as_table_mut().unwrap().insert(
        "read_only".into(),
        toml::Value::Array([vec![toml::Value::String(stub_dir.clone())], read_only].concat()),
    );
    let set = policy["env"]["set"].as_table_mut().unwrap();
    let path = format!("{stub_dir}:{}", set["PATH"].as_str().unwrap());
    set.insert("PATH".into(), toml::Value::String(path));
    let policy_path = bin.path().join("policy.toml");
    std::fs::write(&policy_path, toml::to_string(&policy).unwrap()).unwrap();
    (bin, policy_path)
}

/// Runs the agent CLI's loop file against its stub: the credential minted from the key file
/// reaches the stub, the stub's fix converges the loop in one iteration, its output is metered
/// as the CLI's, and the credential is revoked at the halt.
fn assert_agent_cli_converges(cli: &AgentCli) {
    let dir = agent_checkout(cli);
    let key = format!("sk-loopexec-example-{}", cli.stub);
    let (bin, policy) = stub_bin(cli, &key);
    let keys = tempfile::tempdir().unwrap();
    std::fs::write(keys.path().join(cli.key_file), &key).unwrap();
    let out = command()
        .current_dir(dir.path())
        .env("AGENT_KEYS", keys.path())
        .args(["run", "--json", "--run-id", "agent", "--policy"])
        .arg(&policy)
        .output()
        .unwrap();
    assert_succeeded_sandboxed(&from_output(out), 1);
    let ev = events(dir.path(), "agent");
    let minted = ev
        .iter()
        .find(|e| e["type"] == "credential_minted")
        .unwrap_or_else(|| panic!("no credential_minted: {ev:#?}"));
    assert_eq!(minted["env"], cli.env);
    assert!(
        ev.iter().any(|e| e["type"] == "credential_revoked"),
        "{ev:#?}"
    );
    let revoked =
        std::fs::read_to_string(keys.path().join(cli.key_file.replace(".key", ".revoked")))
            .unwrap();
    assert_eq!(revoked, "agent\n", "the revoke hook ran once, for this run");
    let usage: Vec<&serde_json::Value> = ev.iter().filter(|e| e["type"] == "usage").collect();
    assert_eq!(usage.len(), 1, "{ev:#?}");
    assert_eq!(
        (usage[0]["usd_micros"].as_u64(), usage[0]["basis"].as_str()),
        (Some(cli.usd_micros), Some(cli.basis)),
        "{}",
        usage[0]
    );
    assert_eq!(usage[0]["sources"][0]["name"], cli.source, "{}", usage[0]);
    drop(bin);
}

#[test]
fn the_claude_code_loop_file_converges_against_a_claude_stub_metering_its_json_result() {
    // claude.json's per-model costUSD, 0.00132 + 0.07549785, each rounded up to the micro-USD.
    assert_agent_cli_converges(&AgentCli {
        dir: "claude-code",
        stub: "claude",
        output: "claude.json",
        key_file: "anthropic.key",
        env: "ANTHROPIC_API_KEY",
        source: "claude_json",
        usd_micros: 1_320 + 75_498,
        basis: "reported",
    });
}

#[test]
fn the_codex_loop_file_converges_against_a_codex_stub_pricing_its_last_turn() {
    // The last turn.completed at the loop file's gpt-5-codex prices: 3106 input x 1.25 + 28416
    // cached x 0.125 + 1873 output x 10 per million tokens = 0.0261645, rounded up.
    assert_agent_cli_converges(&AgentCli {
        dir: "codex",
        stub: "codex",
        output: "codex.jsonl",
        key_file: "openai.key",
        env: "CODEX_API_KEY",
        source: "codex_json",
        usd_micros: 26_165,
        basis: "priced",
    });
}

#[test]
fn the_aider_loop_file_converges_against_an_aider_stub_metering_its_analytics_log() {
    // The two message_send events' cost, 0.01812 + 0.022347.
    assert_agent_cli_converges(&AgentCli {
        dir: "aider",
        stub: "aider",
        output: "aider_analytics.jsonl",
        key_file: "anthropic.key",
        env: "ANTHROPIC_API_KEY",
        source: "aider_analytics",
        usd_micros: 18_120 + 22_347,
        basis: "reported",
    });
}
