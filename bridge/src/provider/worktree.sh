# The bridge's git runs for worktrees (provider/worktree.rs), one phase per run as $1: create,
# include, submodules, finish, prune, remove. No caller data is ever part of it: paths and
# values come in the environment (AB_*). Exit codes name the step that failed.
set -u
case "$1" in
create)
  cd "$AB_TOP" || exit 20
  if [ "$AB_NEW" = 1 ]; then
    base=$(git rev-parse --verify --quiet --end-of-options "$AB_BASE^{commit}") || exit 21
    git update-ref --create-reflog -m "agent-bridge: branch of task $AB_TASK" "refs/heads/$AB_BRANCH" "$base" "" || exit 22
    start=$base
  else
    base=$AB_BASE
    start=$(git rev-parse --verify --quiet "refs/heads/$AB_BRANCH^{commit}") || exit 24
  fi
  dirty=0
  if [ -n "$(git status --porcelain 2>/dev/null | head -c 1)" ]; then dirty=1; fi
  git worktree add --detach --lock --reason "agent-bridge task $AB_TASK" "$AB_TREE" "$start" >/dev/null || exit 25
  printf 'base %s\nstart %s\ndirty %s\n' "$base" "$start" "$dirty" ;;
finish)
  cd "$AB_TREE" || exit 20
  export GIT_ALTERNATE_OBJECT_DIRECTORIES="$AB_PRIVATE"
  git add -A || exit 30
  if ! git diff --cached --quiet; then
    git commit --no-verify -q -m "$AB_MESSAGE" || exit 31
  fi
  head=$(git rev-parse --verify HEAD) || exit 32
  if [ "$head" != "$AB_START" ]; then
    git merge-base --is-ancestor "$AB_START" "$head" || exit 36
    git rev-list --objects "$head" --not "$AB_START" | git pack-objects --stdout -q \
      | GIT_ALTERNATE_OBJECT_DIRECTORIES= git index-pack --stdin >/dev/null || exit 33
    if git rev-list --objects --no-object-names "$head" --not "$AB_START" \
      | GIT_ALTERNATE_OBJECT_DIRECTORIES= git cat-file --batch-check | grep -q ' missing$'; then exit 34; fi
    git update-ref -m "$AB_MESSAGE" "refs/heads/$AB_BRANCH" "$head" "$AB_START" || exit 35
  fi
  if [ "$head" = "$AB_BASE" ]; then
    git update-ref -d "refs/heads/$AB_BRANCH" "$AB_BASE" || exit 37
  fi
  printf 'head %s\n' "$head"
  printf 'ahead %s\n' "$(git rev-list --count "$head" --not "$AB_BASE" 2>/dev/null)"
  printf 'stat %s\n' "$(git diff --numstat "$AB_BASE" "$head" 2>/dev/null \
    | awk '{ f++; if ($1 != "-") a += $1; if ($2 != "-") d += $2 } END { printf "%d %d %d", f, a, d }')" ;;
include)
  cd "$AB_TOP" || exit 20
  if [ ! -f .worktreeinclude ] || [ -L .worktreeinclude ]; then exit 0; fi
  tmp=$(mktemp -d) || exit 26
  trap 'rm -rf "$tmp"' EXIT
  git ls-files -z --others --ignored --exclude-standard | sort -z > "$tmp/ignored" || exit 26
  git ls-files -z --others --ignored --exclude-from=.worktreeinclude | sort -z > "$tmp/wanted" || exit 26
  comm -z -12 "$tmp/ignored" "$tmp/wanted" | head -z -n "$AB_MAX" ;;
submodules)
  cd "$AB_TREE" || exit 20
  git submodule update --init --recursive --depth 1 >/dev/null 2>&1 || exit 27 ;;
prune)
  cd "$AB_TOP" || exit 20
  git worktree prune || exit 41 ;;
remove)
  cd "$AB_TOP" || exit 20
  git worktree unlock "$AB_TREE" 2>/dev/null
  if ! git worktree remove --force --force "$AB_TREE" 2>/dev/null; then
    chmod -R u+rwX -- "$AB_TREE" 2>/dev/null
    rm -rf -- "$AB_TREE" || exit 40
    git worktree prune || exit 41
  fi ;;
*) exit 2 ;;
esac
