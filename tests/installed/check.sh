#!/usr/bin/env bash
# babelspec as a user installs it: build the wheel, install it with the pinned torch into a fresh
# environment outside the checkout, and from an empty folder run what the README shows: list the
# languages, train an n-gram on a bundled corpus, generate with it, plan the quick profile, serve
# one request, and run and report a tiny study. `make test-wheel` runs it; .ci/run runs that.
# Usage: tests/installed/check.sh PYTHON   (the checkout's python, which builds the wheel)
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
PY="${1:-python3}"
WORK="$(mktemp -d)"
trap 'kill "${SERVER:-}" 2>/dev/null || true; rm -rf "$WORK"' EXIT
unset BABELSPEC_CORPORA BABELSPEC_DATA_DIR  # an installed user has neither

echo "== build the wheel"
"$PY" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$WORK/dist" "$REPO"
WHEEL="$(ls "$WORK"/dist/babelspec-*.whl)"
echo "$(basename "$WHEEL"): $(du -k "$WHEEL" | cut -f1) kB"

echo "== install it into a fresh environment, with the pinned torch"
"$PY" -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install --quiet --disable-pip-version-check -c "$REPO/constraints.txt" \
    "${WHEEL}[serve]" openai
B="$WORK/venv/bin/babelspec"
mkdir "$WORK/user" && cd "$WORK/user"  # an empty folder, not the checkout
# and a user's own home (after pip, which keeps this machine's settings): a corpora folder under
# the real HOME's data dir (platformdirs.user_data_dir) would be found and used as if installed
export HOME="$WORK/home" XDG_DATA_HOME="$WORK/home/.local/share" XDG_CACHE_HOME="$WORK/home/.cache" \
    XDG_CONFIG_HOME="$WORK/home/.config"
mkdir -p "$HOME"
export BABELSPEC_CACHE="$WORK/cache"

set -x
"$B" --version
"$B" data languages > languages.txt
set +x; head -n 4 languages.txt; echo "... $(wc -l < languages.txt) lines"; set -x
"$B" ngram train --corpus npi -o npi.ngram
"$B" generate --prompt "English: Good morning.
Nepali:" --drafter ngram:npi.ngram --lang npi --max-new-tokens 24 --json > generated.json
"$WORK/venv/bin/python" -c "import json; r = json.load(open('generated.json')); assert r['n_tokens'] > 0, r; print(r['text'][:80])"
"$B" run --profile quick -o q --dry-run
set +x

echo "== serve one request"
PORT="$("$WORK/venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$B" serve --host 127.0.0.1 --port "$PORT" --drafter "npi=ngram:npi.ngram" > serve.log 2>&1 &
SERVER=$!
"$WORK/venv/bin/python" - "$PORT" <<'PY'
import sys, time, openai
client = openai.OpenAI(base_url=f"http://127.0.0.1:{sys.argv[1]}/v1", api_key="unused", max_retries=0, timeout=120)
for _ in range(240):  # the server loads the model first (up to 2 minutes)
    try:
        reply = client.completions.create(model="gemma-3-270m", prompt="English: Thank you.\nNepali:", max_tokens=8)
        break
    except openai.APIConnectionError:
        time.sleep(0.5)
else:
    sys.exit("the server never answered")
assert reply.choices[0].text, reply
print("served:", repr(reply.choices[0].text))
PY
kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=""

echo "== a tiny study and its report"
cat > tiny.toml <<'TOML'
name = "tiny"
languages = ["yor"]
tasks = ["translation"]
gammas = [3]
prompts_per_cell = 2
max_new_tokens = 8
[divergence]
enabled = false
[[drafters]]
name = "bigram"
kind = "ngram"
order = 2
TOML
set -x
"$B" run --config tiny.toml -o tiny --no-progress
"$B" report tiny
set +x
test -s tiny/report.md && test -s tiny/report.html
echo "== the installed wheel works from an empty folder"
