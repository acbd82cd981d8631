//! Python module shadowing (issue 12, item 4): a workspace file at an importable top level named
//! like a standard-library or installed module. The importable top levels are the repository
//! root, `src/` (the src layout), and the directory pytest's default `prepend` import mode puts
//! on `sys.path` for each test file and conftest (the first ancestor without `__init__.py`).
//! The set of names the check's interpreter knows comes from the engine, obtained with
//! [`MODULE_NAMES_ARGV`] through [`module_names_via`] or given as a list.

use std::collections::BTreeSet;

use serde::Serialize;

use super::syntax::file_name;
use super::AnalysisError;

/// The command that prints, one per line, every top-level module name the interpreter resolves
/// without the workspace: the standard library, builtins, and what is installed on its path.
/// `-I` keeps the current directory and the user's environment variables out of `sys.path`; run
/// it with the workspace as the working directory, so that modules found inside the workspace
/// (an editable install of the project under test) are not counted as installed.
pub const MODULE_NAMES_ARGV: &[&str] = &["python3", "-I", "-c", MODULE_NAMES_SCRIPT];

const MODULE_NAMES_SCRIPT: &str = r#"import os, pkgutil, sys
cwd = os.path.realpath(os.getcwd())
names = set(sys.stdlib_module_names) | set(sys.builtin_module_names)
for m in pkgutil.iter_modules():
    where = os.path.realpath(getattr(m.module_finder, "path", None) or cwd)
    if where != cwd and not where.startswith(cwd + os.sep):
        names.add(m.name)
print("\n".join(sorted(names)))
"#;

/// At most this many bytes of module-name output are read.
pub const MAX_MODULE_NAMES_BYTES: usize = 4 * 1024 * 1024;

/// Runs [`MODULE_NAMES_ARGV`] with the engine's command runner (which decides the zone and
/// environment) and parses its standard output.
pub fn module_names_via<E: std::fmt::Display>(
    run: impl FnOnce(&[&str]) -> Result<Vec<u8>, E>,
) -> Result<BTreeSet<String>, AnalysisError> {
    let stdout =
        run(MODULE_NAMES_ARGV).map_err(|e| AnalysisError::ModuleNamesCommand(e.to_string()))?;
    parse_module_names(&stdout)
}

/// Parses one module name a line; blank lines are ignored, a line that is not one name (a
/// traceback, a path) is an error naming the line.
pub fn parse_module_names(stdout: &[u8]) -> Result<BTreeSet<String>, AnalysisError> {
    if stdout.len() > MAX_MODULE_NAMES_BYTES {
        return Err(AnalysisError::ModuleNamesOutput(format!(
            "{} bytes, more than {MAX_MODULE_NAMES_BYTES}",
            stdout.len()
        )));
    }
    let text = std::str::from_utf8(stdout)
        .map_err(|_| AnalysisError::ModuleNamesOutput("output that is not UTF-8".to_string()))?;
    let mut names = BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        let name = line.trim();
        if name.is_empty() {
            continue;
        }
        // Installed names need not be identifiers (mypyc ships `81d2...__mypyc`), but one
        // name is one word of letters, digits, `_` and `-`.
        let word = name
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-');
        if !word {
            let shown: String = name.chars().take(60).collect();
            return Err(AnalysisError::ModuleNamesOutput(format!(
                "line {} that is not a module name: {shown:?}",
                i + 1
            )));
        }
        names.insert(name.to_string());
    }
    if names.is_empty() {
        return Err(AnalysisError::ModuleNamesOutput(
            "no module names".to_string(),
        ));
    }
    Ok(names)
}

/// A workspace file that shadows a known module.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Shadowing {
    /// The workspace file (`json.py`, `src/typing/__init__.py`).
    pub path: String,
    /// The module it shadows.
    pub module: String,
}

/// The directory a path defines a top-level module in, and the module's name: `d/x.py`,
/// `d/x.pyc`, an extension module `d/x.so`/`d/x.cpython-312-x86_64-linux-gnu.so`/`d/x.pyd`
/// define `x` in `d`; a package `d/x/__init__.py` defines `x` in `d` ("" is the root).
fn module_defined(path: &str) -> Option<(&str, &str)> {
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    if name == "__init__.py" {
        let (parent, package) = dir.rsplit_once('/').unwrap_or(("", dir));
        return (!package.is_empty()).then_some((parent, package));
    }
    let (stem, ext) = name.split_once('.')?;
    let module_file = matches!(ext, "py" | "pyc" | "pyd" | "so") || ext.ends_with(".so");
    (module_file && !stem.is_empty()).then_some((dir, stem))
}

/// The importable top levels of a tree given all its paths.
pub fn import_roots(paths: &[&str]) -> BTreeSet<String> {
    let all: BTreeSet<&str> = paths.iter().copied().collect();
    let mut roots: BTreeSet<String> = [String::new(), "src".to_string()].into_iter().collect();
    for path in paths {
        let name = file_name(path);
        let python_test = name.ends_with(".py")
            && (name.starts_with("test_") || name.ends_with("_test.py") || name == "conftest.py");
        if !python_test {
            continue;
        }
        // pytest's prepend mode: the first directory upwards that is not a package.
        let mut dir = path.rsplit_once('/').map_or("", |(d, _)| d);
        while !dir.is_empty() && all.contains(format!("{dir}/__init__.py").as_str()) {
            dir = dir.rsplit_once('/').map_or("", |(d, _)| d);
        }
        roots.insert(dir.to_string());
    }
    roots
}

/// Every workspace file at an importable top level whose module name is in `known`.
pub fn shadowing(known: &BTreeSet<String>, paths: &[&str]) -> Vec<Shadowing> {
    let roots = import_roots(paths);
    let mut found: Vec<Shadowing> = paths
        .iter()
        .filter_map(|path| {
            let (dir, module) = module_defined(path)?;
            (roots.contains(dir) && known.contains(module)).then(|| Shadowing {
                path: path.to_string(),
                module: module.to_string(),
            })
        })
        .collect();
    found.sort_by(|a, b| a.path.cmp(&b.path));
    found
}
