//! `loopexec policy check/show/diff` on the shipped policies and on malformed ones.

mod common;
use common::bin;
use std::path::{Path, PathBuf};
use std::process::Command;

fn shipped(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("policies")
        .join(name)
}

fn run_json(args: &[&str]) -> (i32, serde_json::Value) {
    let out = Command::new(bin())
        .arg("--json")
        .args(args)
        .output()
        .expect("run loopexec");
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("not one JSON object ({e}): {text}"));
    (out.status.code().unwrap_or(-1), v)
}

fn malformed(text: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, text).unwrap();
    let (code, v) = run_json(&["policy", "check", file.to_str().unwrap()]);
    (
        code,
        v["errors"][0]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

#[test]
fn every_shipped_policy_validates() {
    for name in ["agent.toml", "exec.toml", "offline.toml"] {
        let (code, v) = run_json(&["policy", "check", shipped(name).to_str().unwrap()]);
        assert_eq!(code, 0, "{name}: {v}");
        assert_eq!(v["valid"], true);
    }
}

#[test]
fn unknown_key_is_refused_with_its_line() {
    let (code, msg) = malformed("[network]\nmode = \"none\"\nallow_everything = true\n");
    assert_eq!(code, 20);
    assert!(msg.contains("bad.toml:3:"), "{msg}");
    assert!(msg.contains("allow_everything"), "{msg}");
}

#[test]
fn unknown_table_is_refused_with_its_line() {
    let (code, msg) = malformed("\n\n[sandbox]\nenabled = false\n");
    assert_eq!(code, 20);
    assert!(msg.contains("bad.toml:3:"), "{msg}");
}

#[test]
fn relative_path_is_refused_with_its_line() {
    let (code, msg) = malformed("[filesystem]\nread_only = [\"/usr\",\n  \"etc\"]\n");
    assert_eq!(code, 20);
    assert!(
        msg.contains("bad.toml:3:3:") && msg.contains("not an absolute path"),
        "{msg}"
    );
}

#[test]
fn dotdot_is_refused_with_its_line() {
    let (code, msg) = malformed("[filesystem]\n\nread_write = [\"/srv/../etc\"]\n");
    assert_eq!(code, 20);
    assert!(msg.contains("bad.toml:3:") && msg.contains(".."), "{msg}");
}

#[test]
fn bad_type_is_refused_with_its_line() {
    let (code, msg) = malformed("[resources]\nmemory_bytes = 1\npids_max = \"lots\"\n");
    assert_eq!(code, 20);
    assert!(msg.contains("bad.toml:3:"), "{msg}");
}

#[test]
fn an_unknown_may_skip_layer_is_invalid_input_in_one_json_object() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, "[layers]\nmay_skip = [\"firewall\"]\n").unwrap();
    let out = Command::new(bin())
        .args(["--json", "policy", "check"])
        .arg(&file)
        .output()
        .expect("run loopexec");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.trim_end().lines().count(), 1, "{text}");
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(out.status.code(), Some(20));
    assert_eq!(v["status"], "error");
    assert_eq!(v["errors"].as_array().map(Vec::len), Some(1));
    assert_eq!(v["errors"][0]["code"], "invalid_input");
    let msg = v["errors"][0]["message"].as_str().unwrap();
    assert!(
        msg.contains("bad.toml:2:") && msg.contains("\"firewall\" is not a layer"),
        "{msg}"
    );
}

#[test]
fn protected_path_with_dotdot_is_refused() {
    let (code, msg) = malformed("[filesystem]\nprotected = [\".git/../..\"]\n");
    assert_eq!(code, 20);
    assert!(msg.contains("bad.toml:2:"), "{msg}");
}

#[test]
fn show_reports_the_sha256_of_the_file_bytes() {
    use sha2::Digest;
    let file = shipped("exec.toml");
    let (code, v) = run_json(&["policy", "show", file.to_str().unwrap()]);
    assert_eq!(code, 0);
    let want = hex::encode(sha2::Sha256::digest(std::fs::read(&file).unwrap()));
    assert_eq!(v["sha256"], want.as_str());
    assert_eq!(v["policy"]["network"]["mode"], "none");
}

#[test]
fn diff_names_the_network_mode_between_agent_and_exec() {
    let (code, v) = run_json(&[
        "policy",
        "diff",
        shipped("exec.toml").to_str().unwrap(),
        shipped("agent.toml").to_str().unwrap(),
    ]);
    assert_eq!(code, 0);
    let keys: Vec<&str> = v["differences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["key"].as_str().unwrap())
        .collect();
    assert!(keys.contains(&"network.mode"), "{keys:?}");
    assert_eq!(v["identical"], false);
}

#[test]
fn a_nul_byte_in_an_env_set_value_is_refused_with_its_line() {
    let (code, msg) = malformed("[env]\nallow = [\"PATH\"]\n[env.set]\nTOKEN = \"ab\\u0000cd\"\n");
    assert_eq!(code, 20);
    assert!(msg.ends_with(":4:9: env.set.TOKEN: the value holds a NUL byte, which no environment variable can carry"), "{msg}");
}
