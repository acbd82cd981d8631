//! The failure excerpts of one check run as the run keeps them. The receipt records, per failing
//! test with an excerpt, the digest its failure signature needs (`check_result.failure_digests`,
//! [`digests`]); the excerpts themselves go to a run artifact (`artifacts/<stem>-excerpts.json`,
//! [`write`]), named by size and SHA-256 in the same event, which the feedback file quotes
//! ([`read`]: read back only when it still matches the receipt). Nothing here reads the agent's
//! workspace: the excerpts come from the parsers, already bounded and escaped.

use crate::convergence::signature;
use crate::receipt::bounded::ArtifactRef;
use crate::receipt::events::FailureDigest;
use crate::safefs::{SafeDir, SafeFsError};
use crate::testreport::excerpt::{MAX_EXCERPTS, MAX_EXCERPT_BYTES};
use crate::testreport::Excerpt;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Largest excerpt artifact read back (every excerpt at its bound, escaped for JSON six times over).
const MAX_ARTIFACT_BYTES: u64 = (MAX_EXCERPTS * MAX_EXCERPT_BYTES * 6 + 64 * 1024) as u64;

/// The artifact's content.
#[derive(serde::Serialize, serde::Deserialize)]
struct ExcerptFile {
    excerpts: BTreeMap<String, Excerpt>,
}

/// Most bytes of test ids in one check's digests: the list stays inline in its event (a test past
/// it enters the signature without its excerpt, live and offline alike, since both read this list).
const MAX_DIGESTED_ID_BYTES: usize = 32 * 1024;

/// Per test, the digest of its normalised excerpt ([`signature::excerpt_digest`]), sorted by id,
/// while the ids fit in [`MAX_DIGESTED_ID_BYTES`].
pub fn digests(excerpts: &BTreeMap<String, Excerpt>) -> Vec<FailureDigest> {
    let mut id_bytes = 0;
    excerpts
        .iter()
        .take_while(|(test, _)| {
            id_bytes += test.len();
            id_bytes <= MAX_DIGESTED_ID_BYTES
        })
        .map(|(test, e)| FailureDigest {
            test: test.clone(),
            sha256: signature::excerpt_digest(&e.text),
        })
        .collect()
}

/// Write `excerpts` as `<rel>/<stem>-excerpts.json` in `dir` (the directory `rel` names beneath
/// the run directory). `None`: there is nothing to write.
pub fn write(
    dir: &SafeDir,
    rel: &str,
    stem: &str,
    excerpts: &BTreeMap<String, Excerpt>,
) -> Result<Option<ArtifactRef>, SafeFsError> {
    if excerpts.is_empty() {
        return Ok(None);
    }
    let name = format!("{stem}-excerpts.json");
    let bytes = serde_json::to_vec(&ExcerptFile {
        excerpts: excerpts.clone(),
    })
    .map_err(|e| SafeFsError::Io {
        path: name.clone().into(),
        source: std::io::Error::other(e),
    })?;
    dir.write_atomic(&name, &bytes)?;
    Ok(Some(ArtifactRef {
        path: format!("{rel}/{name}"),
        bytes: bytes.len() as u64,
        sha256: hex::encode(Sha256::digest(&bytes)),
    }))
}

/// The excerpts `artifact` holds, read beneath `run_dir` without following links; `None` when it
/// is absent, too large, or no longer matches the size and digest the receipt recorded.
pub fn read(run_dir: &SafeDir, artifact: &ArtifactRef) -> Option<BTreeMap<String, Excerpt>> {
    let (dir, name) = artifact.path.rsplit_once('/')?;
    if name.starts_with('.') || dir.contains('/') {
        return None;
    }
    let bytes = run_dir
        .subdir(dir)
        .and_then(|d| d.read(name, MAX_ARTIFACT_BYTES))
        .ok()?;
    if bytes.len() as u64 != artifact.bytes
        || hex::encode(Sha256::digest(&bytes)) != artifact.sha256
    {
        return None;
    }
    serde_json::from_slice::<ExcerptFile>(&bytes)
        .ok()
        .map(|f| f.excerpts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn excerpts() -> BTreeMap<String, Excerpt> {
        BTreeMap::from([(
            "t::a".to_string(),
            Excerpt {
                text: "boom at 0x1f".into(),
                cut: false,
            },
        )])
    }

    #[test]
    fn a_written_artifact_reads_back_while_it_matches_the_receipt() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("artifacts")).unwrap();
        let run = SafeDir::open(tmp.path()).unwrap();
        let artifact = write(
            &run.subdir("artifacts").unwrap(),
            "artifacts",
            "0001-check",
            &excerpts(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(artifact.path, "artifacts/0001-check-excerpts.json");
        assert_eq!(read(&run, &artifact), Some(excerpts()));
        std::fs::write(tmp.path().join(&artifact.path), b"{\"excerpts\":{}}").unwrap();
        assert_eq!(read(&run, &artifact), None);
    }

    #[test]
    fn nothing_is_written_without_excerpts() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(
            write(
                &SafeDir::open(tmp.path()).unwrap(),
                "artifacts",
                "0001-check",
                &BTreeMap::new()
            )
            .unwrap(),
            None
        );
    }

    #[test]
    fn digests_stay_within_their_id_bound() {
        let long: BTreeMap<String, Excerpt> = (0..10)
            .map(|i| {
                (
                    format!("{i}{}", "x".repeat(8 * 1024)),
                    Excerpt {
                        text: "boom".into(),
                        cut: false,
                    },
                )
            })
            .collect();
        assert_eq!(digests(&long).len(), 3);
    }

    #[test]
    fn the_digest_is_of_the_normalised_excerpt() {
        assert_eq!(
            digests(&excerpts())[0].sha256,
            signature::excerpt_digest("boom at 0x99")
        );
    }
}
