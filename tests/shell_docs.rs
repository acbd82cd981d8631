//! Completions and manual pages generated from the binary's own clap definitions (issue 23 item 5):
//! bash loads the completion script and completes the commands; `man --out DIR` writes one page
//! per visible command; under `--json` each is one JSON object.
mod common;
use common::*;

#[test]
fn bash_loads_the_completion_script_and_completes_a_command() {
    let dir = workdir();
    let script = loopexec(dir.path(), &["completions", "bash"]);
    assert_eq!(script.code, 0, "{script:?}");
    std::fs::write(dir.path().join("loopexec.bash"), &script.stdout).unwrap();
    // Load it, then ask the completion function what `loopexec insp<TAB>` offers.
    let probe = "source ./loopexec.bash && complete -p loopexec && COMP_WORDS=(loopexec insp) COMP_CWORD=1 COMP_LINE='loopexec insp' COMP_POINT=13 && _loopexec loopexec insp loopexec && printf '%s\\n' \"${COMPREPLY[@]}\"";
    let out = std::process::Command::new("bash")
        .current_dir(dir.path())
        .args(["-c", probe])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        vec![
            "complete -o bashdefault -o default -o nosort -F _loopexec loopexec",
            "inspect-cost"
        ],
        "{stdout}"
    );
}

#[test]
fn man_writes_a_page_per_visible_command_and_prints_the_main_one() {
    let dir = workdir();
    let out = dir.path().join("man");
    let r = loopexec(dir.path(), &["man", "--json", "--out", &path_str(&out)]);
    assert_eq!(r.code, 0, "{r:?}");
    let pages = r.json()["man"]["pages"].as_array().unwrap().len();
    assert!(
        out.join("loopexec.1").exists()
            && out.join("loopexec-run.1").exists()
            && out.join("loopexec-inspect-cost.1").exists()
    );
    assert!(!out.join("loopexec-__probe-run.1").exists());
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), pages);
    let run_page = std::fs::read_to_string(out.join("loopexec-run.1")).unwrap();
    assert!(
        run_page.contains(".TH loopexec-run 1") && run_page.contains("budget\\-usd"),
        "{run_page}"
    );
    let main = loopexec(dir.path(), &["man"]);
    assert!(main.stdout.contains(".TH loopexec 1"), "{}", main.stdout);
}

#[test]
fn an_unknown_shell_is_a_usage_error_with_one_json_object() {
    let r = loopexec(workdir().path(), &["completions", "powershell", "--json"]);
    assert_eq!(r.code, 20, "{r:?}");
    assert_eq!(r.json()["status"], "error");
}

#[test]
fn docs_commands_md_is_the_binarys_own_markdown_reference() {
    let r = loopexec(workdir().path(), &["man", "--markdown"]);
    assert_eq!(r.code, 0, "{r:?}");
    let committed =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/commands.md")).unwrap();
    assert!(
        committed == r.stdout,
        "docs/commands.md is stale: regenerate it with `target/debug/loopexec man --markdown > docs/commands.md`"
    );
}

#[test]
fn every_command_help_ends_with_examples_of_that_command() {
    for command in [
        "init", "run", "status", "report", "verify", "sandbox", "man",
    ] {
        let r = loopexec(workdir().path(), &[command, "--help"]);
        assert_eq!(r.code, 0, "{r:?}");
        let examples = r
            .stdout
            .split("\nExamples:\n")
            .nth(1)
            .unwrap_or_else(|| panic!("`{command} --help` has no Examples:\n{}", r.stdout));
        assert!(
            examples
                .lines()
                .all(|l| l.trim_start().starts_with(&format!("loopexec {command}"))),
            "{examples}"
        );
    }
}

#[test]
fn markdown_with_out_is_a_usage_error_with_one_json_object_and_writes_nothing() {
    let dir = workdir();
    let out = dir.path().join("man");
    let r = loopexec(
        dir.path(),
        &["man", "--json", "--markdown", "--out", &path_str(&out)],
    );
    assert_eq!(r.code, 20, "{r:?}");
    assert_eq!(r.json()["errors"][0]["code"], "usage");
    assert!(!out.exists());
}
