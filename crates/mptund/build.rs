//! Records the git commit the daemon is built from, so that `mptund --version`, `mptund
//! status` and the `mptund_build_info` metric say which code runs, and a benchmark's
//! result file can name the binary that produced it.
//!
//! The commit is `git rev-parse --short=9 HEAD`, with `-dirty` appended when tracked
//! files differ from it. Outside a git checkout (a source tarball, `cargo deb` from an
//! export) it is `unknown`, unless `MPTUND_BUILD_COMMIT` names it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Set by whoever builds outside a checkout (a packager) to name the commit.
const OVERRIDE_VAR: &str = "MPTUND_BUILD_COMMIT";
/// What the crate reads with `env!`.
const OUTPUT_VAR: &str = "MPTUND_COMMIT";
/// Printed when neither git nor the override names the commit.
const UNKNOWN: &str = "unknown";
/// Hex digits of the short hash: 9 keeps it unique in a repository of this size and
/// still reads at a glance (git's own default grows from 7 with the object count).
const SHORT_HASH_DIGITS: &str = "--short=9";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed={OVERRIDE_VAR}");
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());

    let commit = match std::env::var(OVERRIDE_VAR) {
        Ok(named) if !named.trim().is_empty() => sanitize(named.trim()),
        _ => match commit_from_git(&manifest_dir) {
            Some(commit) => commit,
            None => UNKNOWN.to_owned(),
        },
    };
    println!("cargo:rustc-env={OUTPUT_VAR}={commit}");
}

/// The commit of the checkout that holds this crate, and the files whose change means
/// it may have moved (printed as `rerun-if-changed`).
fn commit_from_git(manifest_dir: &Path) -> Option<String> {
    // A tarball unpacked inside some other repository must not take that one's commit:
    // the crate's own manifest has to be tracked.
    git(manifest_dir, &["ls-files", "--error-unmatch", "Cargo.toml"])?;
    let hash = git(manifest_dir, &["rev-parse", SHORT_HASH_DIGITS, "HEAD"])?;
    watch_git_files(manifest_dir);
    // Untracked files do not change what is built; modified tracked ones do.
    let changes = git(
        manifest_dir,
        &["status", "--porcelain", "--untracked-files=no"],
    )?;
    let dirty = if changes.trim().is_empty() {
        ""
    } else {
        "-dirty"
    };
    Some(format!("{}{dirty}", sanitize(hash.trim())))
}

/// Reruns this script when HEAD moves (a commit, a checkout, a reset), when the index
/// changes (`git add`), and when a source the binary is built from changes (so that
/// `-dirty` follows an edit). In a worktree `.git` is a file: git names both the
/// worktree's own directory (HEAD, index) and the common one (refs, packed-refs).
fn watch_git_files(manifest_dir: &Path) {
    let dirs = git(
        manifest_dir,
        &[
            "rev-parse",
            "--path-format=absolute",
            "--git-dir",
            "--git-common-dir",
        ],
    );
    let mut watched: Vec<PathBuf> = Vec::new();
    if let Some(dirs) = dirs {
        let mut lines = dirs.lines().map(PathBuf::from);
        if let (Some(git_dir), Some(common_dir)) = (lines.next(), lines.next()) {
            watched.push(git_dir.join("HEAD"));
            watched.push(git_dir.join("index"));
            watched.push(common_dir.join("packed-refs"));
            if let Some(branch) = git(manifest_dir, &["symbolic-ref", "-q", "HEAD"]) {
                watched.push(common_dir.join(branch.trim()));
            }
        }
    }
    // The sources of every crate of the workspace that the binary links.
    for source in ["src", "../sched/src", "../probe/src", "../../Cargo.lock"] {
        watched.push(manifest_dir.join(source));
    }
    // Cargo reruns the script on every build for a path that does not exist.
    for path in watched.iter().filter(|path| path.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    // `--no-optional-locks`: a status must not rewrite the index, which this script
    // watches, nor race a git command the developer runs meanwhile.
    let output = Command::new("git")
        .arg("--no-optional-locks")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    String::from_utf8(output.stdout).ok()
}

/// Keeps what can stand in a version line and a metric label: hex digits, letters,
/// `.`, `-`, `_`, `+`.
fn sanitize(commit: &str) -> String {
    let kept: String = commit
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+'))
        .take(64)
        .collect();
    if kept.is_empty() {
        UNKNOWN.to_owned()
    } else {
        kept
    }
}
