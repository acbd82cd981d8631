//! docs/quickstart.md, run literally (issue 23 item 10): every line of its "2. A first loop"
//! shell blocks runs unchanged, in order, in one bash, in a fresh home directory that holds no
//! operator key yet (so `init` makes it and `run` then works), with the built binary first on
//! PATH (section 1, getting loopexec, is what CI's own `ci/setup.sh` run does). Each line's exit
//! code is recorded; the walkthrough must end with `run` exiting 10 (`success_condition_met`), a
//! receipt `verify` accepts with the new key, and the agent's fix on the delivered branch.
mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;

/// The shell lines of the ```sh blocks between the headings `## 2.` and `## 3.`.
fn walkthrough_lines(doc: &str) -> Vec<String> {
    let section = doc
        .split("\n## 2.")
        .nth(1)
        .expect("docs/quickstart.md has no `## 2.` section");
    let section = section.split("\n## 3.").next().unwrap_or(section);
    let mut lines = Vec::new();
    for block in section.split("```sh\n").skip(1) {
        let body = block.split("\n```").next().unwrap_or("");
        lines.extend(
            body.lines()
                .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
                .map(str::to_string),
        );
    }
    lines
}

#[test]
fn the_quickstart_runs_as_written_from_no_key_to_a_verified_receipt() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/quickstart.md"))
        .unwrap();
    let lines = walkthrough_lines(&doc);
    assert!(
        lines.iter().any(|l| l.starts_with("loopexec init"))
            && lines.iter().any(|l| l.starts_with("loopexec run")),
        "{lines:?}"
    );
    let home = tempfile::tempdir().unwrap();
    // A home directory as Debian makes one (0755), with the user's git identity configured.
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        home.path().join(".gitconfig"),
        "[user]\n\tname = Quick Start\n\temail = quick@example.invalid\n",
    )
    .unwrap();
    let rcs = home.path().join("rcs");
    let mut script = String::new();
    for line in &lines {
        script.push_str(line);
        script.push_str(&format!("\nprintf '%s\\n' \"$?\" >> '{}'\n", rcs.display()));
    }
    let bin_dir = std::path::Path::new(&bin()).parent().unwrap().to_path_buf();
    let out = std::process::Command::new("bash")
        .args(["-c", &script])
        .current_dir(home.path())
        .env_clear()
        .env("HOME", home.path())
        .env(
            "PATH",
            format!("{}:/usr/local/bin:/usr/bin:/bin", bin_dir.display()),
        )
        .env(
            "TMPDIR",
            std::env::var("TMPDIR").unwrap_or_else(|_| "/tmp".into()),
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let codes: Vec<String> = std::fs::read_to_string(&rcs)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    let expected: Vec<&str> = lines
        .iter()
        .map(|l| {
            if l.starts_with("loopexec run") {
                "10"
            } else {
                "0"
            }
        })
        .collect();
    assert_eq!(
        codes, expected,
        "lines {lines:#?}\nstdout {stdout}\nstderr {stderr}"
    );
    assert!(
        home.path().join(".config/loopexec/operator.key").exists(),
        "init made no key in the default place"
    );
    assert!(
        stdout.contains("operator_key") && stdout.contains("(created; fingerprint "),
        "{stdout}"
    );
    assert!(stdout.contains("\nverified\n"), "{stdout}");
    assert!(
        stdout.contains("-echo hello\n+echo hello, world"),
        "the agent's fix is not on the delivered branch: {stdout}"
    );
}
