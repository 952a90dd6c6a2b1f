//! `mptund --version` names the commit the binary was built from (`build.rs`), the
//! record every benchmark result file keeps.

use std::process::Command;

/// The commit out of `mptund 0.1.0 (commit e0214ed8a-dirty)`.
fn printed_commit(version_line: &str) -> Option<&str> {
    let rest = version_line.trim_end().strip_prefix("mptund ")?;
    let (_, commit) = rest.split_once(" (commit ")?;
    commit.strip_suffix(')')
}

fn commit_shaped(commit: &str) -> bool {
    let hash = commit.strip_suffix("-dirty").unwrap_or(commit);
    hash.len() >= 9 && hash.chars().all(|c| c.is_ascii_hexdigit())
}

#[test]
fn version_names_the_commit_of_the_checkout() {
    let output = Command::new(env!("CARGO_BIN_EXE_mptund"))
        .arg("--version")
        .output()
        .expect("run mptund --version");
    assert!(output.status.success(), "{output:?}");
    let line = String::from_utf8(output.stdout).expect("UTF-8");
    let commit = printed_commit(&line).unwrap_or_else(|| panic!("no commit in {line:?}"));
    assert_eq!(commit, mptund::BUILD_COMMIT);

    let head = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output();
    match head {
        Ok(head) if head.status.success() && std::env::var_os("MPTUND_BUILD_COMMIT").is_none() => {
            // Built in a checkout: the hash is a prefix of HEAD's.
            assert!(commit_shaped(commit), "{line:?}");
            let head = String::from_utf8_lossy(&head.stdout);
            let hash = commit.strip_suffix("-dirty").unwrap_or(commit);
            assert!(head.starts_with(hash), "{hash} is not HEAD {head}");
        }
        // A source tarball: git cannot say, and the binary says so.
        _ => assert!(commit == "unknown" || !commit.is_empty(), "{line:?}"),
    }
}

#[test]
fn commit_shapes() {
    assert_eq!(
        printed_commit("mptund 0.1.0 (commit e0214ed8a)\n"),
        Some("e0214ed8a")
    );
    assert!(commit_shaped("e0214ed8a"));
    assert!(commit_shaped("e0214ed8a-dirty"));
    assert!(!commit_shaped("e0214ed"));
    assert!(!commit_shaped("unknown"));
}
