//! Tests of the change-set parser: git's `-z` lists, the per-file cut of the diff, the bound's
//! marker, the stored row, and arbitrary bytes (never a panic).

#![allow(clippy::disallowed_methods, reason = "a test reads the spool file back directly")]

use std::path::Path;

use proptest::prelude::*;

use super::*;

fn redactor() -> Redactor {
    Redactor::new(Path::new("/srv/work"), &[Path::new("/home/op")])
}

const PATCH: &str = "diff --git a/new.txt b/new.txt\nnew file mode 100644\n--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n\
diff --git a/old name.txt b/renamed.txt\nsimilarity index 80%\nrename from old name.txt\nrename to renamed.txt\n@@ -1 +1 @@\n-a\n+see /srv/work/x and /home/op/y\n\
diff --git a/pic.png b/pic.png\nnew file mode 100644\nBinary files /dev/null and b/pic.png differ\n";

fn raw() -> RawChangeSet {
    RawChangeSet {
        status: b"A\0new.txt\0R080\0old name.txt\0renamed.txt\0A\0pic.png\0".to_vec(),
        numstat: b"2\t0\tnew.txt\x001\t1\t\0old name.txt\0renamed.txt\0-\t-\tpic.png\0".to_vec(),
        patch: PATCH.as_bytes().to_vec(),
        patch_cut: false,
        list_cut: false,
    }
}

#[test]
fn a_change_set_lists_each_file_with_its_counts_and_its_own_redacted_section() {
    let set = parse(&raw(), &redactor()).unwrap();
    let names: Vec<_> = set.files.iter().map(|f| (f.path.as_str(), f.status, f.added, f.removed, f.binary)).collect();
    assert_eq!(
        names,
        [("new.txt", "added", 2, 0, false), ("renamed.txt", "renamed", 1, 1, false), ("pic.png", "added", 0, 0, true)]
    );
    assert_eq!(set.files[1].old_path.as_deref(), Some("old name.txt"));
    assert!(!set.diff.contains("/srv/work") && !set.diff.contains("/home/op"), "{}", set.diff);
    assert_eq!(set.spans.len(), 3);
    for (span, file) in set.spans.iter().zip(&set.files) {
        let section = &set.diff[span.offset as usize..(span.offset + span.len) as usize];
        assert!(section.starts_with("diff --git "), "{section}");
        assert!(section.contains(&file.path), "{section}");
    }
    assert_eq!(set.spans.iter().map(|s| s.len).sum::<u64>(), set.diff.len() as u64);
    let summary = summary(&set, Method::Git);
    assert_eq!(summary["files_changed"], 3);
    assert_eq!(summary["added"], 3);
    assert_eq!(summary["removed"], 1);
    assert_eq!(summary["binary_files"], 1);
    assert_eq!(summary["files"][1]["old_path"], "old name.txt");
}

#[test]
fn a_cut_diff_ends_with_a_marker_in_the_last_files_section() {
    let mut cut = raw();
    let at = PATCH.find("+see").unwrap() + 2;
    cut.patch.truncate(at);
    cut.patch_cut = true;
    let set = parse(&cut, &redactor()).unwrap();
    assert!(set.truncated);
    assert_eq!(set.files.len(), 3, "the counts still cover every file");
    assert_eq!(set.spans.len(), 2, "only the sections that made it in");
    assert!(set.diff.ends_with("1 of 3 files are shown whole\n"), "{}", set.diff);
    assert!(!set.diff.contains("+se\n"), "the cut is at a whole line: {}", set.diff);
    let last = set.spans.last().unwrap();
    assert_eq!(last.offset + last.len, set.diff.len() as u64);
}

#[test]
fn lists_that_disagree_or_were_cut_are_errors_not_wrong_answers() {
    let mut other = raw();
    other.numstat = b"2\t0\tsomething-else.txt\0".to_vec();
    assert!(parse(&other, &redactor()).unwrap_err().contains("disagree"));
    let mut short = raw();
    short.numstat = b"2\t0\tnew.txt\0".to_vec();
    assert!(parse(&short, &redactor()).unwrap_err().contains("end early"));
    let mut long = raw();
    long.numstat.extend_from_slice(b"1\t1\textra\0");
    assert!(parse(&long, &redactor()).unwrap_err().contains("more files"));
    let mut cut = raw();
    cut.list_cut = true;
    assert!(parse(&cut, &redactor()).is_err());
    let mut bad = raw();
    bad.status = b"X\0new.txt\0".to_vec();
    assert!(parse(&bad, &redactor()).unwrap_err().contains("unknown change status"));
    let mut nan = raw();
    nan.numstat = b"two\t0\tnew.txt\x001\t1\t\0old name.txt\0renamed.txt\0-\t-\tpic.png\0".to_vec();
    assert!(parse(&nan, &redactor()).unwrap_err().contains("not a number"));
}

#[test]
fn sections_that_do_not_match_the_files_leave_the_diff_whole_but_unindexed() {
    let mut odd = raw();
    odd.patch =
        PATCH.replacen("diff --git a/pic.png", "diff --git a/pic.png b/pic.png\ndiff --git a/pic.png", 1).into_bytes();
    let set = parse(&odd, &redactor()).unwrap();
    assert!(set.spans.is_empty());
    assert!(set.diff.contains("Binary files"));
}

#[test]
fn a_recorded_row_keeps_a_small_diff_inline_and_spools_a_large_one() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    crate::files::ensure_private_dir(&state).unwrap();
    let set = parse(&raw(), &redactor()).unwrap();
    let inline = recorded(&state, "agt_1", &set, Method::Git, 1 << 20).unwrap();
    assert_eq!(inline.diff_storage, Some(ResultStorage::Inline));
    assert_eq!(inline.diff_text.as_deref(), Some(set.diff.as_str()));
    assert_eq!((inline.files_changed, inline.added, inline.removed), (3, 3, 1));
    let spooled = recorded(&state, "agt_2", &set, Method::Tree, 16).unwrap();
    assert_eq!(spooled.diff_storage, Some(ResultStorage::Spool));
    assert!(spooled.diff_text.is_none());
    assert_eq!(std::fs::read_to_string(state.join("diffs/agt_2.diff")).unwrap(), set.diff);
    let empty = ChangeSet { files: vec![], diff: String::new(), spans: vec![], truncated: false };
    let none = recorded(&state, "agt_3", &empty, Method::Git, 16).unwrap();
    assert_eq!((none.diff_storage, none.files_changed, none.diff_sha256), (None, 0, None));
}

proptest! {
    #[test]
    fn arbitrary_git_output_never_panics(status in proptest::collection::vec(any::<u8>(), 0..200),
                                         numstat in proptest::collection::vec(any::<u8>(), 0..200),
                                         patch in proptest::collection::vec(any::<u8>(), 0..400),
                                         cut in any::<bool>()) {
        let raw = RawChangeSet { status, numstat, patch, patch_cut: cut, list_cut: false };
        if let Ok(set) = parse(&raw, &redactor()) {
            for span in &set.spans {
                prop_assert!(span.offset + span.len <= set.diff.len() as u64);
                prop_assert!(set.diff.is_char_boundary(span.offset as usize));
            }
        }
    }

    #[test]
    fn well_formed_lists_parse_back(names in proptest::collection::vec("[a-z é/._-]{1,12}", 1..8)) {
        let mut status = Vec::new();
        let mut numstat = Vec::new();
        for (i, n) in names.iter().enumerate() {
            status.extend_from_slice(format!("M\0{n}\0").as_bytes());
            numstat.extend_from_slice(format!("{i}\t{}\t{n}\0", i * 2).as_bytes());
        }
        let raw = RawChangeSet { status, numstat, patch: Vec::new(), patch_cut: false, list_cut: false };
        let set = parse(&raw, &redactor()).unwrap();
        prop_assert_eq!(set.files.len(), names.len());
        for (i, f) in set.files.iter().enumerate() {
            prop_assert_eq!(&f.path, &names[i]);
            prop_assert_eq!((f.added, f.removed), (i as u64, i as u64 * 2));
        }
    }
}
