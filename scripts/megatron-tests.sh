#!/usr/bin/env bash
# Run a Megatron-LM checkout's own data tests (tests/unit_tests/data, unmodified) against
# tokenloom's compat layer (tokenloom.megatron.install()), on CPU, offline.
#
#   bash scripts/megatron-tests.sh [OPTIONS] MEGATRON_LM_DIR [PYTEST_ARGS...]
#
#   --baseline             test the checkout's own megatron/core/datasets instead (no
#                          install()): tells which tests can pass on CPU at all
#   --no-pretrain-check    skip the differential checks after pytest (pretrain_gpt.py's
#                          data path, and the real GPTFIMDataset)
#   --pretrain-check-only  run only those checks
#   --junitxml FILE        also keep pytest's JUnit report there
#
# MEGATRON_LM_DIR is a checkout (e.g. `git archive core_v0.16.1`): its megatron/ is the
# megatron package (megatron-core is never installed), its tests run unmodified. What the
# harness does instead of Megatron's tests/unit_tests/conftest.py is in
# scripts/megatron/tokenloom_megatron_pytest.py; the assets that conftest would download
# are made from ../shared/golden/megatron-preprocess/ (scripts/megatron/make_assets.py)
# and shown at /opt/data in a private mount namespace (scripts/megatron/with_opt_data.sh).
# The venvs live in ./.megatron-lm-venv/ (TOKENLOOM_MEGATRON_VENV to use another).
#
# Prints `megatron-lm data tests: N passed, M failed, K skipped (of T)` and the failures;
# then the PASS/FAIL of the pretrain_gpt.py and GPTFIMDataset checks. Exit status 0 only when both are clean.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
baseline=0 pretrain=1 tests=1 junit=""
while [ "$#" -gt 0 ]; do
    case "$1" in
        --baseline) baseline=1 ;;
        --no-pretrain-check) pretrain=0 ;;
        --pretrain-check-only) tests=0 ;;
        --junitxml) junit=$2; shift ;;
        -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
        *) break ;;
    esac
    shift
done
if [ "$#" -lt 1 ] || [ ! -d "$1/megatron/core" ] || [ ! -d "$1/tests/unit_tests/data" ]; then
    echo "usage: bash scripts/megatron-tests.sh [--baseline] MEGATRON_LM_DIR [PYTEST_ARGS...]" >&2
    echo "MEGATRON_LM_DIR must be a Megatron-LM checkout (megatron/core, tests/unit_tests/data)" >&2
    exit 2
fi
megatron=$(cd "$1" && pwd)
shift
golden=${TOKENLOOM_MEGATRON_GOLDEN:-$root/../shared/golden/megatron-preprocess}
if [ ! -f "$golden/tokenizers/gpt2_bpe/vocab.json" ]; then
    echo "megatron-tests.sh: golden set not found at $golden (set TOKENLOOM_MEGATRON_GOLDEN)" >&2
    exit 2
fi
golden=$(cd "$golden" && pwd)

# --- the venv: tokenloom from this checkout, torch's CPU build, what Megatron's data
# tests and megatron/training import; megatron-core itself is never installed. transformers
# is the version the checkout's uv.lock pins (core_v0.16.1's GPT2BPETokenizer does not
# build with transformers 5), so there is one venv per such version.
locked() {  # the version of package $1 in the checkout's uv.lock, if any
    awk -v name="$1" '$0 == "name = \"" name "\"" { getline; gsub(/version = |"/, ""); print; exit }' \
        "$megatron/uv.lock" 2>/dev/null
}
transformers=$(locked transformers)
transformers=${transformers:-5.24.0}
venv=${TOKENLOOM_MEGATRON_VENV:-$root/.megatron-lm-venv/transformers-$transformers}
requirements=(
    -e "$root[all,s3,msc,test]" 'torch==2.13.0' "transformers==$transformers"
    sentencepiece tiktoken 'nltk==3.10.4' 'triton==3.9.0' six einops pybind11 packaging
    pyyaml requests
)
stamp="$venv/.tokenloom-megatron-requirements"
if [ ! -x "$venv/bin/python" ]; then
    mkdir -p "$(dirname "$venv")"
    "${PYTHON:-python3.11}" -m venv "$venv"
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "${requirements[*]}" ] \
    || [ "$root/pyproject.toml" -nt "$stamp" ]; then
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${requirements[@]}"
    printf '%s' "${requirements[*]}" > "$stamp"
fi
# compile_helpers' Makefile asks `python3-config` for the extension suffix: the venv's own
# interpreter must answer, not whichever python3-config comes first on PATH
base=$("$venv/bin/python" -c 'import sys; print(sys.base_prefix)')
version=$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ ! -e "$venv/bin/python3-config" ] && [ -x "$base/bin/python$version-config" ]; then
    ln -s "$base/bin/python$version-config" "$venv/bin/python3-config"
fi
if "$venv/bin/python" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("megatron") is None)' \
    2>/dev/null; then
    echo "megatron-tests.sh: a megatron package is installed in $venv; remove it" \
         "(the checkout's megatron/ must be the one imported)" >&2
    exit 2
fi

# --- assets, environment
work=$(mktemp -d "${TMPDIR:-/tmp}/tokenloom-megatron-tests.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$venv/bin/python" "$root/scripts/megatron/make_assets.py" "$golden" "$work"
export PATH="$venv/bin:$PATH"   # compile_helpers' Makefile runs python3 and python3-config
export PYTHONPATH="$root/scripts/megatron:$megatron"
if ! "$venv/bin/python" -c 'import torchvision.transforms' 2>/dev/null; then
    # no CPU torchvision on the package index here; tools/preprocess_mmdata.py imports
    # torchvision.transforms.ToTensor (unused): scripts/megatron/standins provides it
    PYTHONPATH="$PYTHONPATH:$root/scripts/megatron/standins"
fi
export TOKENLOOM_MEGATRON_GOLDEN="$golden" TOKENLOOM_MEGATRON_BASELINE="$baseline"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
export AWS_EC2_METADATA_DISABLED=true RAY_USAGE_STATS_ENABLED=0 TOKENIZERS_PARALLELISM=false
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} NLTK_DATA="$work/nltk_data"
namespace=(unshare --mount --propagation private --
           bash "$root/scripts/megatron/with_opt_data.sh" "$work/opt-data" "$megatron")
if ! unshare --mount --propagation private -- true 2>/dev/null; then
    echo "megatron-tests.sh: note: no private mount namespace here (unshare --mount failed);" \
         "tests that read /opt/data find no assets" >&2
    namespace=()
fi
cd "$work/cwd"   # holds ./gpt2, the offline stand-in for the hub repo "gpt2"

status=0
if [ "$tests" = 1 ]; then
    report=${junit:-$work/junit.xml}
    rm -f "$report"
    set +e
    # SIGINT at the time limit: pytest stops like on Ctrl-C and still writes its report
    "${namespace[@]}" timeout -s INT -k 120 "${TOKENLOOM_MEGATRON_TIMEOUT:-1800}" \
        python -m pytest -p tokenloom_megatron_pytest --noconftest \
        -c "$root/scripts/megatron/pytest.ini" --rootdir "$megatron" \
        --junitxml "$report" -p no:cacheprovider \
        "$megatron/tests/unit_tests/data" "$@"
    pytest_status=$?
    set -e
    echo
    if [ -f "$report" ]; then
        python "$root/scripts/megatron/summarize.py" "$report" || status=1
    else
        echo "megatron-lm data tests: no report (pytest exited $pytest_status)"
        status=1
    fi
    [ "$pytest_status" = 0 ] || [ "$pytest_status" = 1 ] || status=1
fi
if [ "$pretrain" = 1 ]; then
    "${namespace[@]}" python "$root/scripts/megatron/pretrain_gpt_data.py" \
        "$megatron" --golden "$golden" --work "$work/pretrain" || status=1
    # the real GPTFIMDataset (a subclass overriding the sample hook) under both
    "${namespace[@]}" python "$root/scripts/megatron/fim_differential.py" \
        "$megatron" "$work/opt-data" || status=1
fi
exit "$status"
