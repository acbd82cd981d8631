//! The advisory judge (`--judge`, issue 12 item 6), end to end through `loopexec run`: asked only
//! on a green check every guard let through, it reads a JSON packet on stdin and answers on
//! stdout. An approval keeps the success; a veto halts `reviewer_rejected` (or
//! `reward_hacking_detected`); a judge that crashes, times out, answers garbage or too much has
//! not approved (`escalation_pending`); it sees the agent's tree read-only and reaches only its
//! own allowlist; bad judge flags are refused before anything is written.
mod common;
use common::*;
use serde_json::Value;
use std::path::Path;

const APPROVE: &str = r#"echo '{"verdict":"approve","reason":"looks right"}'"#;
const VETO: &str = r#"echo '{"verdict":"veto","reason":"the fix hard-codes the expected value"}'"#;

/// A repository whose t0 holds `value.txt` = `bad`; the agent's fix writes `good`, which the
/// check wants.
fn project() -> tempfile::TempDir {
    let dir = workdir();
    std::fs::write(dir.path().join("value.txt"), "bad\n").unwrap();
    commit_t0(dir.path());
    dir
}

const FIX: &str = "echo good > value.txt";
const CHECK: &str = "grep -q good value.txt";

/// `loopexec run --json` of the agent `exec` and check `check` with the judge `judge`.
fn judged_run(
    dir: &Path,
    run_id: &str,
    exec: &str,
    check: &str,
    judge: &str,
    extra: &[&str],
) -> Ran {
    let mut args = vec![
        "run",
        "--json",
        "--run-id",
        run_id,
        "--exec",
        exec,
        "--check",
        check,
        "--judge",
        judge,
        "--max-iterations",
        "2",
    ];
    args.extend_from_slice(extra);
    loopexec(dir, &args)
}

fn judge_events(dir: &Path, run_id: &str) -> Vec<Value> {
    events(dir, run_id)
        .into_iter()
        .filter(|e| e["type"] == "judge")
        .collect()
}

/// The run's one `judge` event.
fn the_judge_event(dir: &Path, run_id: &str) -> Value {
    let mut judged = judge_events(dir, run_id);
    assert_eq!(judged.len(), 1, "one judge event: {judged:#?}");
    judged.remove(0)
}

fn halt_event(dir: &Path, run_id: &str) -> Value {
    events(dir, run_id)
        .into_iter()
        .find(|e| e["type"] == "halt")
        .expect("a halt event")
}

#[test]
fn an_approving_judge_cannot_promote_a_red_check() {
    let repo = project();
    let r = judged_run(repo.path(), "red", "true", "false", APPROVE, &[]);
    assert_eq!(r.code, 12, "{r:?}");
    assert_eq!(r.json()["halt_reason"], "max_iterations_reached");
    assert_eq!(
        judge_events(repo.path(), "red"),
        Vec::<Value>::new(),
        "the judge is never asked on red"
    );
}

#[test]
fn an_approval_keeps_the_success_and_is_recorded() {
    let repo = project();
    let r = judged_run(repo.path(), "ok", FIX, CHECK, APPROVE, &[]);
    assert_eq!(r.code, 10, "{r:?}");
    let judged = the_judge_event(repo.path(), "ok");
    assert_eq!(
        (judged["outcome"].as_str(), judged["reason"].as_str()),
        (Some("approve"), Some("looks right"))
    );
    assert_eq!(judged["iteration"], 1);
    assert_eq!(
        halt_event(repo.path(), "ok")["detail"],
        "the check passed at iteration 1; the judge approved"
    );
}

#[test]
fn a_veto_halts_reviewer_rejected_with_the_reason_in_the_receipt() {
    let repo = project();
    let r = judged_run(repo.path(), "veto", FIX, CHECK, VETO, &[]);
    assert_eq!(r.code, 16, "{r:?}");
    assert_eq!(r.json()["halt_reason"], "reviewer_rejected");
    let judged = the_judge_event(repo.path(), "veto");
    assert_eq!(judged["outcome"], "veto");
    assert_eq!(judged["reward_hacking"], false);
    assert_eq!(
        halt_event(repo.path(), "veto")["detail"],
        "the judge vetoed iteration 1: the fix hard-codes the expected value"
    );
    assert!(
        git(repo.path(), &["branch", "--list", "loopexec/*"])
            .trim()
            .is_empty(),
        "a vetoed step is not delivered"
    );
}

#[test]
fn a_reward_hacking_veto_halts_reward_hacking_detected() {
    let repo = project();
    let judge = r#"echo '{"verdict":"veto","reason":"the check is gamed","reward_hacking":true}'"#;
    let r = judged_run(repo.path(), "hack", FIX, CHECK, judge, &[]);
    assert_eq!(r.code, 13, "{r:?}");
    assert_eq!(r.json()["halt_reason"], "reward_hacking_detected");
    assert_eq!(the_judge_event(repo.path(), "hack")["reward_hacking"], true);
    assert_eq!(
        halt_event(repo.path(), "hack")["detail"],
        "the judge vetoed iteration 1 as reward hacking: the check is gamed"
    );
}

/// Asserts the run halted `escalation_pending` with a failed judge whose recorded reason is
/// `why` (or, for a measured time, starts with it).
fn assert_escalated(r: &Ran, dir: &Path, run_id: &str, why: &str) {
    assert_eq!(r.code, 16, "{r:?}");
    assert_eq!(r.json()["halt_reason"], "escalation_pending");
    let judged = the_judge_event(dir, run_id);
    assert_eq!(judged["outcome"], "failed");
    let why = judged["reason"]
        .as_str()
        .filter(|reason| reason.starts_with(why))
        .unwrap_or_else(|| panic!("{judged:#?}"));
    let detail = halt_event(dir, run_id)["detail"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        detail,
        format!(
            "the check passed at iteration 1 but the judge gave no answer ({why}); a human decides"
        )
    );
}

#[test]
fn a_crashing_judge_halts_escalation_pending() {
    let repo = project();
    let r = judged_run(
        repo.path(),
        "crash",
        FIX,
        CHECK,
        &format!("{APPROVE}; exit 3"),
        &[],
    );
    assert_escalated(&r, repo.path(), "crash", "the judge exited 3");
}

#[test]
fn a_judge_that_times_out_halts_escalation_pending() {
    let repo = project();
    let r = judged_run(
        repo.path(),
        "slow",
        FIX,
        CHECK,
        "sleep 60",
        &["--judge-timeout", "1"],
    );
    assert_escalated(&r, repo.path(), "slow", "the judge timed out after ");
}

#[test]
fn a_garbage_answer_halts_escalation_pending() {
    let repo = project();
    let r = judged_run(repo.path(), "lgtm", FIX, CHECK, "echo LGTM", &[]);
    assert_escalated(
        &r,
        repo.path(),
        "lgtm",
        "the judge's stdout is not an answer: expected value at line 1 column 1",
    );
}

#[test]
fn an_oversized_answer_halts_escalation_pending() {
    let repo = project();
    let judge =
        r#"printf '{"verdict":"approve","reason":"%s"}' "$(head -c 20000 /dev/zero | tr '\0' x)""#;
    let r = judged_run(repo.path(), "big", FIX, CHECK, judge, &[]);
    assert_escalated(
        &r,
        repo.path(),
        "big",
        "the judge wrote 20033 bytes on stdout, more than the answer bound of 16384",
    );
}

/// A judge that reads the packet and answers with what it found in it.
const PACKET_READER: &str = r#"python3 -c '
import json, sys
p = json.load(sys.stdin)
f = p["diff"]["files"][0]
t0 = "t0-deltas" if p["result"]["t0"] else "no-t0"
reason = "%s exit=%s %s %s %s %s" % (p["schema"], p["check"]["exit_code"], f["path"], f["change"], f["patch"].splitlines()[-1], t0)
print(json.dumps({"schema": "loopexec.judge.answer/1", "verdict": "approve", "reason": reason}))
'"#;

#[test]
fn the_judge_reads_the_packet_with_the_diff_against_t0() {
    let repo = project();
    let r = judged_run(repo.path(), "packet", FIX, CHECK, PACKET_READER, &[]);
    assert_eq!(r.code, 10, "{r:?}");
    let judged = the_judge_event(repo.path(), "packet");
    assert_eq!(
        judged["reason"],
        "loopexec.judge.packet/1 exit=0 value.txt modified +good t0-deltas"
    );
    let packet =
        std::fs::read(run_dir(repo.path(), "packet").join(judged["packet"].as_str().unwrap()))
            .unwrap();
    use sha2::Digest;
    assert_eq!(
        judged["packet_sha256"],
        hex::encode(sha2::Sha256::digest(&packet)),
        "the receipt pins the packet it was given"
    );
}

/// A judge that tries to write both trees it sees (its working directory, t0's, and the agent's
/// at /candidate) and answers whether it could, and what it read in each.
const WRITER: &str = r#"if echo planted > value.txt 2>/dev/null || touch planted 2>/dev/null || echo planted > /candidate/value.txt 2>/dev/null || touch /candidate/planted 2>/dev/null; then echo '{"verdict":"veto","reason":"wrote the workspace"}'; else printf '{"verdict":"approve","reason":"read-only, cwd %s, candidate %s"}' "$(cat value.txt)" "$(cat /candidate/value.txt)"; fi"#;

#[test]
fn the_judge_cannot_write_the_detached_workspace() {
    let repo = project();
    let r = judged_run(repo.path(), "ro", FIX, CHECK, WRITER, &[]);
    assert_eq!(r.code, 10, "{r:?}");
    assert_eq!(
        the_judge_event(repo.path(), "ro")["reason"],
        "read-only, cwd bad, candidate good"
    );
}

/// A judge that reviews the tree named in its environment (`$LOOPEXEC_CANDIDATE_DIR`, and t0's
/// in `$LOOPEXEC_T0_DIR`) sees the agent's file there, not t0's.
const ENV_READER: &str = r#"printf '{"verdict":"approve","reason":"candidate %s, t0 %s"}' "$(cat "$LOOPEXEC_CANDIDATE_DIR/value.txt")" "$(cat "$LOOPEXEC_T0_DIR/value.txt")""#;

#[test]
fn a_judge_reads_the_candidate_in_loopexec_candidate_dir_and_t0_in_loopexec_t0_dir() {
    let repo = project();
    let r = judged_run(repo.path(), "envdir", FIX, CHECK, ENV_READER, &[]);
    assert_eq!(r.code, 10, "{r:?}");
    assert_eq!(
        the_judge_event(repo.path(), "envdir")["reason"],
        "candidate good, t0 bad"
    );
}

#[test]
fn a_judge_in_another_language_finds_the_candidate_through_its_environment() {
    let repo = project();
    let judge = r#"python3 -c 'import json, os; d = os.environ["LOOPEXEC_CANDIDATE_DIR"]; print(json.dumps({"verdict": "approve", "reason": d + " holds " + open(os.path.join(d, "value.txt")).read().strip()}))'"#;
    let r = judged_run(repo.path(), "envpy", FIX, CHECK, judge, &[]);
    assert_eq!(r.code, 10, "{r:?}");
    assert_eq!(
        the_judge_event(repo.path(), "envpy")["reason"],
        "/candidate holds good"
    );
}

/// The operator's judge at t0: it reads the agent's tree at /candidate and vetoes, naming what it
/// saw there. `approve` is what the agent rewrites it to.
const OPERATOR_VETO: &str = r#"printf '{"verdict":"veto","reason":"the operator reviewed %s"}' "$(cat /candidate/value.txt)""#;
const SELF_APPROVAL: &str = r#"echo '{"verdict":"approve","reason":"the agent approves itself"}'"#;

/// A repository whose t0 holds `value.txt` = `bad` and the operator's judge files `files`.
fn project_with(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = workdir();
    std::fs::write(dir.path().join("value.txt"), "bad\n").unwrap();
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    commit_t0(dir.path());
    dir
}

/// Asserts the run halted on the operator's veto, the agent's rewrite of its judge unused and
/// nothing delivered.
fn assert_operator_vetoed(r: &Ran, dir: &Path, run_id: &str) {
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (16, Some("reviewer_rejected")),
        "{r:?}"
    );
    assert_eq!(
        halt_event(dir, run_id)["detail"],
        "the judge vetoed iteration 1: the operator reviewed good"
    );
    assert!(
        git(dir, &["branch", "--list", "loopexec/*"])
            .trim()
            .is_empty(),
        "a vetoed step is not delivered"
    );
}

#[test]
fn a_judge_script_in_the_workdir_the_agent_rewrites_to_approve_runs_as_the_operator_wrote_it() {
    let repo = project_with(&[("review.sh", &format!("#!/bin/sh\n{OPERATOR_VETO}\n"))]);
    let exec = format!("{FIX}; cat > review.sh <<'EOF'\n#!/bin/sh\n{SELF_APPROVAL}\nEOF");
    let r = judged_run(repo.path(), "selfapprove", &exec, CHECK, "./review.sh", &[]);
    assert_operator_vetoed(&r, repo.path(), "selfapprove");
}

#[test]
fn a_judge_run_by_an_interpreter_from_the_workdir_is_the_operators_copy() {
    let judge_py = format!("import subprocess, sys\nsys.stdout.write(subprocess.run(['sh', '-c', {OPERATOR_VETO:?}], capture_output=True, text=True).stdout)\n");
    let repo = project_with(&[("tools/judge.py", &judge_py)]);
    let exec = format!("{FIX}; cat > tools/judge.py <<'EOF'\nprint('{{\"verdict\":\"approve\",\"reason\":\"the agent approves itself\"}}')\nEOF");
    let r = judged_run(
        repo.path(),
        "pyjudge",
        &exec,
        CHECK,
        "python3 tools/judge.py",
        &[],
    );
    assert_operator_vetoed(&r, repo.path(), "pyjudge");
}

#[test]
fn a_helper_the_judge_sources_that_the_agent_rewrites_is_the_operators_copy() {
    let repo = project_with(&[
        ("scripts/judge.sh", ". scripts/verdict.sh\nverdict\n"),
        (
            "scripts/verdict.sh",
            &format!("verdict() {{ {OPERATOR_VETO}; }}\n"),
        ),
    ]);
    let exec =
        format!("{FIX}; cat > scripts/verdict.sh <<'EOF'\nverdict() {{ {SELF_APPROVAL}; }}\nEOF");
    let r = judged_run(
        repo.path(),
        "sourced",
        &exec,
        CHECK,
        "bash -c 'sh scripts/judge.sh'",
        &[],
    );
    assert_operator_vetoed(&r, repo.path(), "sourced");
}

#[test]
fn the_judge_is_not_asked_in_place_and_writes_nothing_there() {
    let dir = workdir();
    std::fs::write(dir.path().join("value.txt"), "bad\n").unwrap();
    zone_writable(dir.path());
    zone_writable(&dir.path().join("value.txt"));
    let r = judged_run(dir.path(), "inplace", FIX, CHECK, WRITER, &[]);
    // In place a green check halts human_required (no guard can judge the step, docs/guards.md),
    // so the judge, asked only when every guard passed, is never asked and writes nothing.
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (11, Some("human_required")),
        "{r:?}"
    );
    assert!(judge_events(dir.path(), "inplace").is_empty());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("value.txt")).unwrap(),
        "good\n"
    );
    assert!(!dir.path().join("planted").exists());
}

/// A judge that fetches its own host, the agent's host and an unlisted one through the proxy,
/// and tries a direct connection; the reason lists what each gave.
const FETCHER: &str = r#"python3 -c '
import json, socket, sys, urllib.request, urllib.error
port = int(sys.argv[1])
def get(host):
    try:
        return urllib.request.urlopen("http://%s:%d/" % (host, port), timeout=10).read().decode()
    except urllib.error.HTTPError as e:
        return str(e.code)
try:
    socket.create_connection(("127.0.0.1", port), timeout=3)
    direct = "connected"
except OSError:
    direct = "refused"
reason = "judge=%s agent=%s other=%s direct=%s" % (get("judge.test"), get("agent.test"), get("other.test"), direct)
print(json.dumps({"verdict": "approve", "reason": reason}))
' "#;

#[test]
fn the_judge_reaches_only_its_own_allowlist() {
    let (port, _server) = hello_server();
    let repo = project();
    let judge = format!("{FETCHER}{port}");
    let (judge_host, agent_host) = (format!("judge.test:{port}"), format!("agent.test:{port}"));
    let resolve: Vec<String> = ["judge", "agent"]
        .iter()
        .map(|h| format!("{h}.test:{port}:127.0.0.1"))
        .collect();
    let (judge_pin, agent_pin) = (&resolve[0], &resolve[1]);
    let extra = vec![
        "--judge-allow-host",
        &judge_host,
        "--judge-resolve",
        judge_pin,
        "--allow-host",
        &agent_host,
        "--resolve",
        agent_pin,
    ];
    let r = judged_run(repo.path(), "net", FIX, CHECK, &judge, &extra);
    assert_eq!(r.code, 10, "{r:?}");
    assert_eq!(
        the_judge_event(repo.path(), "net")["reason"],
        "judge=hello agent=403 other=403 direct=refused"
    );
    let audit = std::fs::read_to_string(run_dir(repo.path(), "net").join("egress.jsonl")).unwrap();
    let lines: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines.len(),
        3,
        "one audit line per decision of the judge's proxy: {audit}"
    );
}

/// Asserts a refused invocation: exit 20, exactly one JSON object naming `message`, nothing written.
fn assert_refused(dir: &Path, args: &[&str], message: &str) {
    let r = loopexec(dir, args);
    assert_eq!(r.code, 20, "{r:?}");
    let v = r.json();
    assert_eq!(v["status"], "error");
    assert_eq!(v["errors"][0]["code"], "usage");
    assert_eq!(v["errors"][0]["message"], message, "{v}");
    assert!(!dir.join(".loopexec").exists(), "nothing written");
}

#[test]
fn two_judges_are_refused_before_anything_is_written() {
    let repo = project();
    let args = [
        "run", "--json", "--exec", FIX, "--check", CHECK, "--judge", APPROVE, "--judge", APPROVE,
    ];
    assert_refused(
        repo.path(),
        &args,
        "--judge given 2 times: a run has at most one judge",
    );
}

#[test]
fn an_empty_judge_command_is_refused_before_anything_is_written() {
    let repo = project();
    assert_refused(
        repo.path(),
        &[
            "run", "--json", "--exec", FIX, "--check", CHECK, "--judge", " ",
        ],
        "--judge: the command is empty",
    );
}

#[test]
fn report_shows_the_judges_answer_per_iteration() {
    let repo = project();
    assert_eq!(
        judged_run(repo.path(), "rep", FIX, CHECK, VETO, &[]).code,
        16
    );
    let report = loopexec(repo.path(), &["report", "--json", "rep"]).json();
    let judged = &report["report"]["iterations"][0]["judge"];
    assert_eq!(
        (judged["outcome"].as_str(), judged["reason"].as_str()),
        (Some("veto"), Some("the fix hard-codes the expected value"))
    );
    let human = loopexec(repo.path(), &["report", "rep"]);
    assert!(
        human
            .stdout
            .contains("judge veto: the fix hard-codes the expected value"),
        "{}",
        human.stdout
    );
}

#[test]
fn explain_halt_names_the_judges_veto() {
    let repo = project();
    assert_eq!(
        judged_run(repo.path(), "why", FIX, CHECK, VETO, &[]).code,
        16
    );
    let explained = loopexec(repo.path(), &["explain-halt", "--json", "why"]).json();
    assert_eq!(explained["halt_reason"], "reviewer_rejected");
    assert_eq!(
        explained["explanation"]["judge"]["reason"],
        "the fix hard-codes the expected value"
    );
    assert!(
        explained["explanation"]["summary"]
            .as_str()
            .unwrap()
            .starts_with("the judge vetoed a green step: "),
        "{explained}"
    );
}

fn verify(dir: &Path, run_id: &str) -> Ran {
    let pubkey = path_str(&key_dir().join("operator.pub"));
    loopexec(dir, &["verify", "--json", run_id, "--pubkey", &pubkey])
}

#[test]
fn verify_reads_the_judges_answer_again_from_its_artifacts() {
    let repo = project();
    assert_eq!(
        judged_run(repo.path(), "v", FIX, CHECK, APPROVE, &[]).code,
        10
    );
    let r = verify(repo.path(), "v");
    assert_eq!(r.code, 0, "{r:?}");
    let checks = r.json()["verify"]["checks"].as_array().unwrap().clone();
    let judged = checks
        .iter()
        .find(|c| c["name"] == "judge_records")
        .expect("a judge_records check");
    assert_eq!(
        judged["detail"],
        "1 judge answer(s) read again from their artifacts"
    );
}

#[test]
fn verify_fails_a_judge_answer_rewritten_in_its_artifact() {
    let repo = project();
    assert_eq!(
        judged_run(repo.path(), "t", FIX, CHECK, APPROVE, &[]).code,
        10
    );
    let stdout = the_judge_event(repo.path(), "t")["stdout"]["artifact"]
        .as_str()
        .unwrap()
        .to_string();
    std::fs::write(
        run_dir(repo.path(), "t").join(stdout),
        r#"{"verdict":"approve","reason":"forged"}"#,
    )
    .unwrap();
    let r = verify(repo.path(), "t");
    assert_eq!(r.code, 13, "{r:?}");
    let errors = r.json()["errors"].clone();
    assert_eq!(errors[0]["code"], "verify_judge_records");
    assert_eq!(
        errors[0]["message"],
        "iteration 1: the judge's stdout artifact is not the output the receipt pins"
    );
}

#[test]
fn a_judge_in_loop_toml_is_asked() {
    let repo = project();
    std::fs::write(
        repo.path().join("loop.toml"),
        format!("exec = {FIX:?}\ncheck = {CHECK:?}\njudge = {VETO:?}\nmax_iterations = 2\n"),
    )
    .unwrap();
    let r = loopexec(repo.path(), &["run", "--json", "--run-id", "toml"]);
    assert_eq!(r.code, 16, "{r:?}");
    assert_eq!(the_judge_event(repo.path(), "toml")["outcome"], "veto");
}

#[test]
fn an_empty_judge_in_loop_toml_is_refused_before_anything_is_written() {
    let repo = project();
    std::fs::write(
        repo.path().join("loop.toml"),
        format!("exec = {FIX:?}\ncheck = {CHECK:?}\njudge = \"\"\n"),
    )
    .unwrap();
    assert_refused(
        repo.path(),
        &["run", "--json"],
        "--judge: the command is empty",
    );
}

/// A judge that is an agent CLI printing Claude Code's JSON result: its answer in `result`, its
/// cost in `total_cost_usd` and `modelUsage`.
const CLAUDE_JUDGE: &str = r#"printf '%s\n' '{"type":"result","subtype":"success","result":"{\"verdict\":\"approve\",\"reason\":\"a real fix\"}","total_cost_usd":0.0125,"usage":{"input_tokens":900,"output_tokens":40},"modelUsage":{"claude-sonnet-4-5-20250929":{"inputTokens":900,"outputTokens":40,"cacheReadInputTokens":0,"cacheCreationInputTokens":0,"costUSD":0.0125}}}'"#;

#[test]
fn a_judge_that_is_an_agent_cli_answers_in_its_final_text_and_its_cost_is_metered() {
    let repo = project();
    std::fs::write(
        repo.path().join("loop.toml"),
        "[metering]\njudge_output = \"claude-json\"\n",
    )
    .unwrap();
    git(repo.path(), &["add", "loop.toml"]);
    git(repo.path(), &["commit", "-qm", "loop.toml"]);
    let r = judged_run(repo.path(), "cli", FIX, CHECK, CLAUDE_JUDGE, &[]);
    assert_eq!(r.code, 10, "{r:?}");
    let judged = the_judge_event(repo.path(), "cli");
    assert_eq!(
        (judged["outcome"].as_str(), judged["reason"].as_str()),
        (Some("approve"), Some("a real fix"))
    );
    let ev = events(repo.path(), "cli");
    let usage: Vec<&Value> = ev
        .iter()
        .filter(|e| e["type"] == "usage" && e["stage"] == "judge")
        .collect();
    assert_eq!(usage.len(), 1, "{ev:#?}");
    assert_eq!(
        (usage[0]["usd_micros"].as_u64(), usage[0]["basis"].as_str()),
        (Some(12_500), Some("reported"))
    );
    assert_eq!(usage[0]["sources"][0]["name"], "claude_json");
    let at = ev
        .iter()
        .position(|e| e["type"] == "usage" && e["stage"] == "judge")
        .unwrap();
    assert_eq!(ev[at - 1]["type"], "judge");
    // verify reads the answer again the same way: the final text of the recorded output.
    let v = verify(repo.path(), "cli");
    assert_eq!(v.code, 0, "{v:?}");
    let checks = v.json()["verify"]["checks"].as_array().unwrap().clone();
    assert_eq!(
        checks
            .iter()
            .find(|c| c["name"] == "judge_records")
            .unwrap()["detail"],
        "1 judge answer(s) read again from their artifacts"
    );
}

#[test]
fn a_metered_judge_whose_output_has_no_final_text_has_not_approved() {
    let repo = project();
    std::fs::write(
        repo.path().join("loop.toml"),
        "[metering]\njudge_output = \"claude-json\"\n",
    )
    .unwrap();
    git(repo.path(), &["add", "loop.toml"]);
    git(repo.path(), &["commit", "-qm", "loop.toml"]);
    let r = judged_run(repo.path(), "nt", FIX, CHECK, APPROVE, &[]);
    assert_eq!(r.code, 16, "{r:?}");
    let judged = the_judge_event(repo.path(), "nt");
    assert_eq!(judged["outcome"], "failed");
    assert_eq!(
        judged["reason"],
        "the judge's claude_json output has no answer: its output has no final text"
    );
}
