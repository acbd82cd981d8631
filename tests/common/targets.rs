//! The two-function pytest project of the targets tests: at t0 `test_add` fails (the usual
//! target), `test_sub` passes and `test_legacy_format` is an unrelated pre-existing failure.

use super::{commit_t0, require_pytest, workdir, write};

/// The project committed as t0, with `loop_toml` as its loop.toml when given.
pub fn project(loop_toml: Option<&str>) -> tempfile::TempDir {
    require_pytest();
    let repo = workdir();
    let p = repo.path();
    write(
        p,
        "calc/__init__.py",
        "def add(a, b):\n    return a - b  # add\n\n\ndef sub(a, b):\n    return a - b  # sub\n",
    );
    write(p, "tests/test_calc.py", "from calc import add, sub\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n");
    write(
        p,
        "tests/test_legacy.py",
        "def test_legacy_format():\n    assert '%d' % 3 == 'three'\n",
    );
    write(p, ".gitignore", "out/\n__pycache__/\n");
    if let Some(toml) = loop_toml {
        write(p, "loop.toml", toml);
    }
    commit_t0(p);
    repo
}
