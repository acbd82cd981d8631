//! Which paths a workspace tree may hold. A path from git (or from the agent's upper layer) is a
//! sequence of `/`-separated components, each non-empty, not `.` or `..`, not `.git` in any case,
//! and without a NUL byte; it is never absolute. Anything else is refused before it touches the
//! file system, so a crafted tree object cannot write outside the baseline or plant a `.git`.

use super::{WorkspaceError, WsResult};

/// Whether one path component is acceptable; the reason when it is not.
pub fn component_problem(name: &[u8]) -> Option<&'static str> {
    if name.is_empty() {
        return Some("empty path component");
    }
    if name == b"." || name == b".." {
        return Some("`.` or `..` component");
    }
    if name.contains(&b'/') {
        return Some("`/` inside a component");
    }
    if name.contains(&0) {
        return Some("NUL byte");
    }
    if name.eq_ignore_ascii_case(b".git") {
        return Some("`.git` component");
    }
    None
}

/// Check a full relative path (`a/b/c`).
pub fn check(path: &[u8]) -> WsResult<()> {
    if path.first() == Some(&b'/') {
        return Err(WorkspaceError::unsafe_path(path, "absolute path"));
    }
    for c in path.split(|&b| b == b'/') {
        if let Some(reason) = component_problem(c) {
            return Err(WorkspaceError::unsafe_path(path, reason));
        }
    }
    Ok(())
}

/// The parent of `a/b/c` is `a/b`; of `a` it is empty.
pub fn parent(path: &[u8]) -> &[u8] {
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) => &path[..i],
        None => b"",
    }
}

/// The last component.
pub fn file_name(path: &[u8]) -> &[u8] {
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) => &path[i + 1..],
        None => path,
    }
}

/// `a/b` joined with `c`.
pub fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    if dir.is_empty() {
        return name.to_vec();
    }
    let mut p = Vec::with_capacity(dir.len() + 1 + name.len());
    p.extend_from_slice(dir);
    p.push(b'/');
    p.extend_from_slice(name);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_paths_pass() {
        for p in [&b"a"[..], b"src/main.rs", b".github/workflows/ci.yml", b"a/.gitignore"] {
            check(p).unwrap();
        }
    }

    #[test]
    fn dot_dot_absolute_empty_and_dot_git_components_are_refused() {
        for p in [&b"../x"[..], b"a/../../x", b"/etc/passwd", b"a//b", b"a/./b", b".git/config", b"sub/.GIT/hooks/x", b"", b"a/"] {
            assert!(matches!(check(p), Err(WorkspaceError::UnsafePath { .. })), "{:?}", String::from_utf8_lossy(p));
        }
    }
}
