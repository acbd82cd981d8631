//! The operator documentation stays whole (issue 23 item 10): every halt reason of the binary has
//! its section in docs/halts.md under its own exit code, and the README's index names every page
//! under docs/ (and no page that is not there).
use loopexec::halt::HaltReason;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(path: &str) -> String {
    std::fs::read_to_string(format!("{ROOT}/{path}")).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn every_halt_reason_has_a_section_under_its_exit_code_with_what_to_do() {
    let page = read("docs/halts.md");
    let sections: Vec<&str> = page.split("\n### ").skip(1).collect();
    for reason in HaltReason::ALL {
        let heading = format!("`{}` (exit {})", reason.as_str(), reason.class().code());
        let section = sections
            .iter()
            .find(|s| s.starts_with(&heading))
            .unwrap_or_else(|| panic!("docs/halts.md has no section `### {heading}`"));
        assert!(
            section.contains("**Do:**"),
            "docs/halts.md `{heading}` does not say what to do"
        );
    }
    assert_eq!(
        sections.len(),
        HaltReason::ALL.len(),
        "docs/halts.md has a section for a reason the binary does not have"
    );
}

#[test]
fn the_readme_index_names_every_page_under_docs_and_only_those() {
    let readme = read("README.md");
    let index = readme
        .split("\n## Documentation\n")
        .nth(1)
        .expect("README.md has no `## Documentation` index");
    let index = index.split("\n## ").next().unwrap_or(index);
    let mut pages: Vec<String> = std::fs::read_dir(format!("{ROOT}/docs"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .collect();
    pages.sort();
    for page in &pages {
        assert!(
            index.contains(&format!("(docs/{page})")),
            "README.md's index does not link docs/{page}"
        );
    }
    for link in index.split("(docs/").skip(1) {
        let target = link.split(')').next().unwrap_or("");
        let file = target.split('#').next().unwrap_or(target);
        assert!(
            std::path::Path::new(&format!("{ROOT}/docs/{file}")).exists(),
            "README.md's index links docs/{target}, which is not there"
        );
    }
}

/// The steps of docs/examples/github-actions-loop.yml as `(uses, run)` pairs, read by a real YAML
/// parser (Debian's python3-yaml, which ci/setup.sh installs).
fn workflow_steps() -> Vec<(String, String)> {
    let script = "import json, sys, yaml\nw = yaml.safe_load(open(sys.argv[1]))\nprint(json.dumps([[s.get('uses', ''), s.get('run', '')] for j in w['jobs'].values() for s in j['steps']]))";
    let out = std::process::Command::new("/usr/bin/python3")
        .args([
            "-c",
            script,
            &format!("{ROOT}/docs/examples/github-actions-loop.yml"),
        ])
        .output()
        .expect("python3 (ci/setup.sh installs python3-yaml)");
    assert!(
        out.status.success(),
        "the workflow is not valid YAML: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_github_actions_example_runs_a_loop_verifies_it_and_uploads_the_receipt_and_report() {
    let steps = workflow_steps();
    let runs: Vec<&str> = steps.iter().map(|(_, run)| run.as_str()).collect();
    let position = |needle: &str| {
        runs.iter()
            .position(|r| r.contains(needle))
            .unwrap_or_else(|| panic!("no step runs `{needle}`"))
    };
    let (up, run, verify, report) = (
        position("vagrant up"),
        position("loopexec run"),
        position("loopexec verify"),
        position("--html"),
    );
    assert!(
        up < run && run < verify && verify <= report,
        "steps out of order: {runs:#?}"
    );
    let upload = steps
        .iter()
        .position(|(uses, _)| uses.starts_with("actions/upload-artifact@"))
        .expect("no upload step");
    assert!(
        report < upload
            && runs[upload - 1].contains("report.html")
            && runs[upload - 1].contains("run.tar"),
        "{runs:#?}"
    );
}
