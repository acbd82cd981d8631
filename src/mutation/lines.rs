//! Which lines of a file the agent changed or added against t0: the inserted side of a line diff
//! (Myers, through the `similar` crate). A file absent at t0 has every line changed.

use std::collections::BTreeSet;

/// The one-based line numbers of `end` that are new or changed relative to `t0`.
pub fn changed_lines(t0: Option<&[u8]>, end: &[u8]) -> BTreeSet<u32> {
    let Some(t0) = t0 else {
        return (1..=line_count(end)).collect();
    };
    let diff = similar::TextDiff::configure()
        .algorithm(similar::Algorithm::Myers)
        .diff_lines(t0, end);
    let mut out = BTreeSet::new();
    for op in diff.ops() {
        if let similar::DiffOp::Insert {
            new_index, new_len, ..
        }
        | similar::DiffOp::Replace {
            new_index, new_len, ..
        } = *op
        {
            for i in new_index..new_index + new_len {
                out.insert(u32::try_from(i + 1).unwrap_or(u32::MAX));
            }
        }
    }
    out
}

/// The number of lines of `bytes` (a last line without a newline counts).
pub fn line_count(bytes: &[u8]) -> u32 {
    let newlines = bytes.iter().filter(|b| **b == b'\n').count();
    let partial = usize::from(!bytes.is_empty() && !bytes.ends_with(b"\n"));
    u32::try_from(newlines + partial).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_inserted_and_replaced_lines_of_the_end_version_are_changed() {
        let t0 = b"a\nb\nc\n";
        let end = b"a\nB\nc\nd\n";
        assert_eq!(changed_lines(Some(t0), end), BTreeSet::from([2, 4]));
    }

    #[test]
    fn a_new_file_is_changed_on_every_line() {
        assert_eq!(changed_lines(None, b"x\ny"), BTreeSet::from([1, 2]));
    }

    #[test]
    fn a_deletion_changes_no_line_of_the_end_version() {
        assert_eq!(changed_lines(Some(b"a\nb\n"), b"a\n"), BTreeSet::new());
    }
}
