//! `probe-check` and `doctor --check` leave a signed receipt in `.loopexec/probes/<id>/`: `verify`
//! checks it offline against the operator's public key and recomputes its verdict from the runs
//! it holds, `report` shows it; an edited one fails verification naming the broken step. The
//! checks run on the host (`--isolation none`) to keep the suite quick.

mod common;

use common::{key_dir, loopexec, workdir};
use serde_json::Value;
use std::path::Path;

fn pubkey() -> String {
    key_dir()
        .join("operator.pub")
        .to_string_lossy()
        .into_owned()
}

fn probe(dir: &Path, check: &str, extra: &[&str]) -> (i32, Value) {
    let mut args = vec![
        "--json",
        "probe-check",
        "--isolation",
        "none",
        "--check",
        check,
    ];
    args.extend_from_slice(extra);
    let ran = loopexec(dir, &args);
    (ran.code, ran.json())
}

fn verify(dir: &Path, receipt_dir: &str) -> (i32, Value) {
    let ran = loopexec(
        dir,
        &["--json", "verify", receipt_dir, "--pubkey", &pubkey()],
    );
    (ran.code, ran.json())
}

fn failed_checks(v: &Value) -> Vec<String> {
    v["verify"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["ok"] == false)
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

fn receipt_lines(receipt_dir: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(Path::new(receipt_dir).join("receipt.jsonl")).unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_certified_probe_leaves_a_receipt_that_verifies_with_its_verdict_recomputed() {
    let dir = workdir();
    let (code, v) = probe(dir.path(), "true", &["--runs", "59", "--seed", "5"]);
    assert_eq!((code, v["verdict"].as_str()), (0, Some("certified")), "{v}");
    let receipt = v["receipt"].as_str().unwrap().to_string();
    assert!(
        receipt.starts_with(
            &dir.path()
                .join(".loopexec/probes/")
                .to_string_lossy()
                .into_owned()
        ),
        "{receipt}"
    );
    let lines = receipt_lines(&receipt);
    let kinds: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(
        (kinds[0], kinds[1], kinds.len(), kinds[kinds.len() - 1]),
        ("probe_start", "run_key", 62, "probe_verdict")
    );
    assert_eq!(lines[0]["seed"], 5);
    assert_eq!(lines[2]["class"], "pass");
    let (code, verified) = verify(dir.path(), &receipt);
    assert_eq!(code, 0, "{verified}");
    assert_eq!(verified["verified"], true);
    let recomputed = verified["verify"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "verdict_recomputed")
        .unwrap()
        .clone();
    assert!(
        recomputed["detail"]
            .as_str()
            .unwrap()
            .starts_with("certified: 59 runs, 0 disagreeing, bound 0.049"),
        "{recomputed}"
    );
    let e = loopexec(
        dir.path(),
        &[
            "--json",
            "explain-halt",
            "--receipt",
            &format!("{receipt}/receipt.jsonl"),
        ],
    )
    .json();
    assert_eq!(
        (
            e["halt_reason"].clone(),
            e["explanation"]["halted"].as_bool()
        ),
        (Value::Null, Some(false)),
        "{e}"
    );
    assert!(
        e["explanation"]["summary"]
            .as_str()
            .unwrap()
            .starts_with("the check can be looped on: certified"),
        "{e}"
    );
}

#[test]
fn a_flaky_probe_receipt_holds_the_dimension_and_runs_that_broke_it_and_the_halt() {
    let dir = workdir();
    let (code, v) = probe(
        dir.path(),
        r#"test "${PYTHONHASHSEED:-0}" = 0"#,
        &["--runs", "5", "--perturb", "seed", "--seed", "2"],
    );
    assert_eq!(code, 14, "{v}");
    let receipt = v["receipt"].as_str().unwrap().to_string();
    let last = receipt_lines(&receipt).pop().unwrap();
    assert_eq!(
        (
            last["verdict"].as_str(),
            last["halt_reason"].as_str(),
            last["exit_code"].as_i64()
        ),
        (Some("varies"), Some("check_flaky"), Some(14))
    );
    assert_eq!(
        last["broken_by"], v["probe"]["summary"]["broken_by"],
        "{last}"
    );
    let (code, verified) = verify(dir.path(), &receipt);
    assert_eq!(
        (code, verified["halt_reason"].as_str()),
        (0, Some("check_flaky")),
        "{verified}"
    );
    let report = loopexec(
        dir.path(),
        &[
            "--json",
            "report",
            "--receipt",
            &format!("{receipt}/receipt.jsonl"),
        ],
    );
    let r = report.json();
    assert_eq!(
        (
            report.code,
            r["halt_reason"].as_str(),
            r["report"]["recomputed"]["agrees"].as_bool()
        ),
        (0, Some("check_flaky"), Some(true)),
        "{r}"
    );
    assert_eq!(
        r["report"]["verdict"]["broken_by"], v["probe"]["summary"]["broken_by"],
        "{r}"
    );
    let explained = loopexec(
        dir.path(),
        &[
            "--json",
            "explain-halt",
            "--receipt",
            &format!("{receipt}/receipt.jsonl"),
        ],
    );
    let e = explained.json();
    assert_eq!(
        (explained.code, e["halt_reason"].as_str()),
        (0, Some("check_flaky")),
        "{e}"
    );
    assert_eq!(
        e["explanation"]["verdict"]["verdict"], "fix_the_check",
        "{e}"
    );
    assert_eq!(r["report"]["runs"].as_array().unwrap().len(), 5, "{r}");
}

#[test]
fn an_edited_run_in_a_probe_receipt_fails_verification_naming_the_chain() {
    let dir = workdir();
    let (_, v) = probe(dir.path(), "true", &["--runs", "3"]);
    let receipt = v["receipt"].as_str().unwrap().to_string();
    let path = Path::new(&receipt).join("receipt.jsonl");
    let text = std::fs::read_to_string(&path).unwrap().replacen(
        "\"class\":\"pass\"",
        "\"class\":\"fail\"",
        1,
    );
    std::fs::write(&path, text).unwrap();
    let (code, verified) = verify(dir.path(), &receipt);
    assert_eq!(
        (code, failed_checks(&verified)),
        (13, vec!["receipt_chain".to_string()]),
        "{verified}"
    );
    assert_eq!(verified["errors"][0]["code"], "verify_receipt_chain");
    let report = loopexec(
        dir.path(),
        &["--json", "report", "--receipt", &path.to_string_lossy()],
    );
    assert_eq!(report.code, 30, "{}", report.stdout);
    assert!(
        report.json()["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("receipt does not verify"),
        "{}",
        report.stdout
    );
}

#[test]
fn a_probe_receipt_whose_envelope_was_swapped_for_another_probes_fails_the_signature() {
    let dir = workdir();
    let (_, a) = probe(dir.path(), "true", &["--runs", "2"]);
    let (_, b) = probe(dir.path(), "true", &["--runs", "2"]);
    let (a, b) = (
        a["receipt"].as_str().unwrap().to_string(),
        b["receipt"].as_str().unwrap().to_string(),
    );
    std::fs::copy(
        Path::new(&b).join("envelope.dsse.json"),
        Path::new(&a).join("envelope.dsse.json"),
    )
    .unwrap();
    let (code, verified) = verify(dir.path(), &a);
    assert_eq!(
        (code, failed_checks(&verified)),
        (13, vec!["envelope_signature".to_string()]),
        "{verified}"
    );
}

#[test]
fn probe_check_without_an_operator_key_runs_no_check_and_writes_nothing() {
    let dir = workdir();
    let empty = workdir();
    let marker = dir.path().join("ran");
    let out = std::process::Command::new(common::bin())
        .current_dir(dir.path())
        .env("LOOPEXEC_CONFIG_DIR", empty.path())
        .args([
            "--json",
            "probe-check",
            "--isolation",
            "none",
            "--runs",
            "2",
            "--check",
        ])
        .arg(format!("touch {}", marker.display()))
        .output()
        .unwrap();
    let ran = common::from_output(out);
    assert_eq!(ran.code, 20, "{}", ran.stdout);
    assert!(
        ran.json()["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("no operator key"),
        "{}",
        ran.stdout
    );
    assert!(!marker.exists());
    assert!(!dir.path().join(".loopexec/probes").exists());
}

#[test]
fn doctor_check_leaves_a_receipt_with_every_gate_recomputed_from_its_evidence() {
    let dir = workdir();
    let ran = loopexec(
        dir.path(),
        &[
            "--json",
            "doctor",
            "--isolation",
            "none",
            "--check",
            "true",
            "--runs",
            "4",
        ],
    );
    let v = ran.json();
    let receipt = v["receipt"]
        .as_str()
        .unwrap_or_else(|| panic!("no receipt: {v}"))
        .to_string();
    let last = receipt_lines(&receipt).pop().unwrap();
    let gates: Vec<&str> = last["gates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["gate"].as_str().unwrap())
        .collect();
    assert_eq!(
        &gates[..4],
        &["isolation", "determinism", "hermeticity", "side_effects"],
        "{last}"
    );
    assert_eq!(last["halt_reason"], v["halt_reason"].clone(), "{last}");
    let (code, verified) = verify(dir.path(), &receipt);
    assert_eq!(code, 0, "{verified}");
    let recomputed = verified["verify"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "verdict_recomputed")
        .unwrap()
        .clone();
    assert!(
        recomputed["detail"]
            .as_str()
            .unwrap()
            .contains("(isolation as recorded: not recomputable offline)"),
        "{recomputed}"
    );
}

#[test]
fn doctor_true_records_the_gates_and_their_doctor_receipt_in_the_runs_receipt_before_anything_runs()
{
    let dir = workdir();
    std::fs::write(dir.path().join("loop.toml"), "doctor = true\nisolation = \"none\"\nexec = \"true\"\ncheck = \"true\"\nmax_flake_rate = 0.3\n").unwrap();
    let ran = loopexec(dir.path(), &["--json", "run", "--run-id", "g"]);
    assert_eq!(ran.code, 10, "{}", ran.stdout);
    let types = common::event_types(dir.path(), "g");
    // The check passes on t0 (confirmed by its rerun), so the run ends at its baseline: the
    // gates come before even that.
    assert_eq!(
        types,
        [
            "run_start",
            "preconditions",
            "check_baseline",
            "check_confirmation",
            "halt"
        ]
    );
    let record = common::events(dir.path(), "g")
        .into_iter()
        .find(|e| e["type"] == "preconditions")
        .unwrap();
    assert_eq!(record["halt_reason"], Value::Null, "{record}");
    let gates: Vec<(&str, &str)> = record["gates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["gate"].as_str().unwrap(), g["verdict"].as_str().unwrap()))
        .collect();
    assert_eq!(
        gates,
        [
            ("isolation", "inconclusive"),
            ("determinism", "passed"),
            ("hermeticity", "passed"),
            ("side_effects", "passed")
        ]
    );
    // The doctor receipt it names verifies, and is the one whose envelope digest it recorded.
    let probe_dir = dir
        .path()
        .join(".loopexec")
        .join(record["probe_receipt"].as_str().unwrap());
    let (code, verified) = verify(dir.path(), &probe_dir.to_string_lossy());
    assert_eq!(code, 0, "{verified}");
    use sha2::Digest;
    let envelope = std::fs::read(probe_dir.join("envelope.dsse.json")).unwrap();
    assert_eq!(
        record["envelope_sha256"].as_str().unwrap(),
        hex::encode(sha2::Sha256::digest(&envelope))
    );
    let (code, run_verified) = verify(dir.path(), "g");
    assert_eq!(code, 0, "the run's receipt still verifies: {run_verified}");
}

#[test]
fn a_failed_gate_whose_halt_was_lost_in_a_crash_halts_the_resumed_run_without_an_agent_call() {
    let dir = workdir();
    std::fs::write(dir.path().join("loop.toml"), "doctor = true\nisolation = \"none\"\nexec = \"touch agent-ran\"\ncheck = \"test ! -e marker && touch marker\"\n").unwrap();
    assert_eq!(
        loopexec(dir.path(), &["--json", "run", "--run-id", "lost"]).code,
        14
    );
    // Simulate a crash between appending preconditions and appending halt.
    let receipt = dir.path().join(".loopexec/runs/lost/receipt.jsonl");
    let text = std::fs::read_to_string(&receipt).unwrap();
    let without_halt: String = text
        .lines()
        .take_while(|l| !l.contains("\"type\":\"halt\""))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&receipt, without_halt).unwrap();
    let resumed = loopexec(dir.path(), &["--json", "run", "--resume", "lost"]);
    assert_eq!(
        (resumed.code, resumed.json()["halt_reason"].as_str()),
        (14, Some("check_has_side_effects")),
        "{}",
        resumed.stdout
    );
    assert_eq!(
        common::event_types(dir.path(), "lost"),
        ["run_start", "preconditions", "run_resumed", "halt"]
    );
    assert!(!dir.path().join("agent-ran").exists());
}

#[test]
fn a_probe_receipt_copied_under_runs_does_not_verify_as_the_run_its_id_names() {
    let dir = workdir();
    let (code, v) = probe(dir.path(), "true", &["--runs", "3"]);
    assert_eq!(code, 0, "{v}");
    let receipt = v["receipt"].as_str().unwrap().to_string();
    let (code, by_path) = verify(dir.path(), &receipt);
    assert_eq!(
        (code, by_path["kind"].as_str()),
        (0, Some("probe")),
        "{by_path}"
    );
    let runs = dir.path().join(".loopexec/runs");
    std::fs::create_dir_all(&runs).unwrap();
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(&receipt)
        .arg(runs.join("posing"))
        .status()
        .unwrap();
    assert!(copied.success());
    let (code, by_id) = verify(dir.path(), "posing");
    assert_eq!(
        (code, by_id["kind"].as_str()),
        (13, Some("probe")),
        "{by_id}"
    );
    assert_eq!(
        failed_checks(&by_id),
        ["probe_directory", "receipt_kind"],
        "{by_id}"
    );
}

// ---- a probe's directory is tied to the id inside; a run's pinned doctor receipt is verified ----

/// The detail of the check `name` of a verification.
fn check_detail(v: &Value, name: &str) -> Option<(bool, String)> {
    let check = v["verify"]["checks"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)?;
    Some((
        check["ok"].as_bool()?,
        check["detail"].as_str()?.to_string(),
    ))
}

/// The probe id of a probe directory (its name).
fn id_of(probe_dir: &str) -> String {
    Path::new(probe_dir)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// Replace the files of `into` with those of `from` (the directory keeps its name).
fn swap_files(from: &str, into: &str) {
    for file in ["receipt.jsonl", "envelope.dsse.json", "run-key.pub"] {
        std::fs::copy(Path::new(from).join(file), Path::new(into).join(file)).unwrap();
    }
}

/// Put the directory `from` in the place of `into` (removed first).
fn move_directory(from: &str, into: &str) {
    std::fs::remove_dir_all(into).unwrap();
    std::fs::rename(from, into).unwrap();
}

#[test]
fn a_probe_directory_holding_another_probes_files_fails_naming_both_ids() {
    let dir = workdir();
    let (_, a) = probe(dir.path(), "true", &["--runs", "2"]);
    let (_, b) = probe(dir.path(), "true", &["--runs", "2"]);
    let (a, b) = (
        a["receipt"].as_str().unwrap().to_string(),
        b["receipt"].as_str().unwrap().to_string(),
    );
    swap_files(&b, &a);
    let (code, verified) = verify(dir.path(), &a);
    assert_eq!(
        (code, failed_checks(&verified)),
        (13, vec!["probe_directory".to_string()]),
        "{verified}"
    );
    let expected = format!("the directory is named {}, its receipt is probe {}'s (another probe's receipt moved or copied in)", id_of(&a), id_of(&b));
    assert_eq!(
        check_detail(&verified, "probe_directory"),
        Some((false, expected))
    );
}

#[test]
fn another_probes_directory_moved_in_under_a_probes_id_fails_the_directory_check() {
    let dir = workdir();
    let (_, a) = probe(dir.path(), "true", &["--runs", "2"]);
    let (_, b) = probe(dir.path(), "true", &["--runs", "2"]);
    let (a, b) = (
        a["receipt"].as_str().unwrap().to_string(),
        b["receipt"].as_str().unwrap().to_string(),
    );
    move_directory(&b, &a);
    let (code, verified) = verify(dir.path(), &a);
    assert_eq!(
        (code, failed_checks(&verified)),
        (13, vec!["probe_directory".to_string()]),
        "{verified}"
    );
}

#[test]
fn a_probe_directory_named_for_its_probe_passes_the_directory_check() {
    let dir = workdir();
    let (_, a) = probe(dir.path(), "true", &["--runs", "2"]);
    let a = a["receipt"].as_str().unwrap().to_string();
    let (code, verified) = verify(dir.path(), &format!("{a}/"));
    assert_eq!(code, 0, "{verified}");
    assert_eq!(
        check_detail(&verified, "probe_directory"),
        Some((
            true,
            format!("the directory is named for probe {}", id_of(&a))
        ))
    );
}

/// A `doctor = true` run `g` (its check passes on t0) and the doctor receipt it pinned.
fn doctor_run(dir: &Path) -> (String, String) {
    std::fs::write(dir.join("loop.toml"), "doctor = true\nisolation = \"none\"\nexec = \"true\"\ncheck = \"true\"\nmax_flake_rate = 0.3\n").unwrap();
    let ran = loopexec(dir, &["--json", "run", "--run-id", "g"]);
    assert_eq!(ran.code, 10, "{}", ran.stdout);
    let record = common::events(dir, "g")
        .into_iter()
        .find(|e| e["type"] == "preconditions")
        .unwrap();
    let probe_dir = dir
        .join(".loopexec")
        .join(record["probe_receipt"].as_str().unwrap());
    (
        record["probe_id"].as_str().unwrap().to_string(),
        probe_dir.to_string_lossy().into_owned(),
    )
}

#[test]
fn verify_run_verifies_the_doctor_receipt_the_run_pinned_and_says_so() {
    let dir = workdir();
    let (id, pinned) = doctor_run(dir.path());
    let (code, verified) = verify(dir.path(), "g");
    assert_eq!(code, 0, "{verified}");
    assert_eq!(
        verified["verify"]["pinned_probe"],
        serde_json::json!({"probe_id": id, "probe_receipt": format!("probes/{id}"), "state": "verified"})
    );
    use sha2::Digest;
    let digest = hex::encode(sha2::Sha256::digest(
        std::fs::read(Path::new(&pinned).join("envelope.dsse.json")).unwrap(),
    ));
    let expected = format!("the doctor receipt probes/{id} the run pinned verifies: envelope sha256 {digest}, probe {id}");
    assert_eq!(
        check_detail(&verified, "probe_receipt"),
        Some((true, expected))
    );
}

#[test]
fn verify_run_fails_when_the_pinned_doctor_receipts_files_are_another_probes() {
    let dir = workdir();
    let (id, pinned) = doctor_run(dir.path());
    let (_, other) = probe(dir.path(), "true", &["--runs", "2"]);
    swap_files(other["receipt"].as_str().unwrap(), &pinned);
    let (code, verified) = verify(dir.path(), "g");
    assert_eq!(
        (code, failed_checks(&verified)),
        (13, vec!["probe_receipt".to_string()]),
        "{verified}"
    );
    assert_eq!(verified["verify"]["pinned_probe"]["state"], "failed");
    let (_, detail) = check_detail(&verified, "probe_receipt").unwrap();
    assert!(
        detail.starts_with(&format!(
            "the doctor receipt probes/{id}: its envelope's sha256 is "
        )),
        "{detail}"
    );
    assert!(
        detail.ends_with("(another probe's receipt, or a re-sealed one)"),
        "{detail}"
    );
}

#[test]
fn verify_run_fails_when_another_probes_directory_replaces_the_pinned_one() {
    let dir = workdir();
    let (_, pinned) = doctor_run(dir.path());
    let (_, other) = probe(dir.path(), "true", &["--runs", "2"]);
    move_directory(other["receipt"].as_str().unwrap(), &pinned);
    let (code, verified) = verify(dir.path(), "g");
    assert_eq!(
        (code, failed_checks(&verified)),
        (13, vec!["probe_receipt".to_string()]),
        "{verified}"
    );
}

#[test]
fn verify_run_fails_when_the_pinned_doctor_receipt_was_edited_under_its_envelope() {
    let dir = workdir();
    let (id, pinned) = doctor_run(dir.path());
    let receipt = Path::new(&pinned).join("receipt.jsonl");
    let text = std::fs::read_to_string(&receipt).unwrap();
    // A gate of the last line (`probe_verdict`) edited: no later line's `prev` binds it.
    std::fs::write(
        &receipt,
        text.replacen("\"verdict\":\"passed\"", "\"verdict\":\"failed\"", 1),
    )
    .unwrap();
    let (code, verified) = verify(dir.path(), "g");
    assert_eq!(
        (code, failed_checks(&verified)),
        (13, vec!["probe_receipt".to_string()]),
        "{verified}"
    );
    let (_, detail) = check_detail(&verified, "probe_receipt").unwrap();
    assert!(detail.starts_with(&format!("the doctor receipt probes/{id} does not verify: subject_digest: receipt subject digest ")), "{detail}");
}

#[test]
fn verify_run_says_when_the_pinned_doctor_receipt_is_absent() {
    let dir = workdir();
    let (id, pinned) = doctor_run(dir.path());
    std::fs::remove_dir_all(&pinned).unwrap();
    let (code, verified) = verify(dir.path(), "g");
    assert_eq!(code, 0, "the run's own receipt still verifies: {verified}");
    assert_eq!(verified["verify"]["pinned_probe"]["state"], "absent");
    let expected = format!(
        "the doctor receipt probes/{id} the run pinned is absent beside the run: not checked (its gates' verdicts in the run's receipt are sealed with it; its runs and evidence are not verified)"
    );
    assert_eq!(
        check_detail(&verified, "probe_receipt"),
        Some((true, expected))
    );
}

#[test]
fn verify_run_finds_the_pinned_doctor_receipt_from_a_relative_run_path() {
    let dir = workdir();
    let (id, _) = doctor_run(dir.path());
    let (code, verified) = verify(&dir.path().join(".loopexec"), "runs/g");
    assert_eq!(code, 0, "{verified}");
    assert_eq!(
        verified["verify"]["pinned_probe"]["state"], "verified",
        "probes/{id} is found two levels above runs/g"
    );
}
