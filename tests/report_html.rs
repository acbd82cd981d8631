//! `loopexec report <run> --html OUT`: one self-contained page of a real run, written atomically;
//! a hostile test name and file name reach it only escaped; in headless Chromium it renders with
//! one chart point per iteration, and its screenshot is kept as a CI artifact
//! (`target/ci-artifacts/report.png`); a bad OUT is a clear error with one JSON object.
mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A test name that would close a table cell and run script if it reached the page raw.
const HOSTILE_TEST: &str = "</td><script>alert(1)</script><img src=x onerror=alert(1)>";
/// Its id (`classname::name`) as the page shows it.
const HOSTILE_TEST_SHOWN: &str = "calc::&lt;/td&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src&#61;x onerror&#61;alert(1)&gt;";
/// A file name with every HTML-special character and control bytes (an ANSI colour, SOH).
const HOSTILE_FILE: &str = "f\"'<>&\x01\x1b[31m.txt";
const HOSTILE_FILE_SHOWN: &str = "tests/f&quot;&#39;&lt;&gt;&amp;\\x01\\x1b[31m.txt";

/// The check: a JUnit report of three tests `calc::t1..t3`, of which those numbered above the
/// count in `progress` fail (and, with `hostile`, one more named [`HOSTILE_TEST`], failing until
/// the count reaches 3); exits 0 when the count is 3.
fn check_script(hostile: bool) -> String {
    let hostile_case = match hostile {
        true => "  [ \"$n\" -ge 3 ] || echo '<testcase classname=\"calc\" name=\"&lt;/td&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;\"><failure message=\"m\">boom</failure></testcase>'\n",
        false => "",
    };
    format!(
        "n=$(cat progress 2>/dev/null || echo 0)\nmkdir -p out\n{{ echo '<testsuite name=\"s\">'\n  for i in 1 2 3; do\n    if [ $i -gt $n ]; then echo \"<testcase classname=\\\"calc\\\" name=\\\"t$i\\\"><failure message=\\\"m\\\">boom</failure></testcase>\"; else echo \"<testcase classname=\\\"calc\\\" name=\\\"t$i\\\"/>\"; fi\n  done\n{hostile_case}  echo '</testsuite>'; }} > out/junit.xml\n[ \"$n\" -ge 3 ]\n"
    )
}

/// A committed project whose check is [`check_script`].
fn project(hostile: bool) -> tempfile::TempDir {
    let dir = workdir();
    write(dir.path(), "tests/check.sh", &check_script(hostile));
    write(dir.path(), ".gitignore", "out/\n.loopexec/\nprogress\n");
    write(dir.path(), "name", HOSTILE_FILE);
    commit_t0(dir.path());
    dir
}

/// `run` (id `r`) of [`check_script`]'s check with the agent `exec` and `extra` arguments.
fn run_r(dir: &Path, exec: &str, extra: &[&str]) -> Ran {
    let mut args = vec![
        "run",
        "--json",
        "--run-id",
        "r",
        "--exec",
        exec,
        "--check",
        "sh tests/check.sh",
        "--report",
        "out/junit.xml",
    ];
    args.extend_from_slice(extra);
    loopexec(dir, &args)
}

/// A run (id `r`, no sandbox) whose agent writes the iteration number to `progress`: the failing
/// set shrinks 2, 1, 0 over three iterations.
fn three_iteration_run() -> tempfile::TempDir {
    let dir = project(false);
    let r = run_r(
        dir.path(),
        "echo $LOOPEXEC_ITERATION > progress",
        &["--isolation", "none", "--max-iterations", "5"],
    );
    assert_eq!(r.json()["iteration"], 3, "{r:?}");
    dir
}

/// `report r --html OUT --json` in `dir`; the outcome.
fn report_html(dir: &Path, out: &Path) -> Ran {
    loopexec(dir, &["report", "r", "--html", &path_str(out), "--json"])
}

#[test]
fn html_json_names_the_file_written_and_the_page_is_self_contained() {
    let dir = three_iteration_run();
    let out = dir.path().join("report.html");
    let r = report_html(dir.path(), &out);
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    let page = std::fs::read_to_string(&out).unwrap();
    assert_eq!(v["html"]["path"], path_str(&out));
    assert_eq!(v["html"]["bytes"], page.len());
    assert_eq!(
        (
            v["html"]["iterations_shown"].as_u64(),
            v["html"]["iterations_left_out"].as_u64(),
            v["html"]["verified"].as_bool()
        ),
        (Some(3), Some(0), Some(true))
    );
    assert!(page.starts_with("<!DOCTYPE html>\n"), "{page}");
    // No script, and nothing fetched: no src or href attribute, no stylesheet link.
    for absent in ["<script", " src=", " href=", "<link", "<img", "<iframe"] {
        assert!(!page.contains(absent), "{absent} in the page:\n{page}");
    }
    // Nothing but the page is left in its directory (the temporary file was renamed over OUT).
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("report"))
        .collect();
    assert_eq!(names, ["report.html"]);
}

#[test]
fn the_page_shows_the_pins_the_verification_with_its_key_and_explain_halts_verdict() {
    let dir = three_iteration_run();
    let out = dir.path().join("report.html");
    assert_eq!(report_html(dir.path(), &out).code, 0);
    let page = std::fs::read_to_string(&out).unwrap();
    let verify = loopexec(dir.path(), &["verify", "r", "--json"]).json();
    let explained = loopexec(dir.path(), &["explain-halt", "r", "--json"]).json();
    let fingerprint = verify["key"]["fingerprint"].as_str().unwrap();
    assert!(
        page.contains(&format!("fingerprint <code>{fingerprint}</code>")),
        "{page}"
    );
    assert!(
        page.contains("<span class=\"badge ok\">verified</span>"),
        "{page}"
    );
    for check in verify["verify"]["checks"].as_array().unwrap() {
        assert!(
            page.contains(&format!("<code>{}</code>", check["name"].as_str().unwrap())),
            "verify's check {check} is on the page"
        );
    }
    let verdict = explained["explanation"]["verdict"]["verdict"]
        .as_str()
        .unwrap();
    assert!(
        page.contains(&format!("<span class=\"badge warn\">{verdict}</span>")),
        "explain-halt's verdict {verdict} on the page:\n{page}"
    );
    assert!(
        page.contains(
            "<tr><th>isolation</th><td>none (backend native, workspace in_place)</td></tr>"
        ),
        "{page}"
    );
    assert!(
        page.contains("<tr><th>check</th><td><code>sh tests/check.sh</code></td></tr>"),
        "{page}"
    );
    // Each iteration's failing tests and the ratchet's judgement, as `ratchet` says it.
    let ratchet = loopexec(dir.path(), &["ratchet", "r", "--json"]).json();
    assert_eq!(ratchet["ratchet"]["judged"].as_array().unwrap().len(), 3);
    assert!(
        page.contains("<span class=\"badge ok\">accepted</span> accepted, 1 failing"),
        "{page}"
    );
    assert!(page.contains("<li><code>calc::t3</code></li>"), "{page}");
}

#[test]
fn a_hostile_test_name_and_file_name_reach_the_page_only_escaped() {
    // Sandboxed and detached (as root the zones run as an unprivileged uid): the protected-path
    // guard sees the agent's file in iteration 2, after iteration 1's check reported the test.
    let dir = project(true);
    let r = run_r(
        dir.path(),
        "case $LOOPEXEC_ITERATION in 1) true ;; *) touch \"tests/$(cat name)\" ;; esac",
        &[],
    );
    assert_eq!(
        (r.code, r.json()["halt_reason"].as_str()),
        (13, Some("blocked_path_modified")),
        "{r:?}"
    );
    let out = dir.path().join("report.html");
    assert_eq!(report_html(dir.path(), &out).code, 0);
    let page = std::fs::read_to_string(&out).unwrap();
    assert!(
        page.contains(&format!("<li><code>{HOSTILE_TEST_SHOWN}</code></li>")),
        "the test id, escaped, in the failing set:\n{page}"
    );
    assert!(
        page.contains(&format!(
            "<tr><th>detail</th><td>the agent changed protected paths: {HOSTILE_FILE_SHOWN}</td></tr>"
        )),
        "the file name, escaped, in the halt's detail:\n{page}"
    );
    let lowered = page.to_lowercase();
    for absent in ["<script", "onerror=", "<img", "<td></td><script"] {
        assert!(!lowered.contains(absent), "{absent} in the page:\n{page}");
    }
    assert!(
        !page.chars().any(|c| c.is_control() && c != '\n'),
        "a raw control character in the page"
    );
    assert!(!page.contains(HOSTILE_FILE) && !page.contains(HOSTILE_TEST));
}

#[test]
fn an_out_that_is_a_directory_is_a_usage_error_with_one_json_object() {
    let dir = three_iteration_run();
    let out = dir.path().join("pages");
    std::fs::create_dir(&out).unwrap();
    let r = report_html(dir.path(), &out);
    let v = r.json();
    assert_eq!(
        (r.code, v["errors"][0]["code"].as_str()),
        (20, Some("usage")),
        "{r:?}"
    );
    assert_eq!(
        v["errors"][0]["message"],
        format!("--html {}: is a directory", path_str(&out))
    );
    assert_eq!(
        std::fs::read_dir(&out).unwrap().count(),
        0,
        "nothing written into it"
    );
}

#[test]
fn an_out_in_a_missing_directory_is_an_io_error_and_writes_nothing() {
    let dir = three_iteration_run();
    let out = dir.path().join("no/such/dir/report.html");
    let r = report_html(dir.path(), &out);
    let v = r.json();
    assert_eq!(
        (r.code, v["errors"][0]["code"].as_str()),
        (30, Some("io")),
        "{r:?}"
    );
    assert!(
        v["errors"][0]["message"]
            .as_str()
            .unwrap()
            .starts_with(&path_str(&out)),
        "{v}"
    );
    assert!(!dir.path().join("no").exists());
}

#[test]
fn pubkey_without_html_is_a_usage_error() {
    let dir = three_iteration_run();
    let r = loopexec(dir.path(), &["report", "r", "--pubkey", "k.pub", "--json"]);
    assert_eq!(
        (r.code, r.json()["errors"][0]["code"].as_str()),
        (20, Some("usage")),
        "--pubkey only with --html: {r:?}"
    );
}

/// Where CI keeps the screenshot: `target/ci-artifacts/` of this checkout (or `CARGO_TARGET_DIR`),
/// where this user can write there; else (the unprivileged rerun of a root checkout) a directory
/// of its own that outlives the test, named on stdout.
fn artifact_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let dir = target.join("ci-artifacts");
    if std::fs::create_dir_all(&dir).is_ok() && tempfile::tempfile_in(&dir).is_ok() {
        return dir;
    }
    let own = tempfile::Builder::new()
        .prefix("loopexec-ci-artifacts-")
        .tempdir()
        .unwrap()
        .keep();
    println!(
        "{} is not writable by this user: the screenshot goes to {}",
        dir.display(),
        own.display()
    );
    own
}

/// Debian's chromium: under CI its absence fails the test; elsewhere the test says why it does
/// not run.
fn chromium() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("chromium"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "Debian's chromium is needed (ci/setup.sh installs it)"
        );
        eprintln!("NOT RUN: chromium is not installed (ci/setup.sh installs it; CI=true makes this a failure)");
    }
    found
}

/// Run headless chromium on `page` with `args` (a fresh HOME and profile), its stdout to a file;
/// killed (by its pid) if it has not finished in 180 s. Returns its stdout.
fn headless(chromium: &Path, page: &Path, args: &[&str]) -> String {
    let home = workdir();
    let stdout = home.path().join("stdout");
    let mut child = std::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
        ])
        .arg(format!(
            "--user-data-dir={}",
            home.path().join("profile").display()
        ))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .env("HOME", home.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn chromium");
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(180) {
            // SAFETY: kill(2) of the chromium this test started.
            unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
            let _ = child.wait();
            panic!("chromium did not finish within 180 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "chromium {args:?}: {status:?}");
    std::fs::read_to_string(&stdout).unwrap()
}

/// A PNG's width and height from its IHDR chunk (panics unless `bytes` starts as a PNG does).
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    assert_eq!(&bytes[12..16], b"IHDR", "the first chunk is IHDR");
    let be =
        |at: usize| u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    (be(16), be(20))
}

#[test]
fn in_headless_chromium_the_chart_has_one_point_per_iteration_and_a_screenshot_is_kept() {
    let Some(chromium) = chromium() else { return };
    let dir = three_iteration_run();
    let out = dir.path().join("report.html");
    assert_eq!(report_html(dir.path(), &out).code, 0);
    let dom = headless(&chromium, &out, &["--dump-dom"]);
    let points: Vec<&str> = dom
        .match_indices("<circle data-iteration=\"")
        .map(|(i, m)| dom[i + m.len()..].split('"').next().unwrap_or(""))
        .collect();
    assert_eq!(
        points,
        ["1", "2", "3"],
        "one point per iteration in the rendered DOM"
    );
    assert!(
        dom.contains("<h2>Failing tests per iteration</h2>"),
        "the page rendered: {dom}"
    );
    let png = artifact_dir().join("report.png");
    let _ = std::fs::remove_file(&png);
    headless(
        &chromium,
        &out,
        &[
            &format!("--screenshot={}", png.display()),
            "--window-size=1200,1600",
            "--hide-scrollbars",
        ],
    );
    let bytes = std::fs::read(&png).expect("the screenshot");
    println!("screenshot: {}", png.display());
    assert_eq!(png_size(&bytes), (1200, 1600));
    assert!(
        bytes.len() > 20_000,
        "a screenshot of a rendered page, not a blank one: {} bytes",
        bytes.len()
    );
}

#[test]
fn a_metered_run_has_one_cost_bar_per_iteration_with_reports_cost() {
    // The agent reports one model call per iteration, costing 0.01 USD times the iteration.
    let dir = project(false);
    let agent = r#"echo $LOOPEXEC_ITERATION > progress; printf '{"provider":"anthropic","model":"claude-x","input_tokens":100,"output_tokens":10,"usd":0.0%s,"id":"call%s"}\n' $LOOPEXEC_ITERATION $LOOPEXEC_ITERATION >> "$LOOPEXEC_USAGE""#;
    let r = run_r(
        dir.path(),
        agent,
        &["--isolation", "none", "--max-iterations", "5"],
    );
    assert_eq!(r.json()["iteration"], 3, "{r:?}");
    let out = dir.path().join("report.html");
    assert_eq!(report_html(dir.path(), &out).code, 0);
    let page = std::fs::read_to_string(&out).unwrap();
    let report = loopexec(dir.path(), &["report", "r", "--json"]).json();
    assert_eq!(
        page.matches("<rect data-cost-iteration=").count(),
        3,
        "{page}"
    );
    for (n, iteration) in report["report"]["iterations"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        let micros = iteration["cost"]["usd_micros"].as_u64().unwrap();
        assert_eq!(micros, 10_000 * (n as u64 + 1));
        assert!(
            page.contains(&format!(
                "<title>iteration {}: 0.0{}0000 USD</title>",
                n + 1,
                n + 1
            )),
            "{page}"
        );
    }
    assert!(
        page.contains("<tr><th>cost</th><td>0.060000 USD, 330 tokens</td></tr>"),
        "{page}"
    );
}
