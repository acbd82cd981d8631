//! The CLI contract: one JSON object per outcome, exit classes, usage errors, loop.toml, init.
mod common;
use common::*;

const HOST: [&str; 2] = ["--isolation", "none"];

#[test]
fn a_computed_halt_prints_one_object_and_nothing_on_stderr() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--no-baseline",
            "--json",
            "--check",
            "true",
            "--exec",
            "true",
            HOST[0],
            HOST[1],
        ],
    );
    assert_eq!(r.code, 11, "{r:?}");
    assert_eq!(r.stderr, "", "a halt writes nothing on stderr");
    let v = r.json();
    assert_eq!(v["status"], "halted");
    assert_eq!(v["halt_reason"], "human_required");
    assert_eq!(v["exit_code"], 11);
    assert_eq!(v["errors"], serde_json::json!([]));
    assert_eq!(v["iteration"], 1);
    assert_eq!(v["check_exit"], 0);
    assert!(v["run_id"].as_str().unwrap().len() > 10);
    assert!(std::path::Path::new(v["receipt"].as_str().unwrap()).exists());
}

#[test]
fn an_unknown_flag_under_json_is_one_object_with_exit_20() {
    let dir = workdir();
    let r = loopexec(dir.path(), &["run", "--json", "--no-such-flag"]);
    assert_eq!(r.code, 20);
    let v = r.json();
    assert_eq!(v["status"], "error");
    assert_eq!(v["errors"][0]["code"], "usage");
    assert!(v["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("--no-such-flag"));
}

#[test]
fn an_unknown_command_and_a_bad_value_are_usage_errors() {
    let dir = workdir();
    for args in [
        vec!["--json", "frobnicate"],
        vec!["run", "--json", "--max-iterations", "many"],
        vec!["run", "--json", "--isolation", "chroot"],
    ] {
        let r = loopexec(dir.path(), &args);
        assert_eq!(r.code, 20, "{args:?}: {r:?}");
        assert_eq!(r.json()["errors"][0]["code"], "usage");
    }
}

#[test]
fn a_usage_error_without_json_goes_to_stderr_with_exit_20() {
    let dir = workdir();
    let r = loopexec(dir.path(), &["run", "--no-such-flag"]);
    assert_eq!(r.code, 20);
    assert_eq!(r.stdout, "");
    assert!(r.stderr.contains("--no-such-flag"));
}

#[test]
fn help_and_version_print_normally_and_exit_0() {
    let dir = workdir();
    let help = loopexec(dir.path(), &["--help"]);
    assert_eq!(help.code, 0);
    assert!(help.stdout.contains("Examples:"));
    let version = loopexec(dir.path(), &["--version", "--json"]);
    assert_eq!(version.code, 0);
    assert!(version.stdout.starts_with("loopexec "));
}

#[test]
fn native_isolation_is_the_default() {
    let dir = workdir();
    zone_writable(dir.path());
    let r = loopexec(
        dir.path(),
        &[
            "run", "--json", "--run-id", "r", "--check", "true", "--exec", "true",
        ],
    );
    assert_eq!(r.code, 10, "{}", r.stdout);
    let v = r.json();
    assert_eq!(v["run"]["isolation"], "native");
    let start = &events(dir.path(), "r")[0];
    assert_eq!(start["isolation"], "native");
    assert_eq!(start["config"]["agent_policy"]["source"], "builtin:agent");
    assert_eq!(start["config"]["check_policy"]["source"], "builtin:exec");
}

#[test]
fn a_run_without_an_operator_key_is_refused_before_anything_is_written() {
    let dir = workdir();
    let empty = workdir();
    let out = std::process::Command::new(bin())
        .current_dir(dir.path())
        .env("LOOPEXEC_CONFIG_DIR", empty.path())
        .args([
            "run", "--json", "--check", "true", "--exec", "true", HOST[0], HOST[1],
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(20));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("no operator key"));
    assert!(v["errors"][0]["hint"]
        .as_str()
        .unwrap()
        .contains("loopexec keygen"));
    assert!(
        !dir.path().join(".loopexec").exists(),
        "nothing is written without a key"
    );
}

#[test]
fn no_check_no_loop() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &["run", "--json", "--exec", "true", HOST[0], HOST[1]],
    );
    assert_eq!(r.code, 30);
    let v = r.json();
    assert_eq!(v["errors"][0]["code"], "workspace_invalid");
    assert!(v["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("no check"));
}

#[test]
fn run_ids_that_could_leave_the_runs_directory_are_refused() {
    let dir = workdir();
    let long = "a".repeat(65);
    for id in ["../x", "a/b", "", "..", long.as_str()] {
        let r = loopexec(
            dir.path(),
            &[
                "run", "--json", "--run-id", id, "--check", "true", "--exec", "true", HOST[0],
                HOST[1],
            ],
        );
        assert_eq!(r.code, 20, "{id:?}: {r:?}");
        assert_eq!(r.json()["errors"][0]["code"], "usage");
    }
    assert!(!dir.path().join("x").exists());
    assert!(!dir.path().join(".loopexec").exists());
}

#[test]
fn a_run_id_can_be_chosen_and_cannot_be_reused() {
    let dir = workdir();
    let args = [
        "run", "--json", "--run-id", "my-run.1", "--check", "true", "--exec", "true", HOST[0],
        HOST[1],
    ];
    let first = loopexec(dir.path(), &args);
    assert_eq!(first.json()["run_id"], "my-run.1");
    let second = loopexec(dir.path(), &args);
    assert_eq!(second.code, 20);
    assert!(second.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("already used"));
}

#[test]
fn init_writes_a_loop_file_that_run_uses_without_flags() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "init",
            "--json",
            "--check",
            "test -f done",
            "--exec",
            "touch done",
            "--isolation",
            "none",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json()["status"], "ok");
    assert!(dir.path().join(".loopexec").is_dir());
    let text = std::fs::read_to_string(dir.path().join("loop.toml")).unwrap();
    assert!(text.contains("# "), "the loop file is commented");
    let run = loopexec(dir.path(), &["run", "--json"]);
    assert_eq!(run.code, 11, "{run:?}");
    let start = &events(dir.path(), run.json()["run_id"].as_str().unwrap())[0];
    assert_eq!(start["config"]["check"], "test -f done");
    assert_eq!(
        start["config"]["loop_file"]["sha256"]
            .as_str()
            .unwrap()
            .len(),
        64
    );
}

#[test]
fn init_refuses_to_overwrite_without_force() {
    let dir = workdir();
    std::fs::write(dir.path().join("loop.toml"), "check = \"mine\"\n").unwrap();
    let r = loopexec(dir.path(), &["init", "--json"]);
    assert_eq!(r.code, 20);
    assert!(r.json()["errors"][0]["hint"]
        .as_str()
        .unwrap()
        .contains("--force"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("loop.toml")).unwrap(),
        "check = \"mine\"\n"
    );
    assert_eq!(loopexec(dir.path(), &["init", "--json", "--force"]).code, 0);
    assert_ne!(
        std::fs::read_to_string(dir.path().join("loop.toml")).unwrap(),
        "check = \"mine\"\n"
    );
}

#[test]
fn flags_override_the_loop_file() {
    let dir = workdir();
    std::fs::write(
        dir.path().join("loop.toml"),
        "check = \"false\"\nexec = \"true\"\nisolation = \"none\"\nmax_iterations = 2\n",
    )
    .unwrap();
    let r = loopexec(dir.path(), &["run", "--json", "--check", "true"]);
    assert_eq!(r.code, 10, "{r:?}");
    let from_file = loopexec(dir.path(), &["run", "--json"]);
    assert_eq!(from_file.json()["halt_reason"], "max_iterations_reached");
    assert_eq!(from_file.json()["iteration"], 2);
}

#[test]
fn an_unknown_key_in_the_loop_file_is_refused_with_its_line() {
    let dir = workdir();
    std::fs::write(
        dir.path().join("loop.toml"),
        "check = \"true\"\nexec = \"true\"\n\nmax_iteratons = 3\n",
    )
    .unwrap();
    let r = loopexec(dir.path(), &["run", "--json", "--isolation", "none"]);
    assert_eq!(r.code, 20);
    let message = r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.starts_with("loop.toml line 4:"), "{message}");
    assert!(message.contains("max_iteratons"), "{message}");
}

#[test]
fn a_bad_type_in_the_loop_file_is_refused_with_its_line() {
    let dir = workdir();
    std::fs::write(
        dir.path().join("loop.toml"),
        "check = \"true\"\nmax_iterations = \"ten\"\n",
    )
    .unwrap();
    let r = loopexec(
        dir.path(),
        &["run", "--json", "--isolation", "none", "--exec", "true"],
    );
    assert_eq!(r.code, 20);
    assert!(r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .starts_with("loop.toml line 2:"));
}

#[test]
fn pins_are_recorded_in_run_start() {
    let dir = workdir();
    std::fs::write(dir.path().join("PROMPT.md"), "fix it").unwrap();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--check",
            "true",
            "--exec",
            "true",
            "--isolation",
            "none",
            "--model-provider",
            "acme",
            "--model-id",
            "m1",
            "--model-version",
            "2026-01",
            "--temperature",
            "0.2",
            "--seed",
            "7",
            "--max-tokens",
            "100",
            "--context-file",
            "PROMPT.md",
            "--cost-usd",
            "0.5",
            "--exec-timeout",
            "30",
            "--check-timeout",
            "20",
        ],
    );
    assert_eq!(r.code, 10, "{r:?}");
    let start = &events(dir.path(), r.json()["run_id"].as_str().unwrap())[0];
    assert_eq!(start["type"], "run_start");
    assert_eq!(start["mode"], "check_fixpoint");
    assert_eq!(start["isolation"], "none");
    assert_eq!(start["loopexec_version"], env!("CARGO_PKG_VERSION"));
    let c = &start["config"];
    assert_eq!(
        c["model"],
        serde_json::json!({"provider": "acme", "id": "m1", "version": "2026-01"})
    );
    assert_eq!(
        c["sampling"],
        serde_json::json!({"temperature": 0.2, "seed": 7, "max_tokens": 100})
    );
    assert_eq!(c["context_files"][0]["sha256"], sha256_hex(b"fix it"));
    assert_eq!(c["context_files"][0]["path"], "PROMPT.md");
    assert_eq!(c["cost_usd"], 0.5);
    assert_eq!(c["exec_timeout_ms"], 30000);
    assert_eq!(c["check_timeout_ms"], 20000);
    assert_eq!(c["max_iterations"], 10);
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

#[test]
fn status_report_and_explain_halt_answer_in_json() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--run-id",
            "r1",
            "--check",
            "false",
            "--exec",
            "true",
            "--isolation",
            "none",
            "--max-iterations",
            "2",
        ],
    );
    assert_eq!(r.code, 12);
    let status = loopexec(dir.path(), &["status", "--json"]);
    assert_eq!(status.code, 0);
    let s = status.json();
    assert_eq!(
        (
            s["run_id"].as_str(),
            s["state"].as_str(),
            s["halt_reason"].as_str()
        ),
        (Some("r1"), Some("halted"), Some("max_iterations_reached"))
    );
    let report = loopexec(dir.path(), &["report", "r1", "--json"]).json();
    assert_eq!(report["report"]["chain"]["verified"], true);
    assert_eq!(report["report"]["iterations"].as_array().unwrap().len(), 2);
    let explain = loopexec(dir.path(), &["explain-halt", "--json"]).json();
    assert_eq!(explain["halt_reason"], "max_iterations_reached");
    assert_eq!(
        explain["explanation"]["verdict"]["verdict"], "human_needed",
        "no report: progress cannot be measured"
    );
    let check = loopexec(dir.path(), &["check", "--json"]);
    assert_eq!(check.code, 0, "{check:?}");
    assert_eq!(check.json()["checked"]["runs"], 1);
}

#[test]
fn a_malformed_agent_policy_is_refused_with_its_line_before_anything_is_written() {
    let dir = workdir();
    std::fs::write(
        dir.path().join("bad.toml"),
        "[filesystem]\nread_only = [\"relative/path\"]\n",
    )
    .unwrap();
    let r = loopexec(
        dir.path(),
        &[
            "run", "--json", "--policy", "bad.toml", "--exec", "true", "--check", "true",
        ],
    );
    assert_eq!(r.code, 20, "{r:?}");
    let message = r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("bad.toml") && message.contains(":2"),
        "{message}"
    );
    assert!(
        !dir.path().join(".loopexec").exists(),
        "nothing is written for a refused policy"
    );
}

#[test]
fn a_malformed_allow_host_is_a_usage_error() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--allow-host",
            "*.*.example.com",
            "--exec",
            "true",
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 20, "{r:?}");
    assert!(r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("--allow-host"));
    assert!(!dir.path().join(".loopexec").exists());
}

#[test]
fn egress_flags_with_isolation_none_are_refused() {
    let dir = workdir();
    let r = loopexec(
        dir.path(),
        &[
            "run",
            "--json",
            "--isolation",
            "none",
            "--allow-host",
            "api.example.com",
            "--exec",
            "true",
            "--check",
            "true",
        ],
    );
    assert_eq!(r.code, 20, "{r:?}");
    assert!(r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("native isolation"));
}

/// Runs with `loop_toml` and returns the usage error's message, asserting exit 20, one JSON
/// object and nothing written under `.loopexec/`.
fn loop_file_refusal(loop_toml: &str) -> String {
    let dir = workdir();
    std::fs::write(dir.path().join("loop.toml"), loop_toml).unwrap();
    let r = loopexec(dir.path(), &["run", "--json", "--isolation", "none"]);
    assert_eq!(r.code, 20, "{r:?}");
    assert!(
        !dir.path().join(".loopexec").exists(),
        "nothing written for a refused loop file"
    );
    r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn an_unknown_key_in_the_progress_table_is_refused_with_its_line() {
    let message =
        loop_file_refusal("check = \"true\"\nexec = \"true\"\n\n[progress]\nno_progres_k = 3\n");
    assert!(message.starts_with("loop.toml line 5:"), "{message}");
    assert!(message.contains("no_progres_k"), "{message}");
}

#[test]
fn a_negative_progress_limit_is_refused_with_its_line() {
    let message =
        loop_file_refusal("check = \"true\"\nexec = \"true\"\n[progress]\nsame_failure_n = -1\n");
    assert!(message.starts_with("loop.toml line 4:"), "{message}");
}

#[test]
fn an_unknown_adequacy_mode_is_refused_naming_the_modes() {
    let message =
        loop_file_refusal("check = \"true\"\nexec = \"true\"\nadequacy = \"sometimes\"\n");
    assert!(message.starts_with("loop.toml line 3:"), "{message}");
    assert!(
        message.contains("sometimes") && message.contains("final"),
        "{message}"
    );
}

#[test]
fn a_confirm_runs_that_is_not_a_count_is_refused_with_its_line() {
    let message = loop_file_refusal("check = \"true\"\nexec = \"true\"\nconfirm_runs = 1.5\n");
    assert!(message.starts_with("loop.toml line 3:"), "{message}");
}
