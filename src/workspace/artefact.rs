//! Build artefacts: files a runner would load or execute that carry no source a reviewer can
//! read (Python bytecode and extension modules, shared objects, Node.js addons, WebAssembly,
//! Java classes, object files and archives, native executables). Recognised by name and, for a
//! regular file, by the magic bytes its content starts with, so a renamed shared object is still
//! one. The snapshot classifies every file the agent wrote; the artefact guard halts on those the
//! tree would hold.

/// The first bytes of a file the content rules read.
pub const HEAD_BYTES: usize = 16;

/// What kind of artefact `name` (a file name) is by its extension.
pub fn by_name(name: &[u8]) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase();
    let ext = |e: &[u8]| lower.len() > e.len() && lower.ends_with(e);
    if ext(b".pyc") || ext(b".pyo") {
        return Some("Python bytecode");
    }
    if ext(b".pyd") {
        return Some("Python extension module");
    }
    if ext(b".so") || is_versioned_so(&lower) {
        return Some("shared object");
    }
    if ext(b".dylib") || ext(b".dll") {
        return Some("shared library");
    }
    if ext(b".node") {
        return Some("Node.js addon");
    }
    if ext(b".wasm") {
        return Some("WebAssembly module");
    }
    if ext(b".class") {
        return Some("Java class file");
    }
    if ext(b".jar") {
        return Some("Java archive");
    }
    if ext(b".o") || ext(b".syso") {
        // `.syso`: an object file the go command links into its package without being asked.
        return Some("object file");
    }
    if ext(b".a") {
        return Some("static archive");
    }
    None
}

/// `libx.so.1`, `libx.so.1.2.3`.
fn is_versioned_so(lower: &[u8]) -> bool {
    let Some(at) = lower.windows(4).position(|w| w == b".so.") else {
        return false;
    };
    let rest = &lower[at + 4..];
    at > 0
        && !rest.is_empty()
        && rest
            .split(|&b| b == b'.')
            .all(|part| !part.is_empty() && part.iter().all(u8::is_ascii_digit))
}

/// What kind of artefact a file starting with `head` is by its magic bytes.
pub fn by_content(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(b"\x7fELF") {
        return Some("ELF binary");
    }
    if [
        b"\xfe\xed\xfa\xce",
        b"\xfe\xed\xfa\xcf",
        b"\xce\xfa\xed\xfe",
        b"\xcf\xfa\xed\xfe",
    ]
    .iter()
    .any(|m| head.starts_with(*m))
    {
        return Some("Mach-O binary");
    }
    if head.starts_with(b"\xca\xfe\xba\xbe") {
        return Some("Java class file or Mach-O universal binary");
    }
    if head.starts_with(b"\0asm") {
        return Some("WebAssembly module");
    }
    if head.starts_with(b"!<arch>\n") {
        return Some("static archive");
    }
    if is_python_bytecode(head) {
        return Some("Python bytecode");
    }
    None
}

/// CPython 3 bytecode (PEP 552 header): a 16-bit magic number of 3000..=3999 followed by
/// `\r\n`, then a flags word of 0 (timestamp), 1 (unchecked hash) or 3 (checked hash).
fn is_python_bytecode(head: &[u8]) -> bool {
    if head.len() < HEAD_BYTES || &head[2..4] != b"\r\n" {
        return false;
    }
    let magic = u16::from_le_bytes([head[0], head[1]]);
    let flags = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    (3000..=3999).contains(&magic) && matches!(flags, 0 | 1 | 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_each_kind_are_recognised_in_any_case() {
        for (name, kind) in [
            ("calc.cpython-311-x86_64-linux-gnu.so", "shared object"),
            ("libfoo.so.1.2", "shared object"),
            ("core.PYC", "Python bytecode"),
            ("addon.node", "Node.js addon"),
            ("m.wasm", "WebAssembly module"),
            ("App.class", "Java class file"),
            ("x.o", "object file"),
            ("zz_amd64.syso", "object file"),
            ("libx.a", "static archive"),
            ("lib.dylib", "shared library"),
        ] {
            assert_eq!(by_name(name.as_bytes()), Some(kind), "{name}");
        }
        for name in [
            "calc.py",
            "index.js",
            "README.so.md",
            "lib.so.x",
            ".so",
            "go.mod",
            "photo.jpg",
            "a",
        ] {
            assert_eq!(by_name(name.as_bytes()), None, "{name}");
        }
    }

    #[test]
    fn magic_bytes_name_a_renamed_binary() {
        assert_eq!(
            by_content(b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0"),
            Some("ELF binary")
        );
        assert_eq!(
            by_content(b"\xcf\xfa\xed\xfe\x07\0\0\x01"),
            Some("Mach-O binary")
        );
        assert_eq!(by_content(b"\0asm\x01\0\0\0"), Some("WebAssembly module"));
        assert_eq!(by_content(b"!<arch>\nx.o/"), Some("static archive"));
        // CPython 3.11's magic (3495), an unchecked-hash header.
        let pyc = [
            &3495u16.to_le_bytes()[..],
            b"\r\n",
            &1u32.to_le_bytes(),
            &[0u8; 8],
        ]
        .concat();
        assert_eq!(by_content(&pyc), Some("Python bytecode"));
    }

    #[test]
    fn text_is_no_artefact_even_with_a_crlf_after_two_bytes() {
        assert_eq!(by_content(b"{}\r\n{\"a\": 1}\r\n\r\n"), None);
        assert_eq!(by_content(b"def add(a, b):\n"), None);
        assert_eq!(by_content(b""), None);
    }
}
