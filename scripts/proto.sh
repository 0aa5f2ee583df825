#!/usr/bin/env bash
# scripts/proto.sh — protobuf tasks with the pinned tools.
#
#   scripts/proto.sh generate   buf format -w, buf lint, buf generate
#   scripts/proto.sh verify     buf lint, format check, regenerate into a temp
#                               dir and fail if the committed code differs,
#                               buf breaking against HEAD~1 (when it has buf.yaml)
#   scripts/proto.sh breaking   buf breaking against $BREAKING_AGAINST, else
#                               branch main (when on another branch), else HEAD~1
#
# buf comes from tools/buf/go.mod; the protoc-gen-go and protoc-gen-go-grpc
# plugins from tools/buf/plugins/go.mod (a separate module because buf needs a
# newer google.golang.org/protobuf than the protoc-gen-go we generate with).
# The plugins are built into bin/ (gitignored), which goes first on PATH.
# Every step is skipped with a message when the repo has no buf.yaml.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

GO="${GO:-go}"
BUF=("$GO" tool -modfile=tools/buf/go.mod buf)

usage() {
	echo "usage: $0 generate|verify|breaking" >&2
	exit 2
}

[ $# -eq 1 ] || usage
cmd="$1"

if [ ! -f buf.yaml ]; then
	echo "proto $cmd: no buf.yaml, skipped"
	exit 0
fi

build_plugins() {
	"$GO" build -modfile=tools/buf/plugins/go.mod -o "$ROOT/bin/" \
		google.golang.org/protobuf/cmd/protoc-gen-go \
		google.golang.org/grpc/cmd/protoc-gen-go-grpc
}

buf_generate() {
	build_plugins
	PATH="$ROOT/bin:$PATH" "${BUF[@]}" generate "$@"
}

# has_commit REV: REV resolves to a commit that contains buf.yaml.
has_buf_commit() {
	git rev-parse -q --verify "$1^{commit}" >/dev/null 2>&1 &&
		git cat-file -e "$1:buf.yaml" 2>/dev/null
}

case "$cmd" in
generate)
	"${BUF[@]}" format -w
	"${BUF[@]}" lint
	buf_generate
	echo "proto generate: done"
	;;

verify)
	"${BUF[@]}" lint
	if ! "${BUF[@]}" format --diff --exit-code >/dev/null 2>&1; then
		"${BUF[@]}" format --diff || true
		echo "proto verify: .proto files are not formatted; run 'make generate'" >&2
		exit 1
	fi

	# Regenerate into a scratch dir and compare with the working tree, so
	# the check never rewrites files and also sees new/untracked output.
	tmp="$(mktemp -d)"
	trap 'rm -rf "$tmp"' EXIT
	buf_generate -o "$tmp"
	stale=0
	while IFS= read -r -d '' f; do
		rel="${f#"$tmp"/}"
		if [ ! -f "$rel" ]; then
			echo "proto verify: $rel is generated but missing from the repo" >&2
			stale=1
		elif ! cmp -s "$f" "$rel"; then
			echo "proto verify: $rel differs from freshly generated code:" >&2
			diff -u "$rel" "$f" | head -n 40 >&2 || true
			stale=1
		fi
	done < <(find "$tmp" -type f -print0)
	# Generated files in the repo that buf no longer produces.
	while IFS= read -r rel; do
		if [ ! -f "$tmp/$rel" ] && [ -f "$rel" ]; then
			echo "proto verify: $rel is no longer generated (stale)" >&2
			stale=1
		fi
	done < <(git ls-files --cached --others --exclude-standard -- '*.pb.go')
	if [ "$stale" -ne 0 ]; then
		echo "proto verify: generated code is out of date; run 'make generate' and commit api/" >&2
		exit 1
	fi
	echo "proto verify: generated code is up to date"

	if has_buf_commit HEAD~1; then
		"${BUF[@]}" breaking --against '.git#ref=HEAD~1'
		echo "proto verify: no breaking changes against HEAD~1"
	else
		echo "proto verify: no HEAD~1 with buf.yaml, breaking check skipped"
	fi
	;;

breaking)
	against="${BREAKING_AGAINST:-}"
	if [ -z "$against" ]; then
		branch="$(git rev-parse --abbrev-ref HEAD 2>/dev/null || true)"
		if [ "$branch" != main ] && has_buf_commit refs/heads/main; then
			against='.git#branch=main'
		elif has_buf_commit HEAD~1; then
			against='.git#ref=HEAD~1'
		else
			echo "proto breaking: nothing to compare against (no main branch or HEAD~1 with buf.yaml), skipped"
			exit 0
		fi
	fi
	"${BUF[@]}" breaking --against "$against"
	echo "proto breaking: no breaking changes against $against"
	;;

*)
	usage
	;;
esac
