#!/usr/bin/env bash
# Fails when a C++ file differs from the checked-in .clang-format (Google base).
# Fix with: clang-format -i $(git ls-files '*.cc' '*.h')
set -euo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files '*.cc' '*.h' 2>/dev/null || find . -name '*.cc' -o -name '*.h' | grep -v '/build')
clang-format --dry-run --Werror $files
echo "format: $(echo "$files" | wc -w) files clean"
