#!/usr/bin/env bash
# scripts/fmt-check.sh — fail (and list them) when gofmt would change a Go
# file. Checks tracked files plus new untracked ones that are not ignored, and
# skips generated code (*.pb.go and files with a "Code generated ... DO NOT
# EDIT." header).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
GO="${GO:-go}"
GOFMT="$("$GO" env GOROOT)/bin/gofmt"

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	mapfile -d '' all < <(git ls-files -z --cached --others --exclude-standard -- '*.go')
else
	mapfile -d '' all < <(find . -name '*.go' -not -path './.git/*' -print0)
fi

src=()
for f in "${all[@]}"; do
	[ -f "$f" ] || continue # deleted in the work tree but still tracked
	case "$f" in *.pb.go) continue ;; esac
	if grep -q -m1 '^// Code generated .* DO NOT EDIT\.$' "$f"; then
		continue
	fi
	src+=("$f")
done

if [ "${#src[@]}" -eq 0 ]; then
	echo "gofmt: no Go files"
	exit 0
fi

bad="$("$GOFMT" -l "${src[@]}")"
if [ -n "$bad" ]; then
	echo "gofmt: these files need formatting (run 'make fmt' or gofmt -w):" >&2
	printf '%s\n' "$bad" >&2
	exit 1
fi
echo "gofmt: ok (${#src[@]} files)"
