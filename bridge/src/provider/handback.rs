//! Hand-back: a worktree task's branch merged into the branch the user's checkout is on, or
//! discarded. The bridge's own git does it (see [`super::gitrun`]): in the sandbox, hooks off,
//! serialized with every other administrative run on the repository.
//!
//! A merge changes nothing unless it can be done whole: the merge is computed without touching
//! the checkout (`git merge-tree`, then `commit-tree`), the files it would change are compared
//! with the checkout's own changes and untracked files, and only then does the checkout move,
//! by a fast-forward (`git merge --ff-only`, which refuses rather than overwrite a local
//! change). The task's branch is deleted once merged, from the tip the task left (a branch
//! moved by someone else is left alone).

use std::ffi::OsString;
use std::path::Path;

use super::worktree::{IDENTITY, Repo, WorktreeError, Worktrees, is_hex, repo_at};

/// How a branch is merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Only when the user's branch has not moved since the task's base: the branch's commits as they are.
    FfOnly,
    /// A merge commit with both histories.
    Merge,
    /// One commit on the user's branch with the branch's whole change.
    Squash,
}

impl Strategy {
    /// Its wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::FfOnly => "ff_only",
            Strategy::Merge => "merge",
            Strategy::Squash => "squash",
        }
    }
}

/// Why a merge or a discard changed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The task's branch no longer exists.
    BranchGone,
    /// The task's branch is not where the task left it (its tip now).
    TaskBranchMoved(String),
    /// The checkout is on no branch (detached, or a branch with no commit yet).
    NoBranch,
    /// `ff_only`, and the user's branch moved away from the task's base.
    NotFastForward,
    /// Both sides change the same lines (the files, up to 20).
    Conflict(Vec<String>),
    /// The checkout has changes, or untracked files, where the merge writes (up to 20).
    Dirty(Vec<String>),
    /// The checkout changed while the merge was being made.
    Raced,
}

/// What a merge did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Merged {
    /// The user's branch now points at this commit.
    Done {
        /// The commit.
        commit: String,
        /// The branch it was merged into (`refs/heads/…` without the prefix).
        into: String,
    },
    /// The user's branch already held the task's branch; nothing moved.
    Already {
        /// The user's branch's tip.
        commit: String,
    },
    /// Nothing changed, and why.
    Refused(Refusal),
}

/// What a discard did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Discarded {
    /// The branch is gone (or was already).
    Done,
    /// Nothing changed, and why.
    Refused(Refusal),
}

/// The script (`sh -c`): values come in the environment. Refusals exit 0 with a `refused`
/// line, so that what the caller is told never comes from git's own words.
const SCRIPT: &str = r#"set -u
cd "$AB_TOP" || exit 50
tip=$(git rev-parse --verify --quiet "refs/heads/$AB_BRANCH^{commit}")
case "$1" in
discard)
  [ -n "$tip" ] || { echo "discarded"; exit 0; }
  if [ -n "$AB_HEAD" ] && [ "$tip" != "$AB_HEAD" ]; then echo "refused moved $tip"; exit 0; fi
  git update-ref -m "agent-bridge: discarded" -d "refs/heads/$AB_BRANCH" "$tip" || exit 61
  echo "discarded" ;;
merge)
  [ -n "$tip" ] || { echo "refused gone"; exit 0; }
  [ "$tip" = "$AB_HEAD" ] || { echo "refused moved $tip"; exit 0; }
  into=$(git symbolic-ref --quiet --short HEAD) || { echo "refused nobranch"; exit 0; }
  ours=$(git rev-parse --verify --quiet "HEAD^{commit}") || { echo "refused nobranch"; exit 0; }
  if git merge-base --is-ancestor "$tip" "$ours"; then
    git update-ref -d "refs/heads/$AB_BRANCH" "$tip" 2>/dev/null
    echo "already $ours"; exit 0
  fi
  case "$AB_STRATEGY" in
  ff_only)
    git merge-base --is-ancestor "$ours" "$tip" || { echo "refused notff"; exit 0; }
    new=$tip ;;
  merge|squash)
    out=$(git merge-tree --write-tree --name-only --no-messages "$ours" "$tip"); rc=$?
    if [ "$rc" = 1 ]; then
      echo "refused conflict"; printf '%s\n' "$out" | sed -n '2,21p' | sed 's/^/file /'; exit 0
    fi
    [ "$rc" = 0 ] || exit 52
    tree=$(printf '%s\n' "$out" | head -n 1)
    if [ "$AB_STRATEGY" = merge ]; then
      new=$(git commit-tree "$tree" -p "$ours" -p "$tip" -m "$AB_MESSAGE") || exit 53
    else
      new=$(git commit-tree "$tree" -p "$ours" -m "$AB_MESSAGE") || exit 53
    fi ;;
  *) exit 2 ;;
  esac
  # The files the merge writes, against the checkout's own changes and untracked files.
  tmp=$(mktemp -d) || exit 54
  trap 'rm -rf "$tmp"' EXIT
  git diff --name-only --no-renames "$ours" "$new" | sort -u > "$tmp/concerned" || exit 54
  { git diff --name-only --no-renames; git diff --name-only --no-renames --cached;
    git ls-files --others --exclude-standard; } | sort -u > "$tmp/local" || exit 54
  busy=$(comm -12 "$tmp/concerned" "$tmp/local")
  # An ignored file where the merge adds one would be overwritten without a word.
  added=$(git diff --name-only --no-renames --diff-filter=A "$ours" "$new") || exit 54
  ignored=$(printf '%s\n' "$added" | while IFS= read -r f; do
    if [ -n "$f" ] && { [ -e "$f" ] || [ -L "$f" ]; }; then printf '%s\n' "$f"; fi; done)
  busy=$(printf '%s\n%s\n' "$busy" "$ignored" | sed '/^$/d' | sort -u | head -n 20)
  if [ -n "$busy" ]; then echo "refused dirty"; printf '%s\n' "$busy" | sed 's/^/file /'; exit 0; fi
  git merge --ff-only --no-stat -q "$new" >/dev/null 2>&1 || { echo "refused raced"; exit 0; }
  git update-ref -d "refs/heads/$AB_BRANCH" "$tip" 2>/dev/null
  printf 'merged %s\ninto %s\n' "$new" "$into" ;;
*) exit 2 ;;
esac
"#;

/// What a failed step of the script was doing.
fn step(code: Option<i32>) -> &'static str {
    match code {
        Some(50) => "entering the repository",
        Some(52) => "computing the merge",
        Some(53) => "writing the merge commit",
        Some(54) => "comparing the merge with the checkout",
        Some(61) => "deleting the branch",
        _ => "an unexpected exit",
    }
}

/// The lines of `out` after `name ` (each), and the first.
fn field<'a>(out: &'a str, name: &str) -> Option<&'a str> {
    out.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
}

fn files(out: &str) -> Vec<String> {
    out.lines().filter_map(|l| l.strip_prefix("file ")).map(str::to_owned).collect()
}

fn refusal(out: &str) -> Option<Refusal> {
    let why = out.lines().find_map(|l| l.strip_prefix("refused "))?;
    let (word, rest) = why.split_once(' ').unwrap_or((why, ""));
    Some(match word {
        "gone" => Refusal::BranchGone,
        "moved" => Refusal::TaskBranchMoved(rest.to_owned()),
        "nobranch" => Refusal::NoBranch,
        "notff" => Refusal::NotFastForward,
        "conflict" => Refusal::Conflict(files(out)),
        "dirty" => Refusal::Dirty(files(out)),
        _ => Refusal::Raced,
    })
}

impl Worktrees {
    async fn hand_back_run(
        &self,
        task_id: &str,
        repo: &Repo,
        phase: &str,
        env: Vec<(OsString, OsString)>,
        write_checkout: bool,
    ) -> Result<String, WorktreeError> {
        self.run_script(task_id, repo, (SCRIPT, phase, step), env, write_checkout).await
    }

    /// Merges `branch` (which the task left at `head`) into the branch the checkout `top` is
    /// on, by `strategy`; `message` is the merge or squash commit's message.
    pub async fn merge(
        &self,
        task_id: &str,
        top: &Path,
        (branch, head): (&str, &str),
        strategy: Strategy,
        message: &str,
    ) -> Result<Merged, WorktreeError> {
        let repo = repo_at(top).await?;
        let mut env: Vec<(OsString, OsString)> = vec![
            ("AB_BRANCH".into(), branch.into()),
            ("AB_HEAD".into(), head.into()),
            ("AB_STRATEGY".into(), strategy.as_str().into()),
            ("AB_MESSAGE".into(), message.into()),
        ];
        env.extend(IDENTITY.iter().map(|(k, v)| (k.into(), v.into())));
        let out = self.hand_back_run(task_id, &repo, "merge", env, true).await?;
        if let Some(refused) = refusal(&out) {
            return Ok(Merged::Refused(refused));
        }
        if let Some(commit) = field(&out, "already").filter(|c| is_hex(c)) {
            return Ok(Merged::Already { commit: commit.to_owned() });
        }
        match (field(&out, "merged").filter(|c| is_hex(c)), field(&out, "into")) {
            (Some(commit), Some(into)) => Ok(Merged::Done { commit: commit.to_owned(), into: into.to_owned() }),
            _ => Err(WorktreeError::new("git did not say what the merge did")),
        }
    }

    /// Deletes `branch` if it is still at `head` (any tip when `head` is `None`: a kept
    /// worktree's branch, whose tip the task never reported).
    pub async fn discard(
        &self,
        task_id: &str,
        top: &Path,
        branch: &str,
        head: Option<&str>,
    ) -> Result<Discarded, WorktreeError> {
        let repo = repo_at(top).await?;
        let env: Vec<(OsString, OsString)> =
            vec![("AB_BRANCH".into(), branch.into()), ("AB_HEAD".into(), head.unwrap_or_default().into())];
        let out = self.hand_back_run(task_id, &repo, "discard", env, false).await?;
        if let Some(refused) = refusal(&out) {
            return Ok(Discarded::Refused(refused));
        }
        if out.lines().any(|l| l == "discarded") {
            Ok(Discarded::Done)
        } else {
            Err(WorktreeError::new("git did not say what the discard did"))
        }
    }
}
