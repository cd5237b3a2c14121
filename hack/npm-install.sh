#!/usr/bin/env bash
# Installs the npm packages of examples/checks-js (the JavaScript provider)
# exactly as package-lock.json pins them, with `npm ci` — and Node.js and
# npm themselves from the distribution when they are missing and the
# script runs as root on Debian or Ubuntu.
#
# It is quick when nothing changed: after a successful install it stores
# the SHA-256 of package.json and package-lock.json in node_modules, and
# skips the install while those files still hash the same. `npm ci` removes
# node_modules first, so the stamp exists only after a complete install.
#
# Usage: hack/npm-install.sh        (from anywhere in the clone)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$root/examples/checks-js"
stamp="$dir/node_modules/.sluice-install.sha256"
min_node_major=18

die() {
	echo "hack/npm-install.sh: $*" >&2
	exit 1
}

need_node() {
	die "$1
examples/checks-js needs Node.js $min_node_major or later and npm. Install them:
  Debian, Ubuntu:  sudo apt-get install nodejs npm
  macOS:           brew install node
  elsewhere:       https://nodejs.org/en/download"
}

# As root on Debian or Ubuntu (a CI machine, say), install what is missing
# from the distribution; elsewhere say how.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
		echo "examples/checks-js: installing nodejs and npm with apt-get"
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null ||
			need_node "apt-get could not install nodejs and npm."
	fi
fi
command -v node >/dev/null 2>&1 || need_node "node not found in PATH."
command -v npm >/dev/null 2>&1 || need_node "npm not found in PATH."
node_major="$(node -p 'process.versions.node.split(".")[0]')" || need_node "node does not run."
((node_major >= min_node_major)) || need_node "node $(node --version) is too old."

hash_inputs() {
	local files=("$dir/package.json" "$dir/package-lock.json")
	if command -v sha256sum >/dev/null 2>&1; then
		cat "${files[@]}" | sha256sum | cut -d' ' -f1
	else
		cat "${files[@]}" | shasum -a 256 | cut -d' ' -f1
	fi
}

[[ -f "$dir/package-lock.json" ]] || die "$dir/package-lock.json is missing; run 'npm install' there once and commit the lock file"
want="$(hash_inputs)"
if [[ -f "$stamp" && "$(<"$stamp")" == "$want" ]]; then
	echo "examples/checks-js: node_modules matches package-lock.json"
	exit 0
fi

echo "examples/checks-js: npm ci"
# --ignore-scripts: no dependency needs an install script (protobufjs's
# only prints version advice), and skipping them keeps the install the
# same on every machine.
(cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) ||
	die "npm ci failed in $dir (is the npm registry reachable? see 'npm config get registry')"
printf '%s\n' "$want" >"$stamp.tmp"
mv "$stamp.tmp" "$stamp"
